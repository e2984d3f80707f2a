"""Files drawn with Qt's painter, offscreen, no window: the HTML report and the plan plot.

Below the UI (the app's File → Export uses them) and above the headless core whose
reports they draw (:mod:`batchscope.engine.report`); ``batchscope run --report``,
``simulate --report`` and ``plan --plot`` write them without the UI.
"""
