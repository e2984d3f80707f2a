"""The app and its window: start-up, the main window, its menus, settings and exports.

Only the app is imported here (plain Qt): ``batchscope gui`` paints the starting window
before the main window's modules (pyqtgraph, the dashboard) are imported.
"""

from batchscope.ui.window.app import run_gui

__all__ = ["run_gui"]
