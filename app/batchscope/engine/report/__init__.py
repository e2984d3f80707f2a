"""The report: its data built once in the headless core, and the writers that only format it.

``body`` (sessions and overall of a run), ``segment`` (a segment's entry), ``run_report``
(the live report: body, segments, events, memory; the experiment entry), ``rows``
(a segment's cells, and the CSV and JSON of the segment table), ``text`` (the
terminal tables), ``bus_layout`` (where the bus picture puts each batch). The
simulator (``sim/``) reports through the same modules; the HTML writer, which draws
its charts with Qt, is :mod:`batchscope.render.page`.
"""
