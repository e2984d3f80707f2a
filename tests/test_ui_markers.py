"""Change markers on the time plots: placed at the event's time, labels readable, restyled."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from batchscope.engine.metrics import Event
from batchscope.ui.plots.notes import LEFT, RIGHT
from batchscope.ui.plots.time_plots import FpsPlot, TimeWindow
from batchscope.ui.theme import Look, look_from_name

SPAN = TimeWindow(np.empty(0), x_range=(0.0, 60.0))


def _plot(qtbot, look: Look, width: int = 700) -> FpsPlot:
    plot = FpsPlot(look)
    qtbot.addWidget(plot)
    plot.resize(width, 320)
    plot.show()
    qtbot.waitUntil(lambda: plot.plot.getViewBox().width() > width / 2, timeout=5000)
    return plot


def _label(plot: FpsPlot, message: str) -> pg.InfLineLabel:
    return next(m.label for m in plot.markers.markers if m.event.message == message)


def test_a_marker_sits_at_its_events_time_and_reads_whole_at_the_live_edge(qtbot):
    plot = _plot(qtbot, Look())
    # the change was asked for at 55 s and took effect at 59.2 s: the event says 59.2
    plot.add_events([Event(59.2, "config", "sessions 4 → 8"), Event(10.0, "config", "policy")])
    plot.scroll(SPAN)
    at_edge, early = _label(plot, "sessions 4 → 8"), _label(plot, "policy")
    qtbot.waitUntil(lambda: at_edge.toPlainText() == "sessions 4 → 8", timeout=2000)
    assert [m.line.value() for m in plot.markers.markers] == [59.2, 10.0]
    assert at_edge.anchors == [LEFT, LEFT]  # to the left of the line: nothing past the edge
    assert early.anchors == [RIGHT, RIGHT] and early.toPlainText() == "policy"
    assert at_edge.toolTip() == "sessions 4 → 8"
    view = plot.plot.getViewBox()
    right_px = view.mapViewToScene(pg.Point(60.0, 0)).x()
    assert at_edge.sceneBoundingRect().right() <= right_px + 1


def test_a_label_with_no_room_is_cut_with_an_ellipsis_and_keeps_its_text_as_tip(qtbot):
    plot = _plot(qtbot, Look(), width=260)
    message = "resolution: 512 × 288 → 1280 × 720, precision: FP16 → FP32, {braces}"
    plot.add_events([Event(30.0, "config", message)])
    plot.scroll(SPAN)
    label = _label(plot, message)
    qtbot.waitUntil(lambda: label.toPlainText().endswith("…"), timeout=2000)
    assert message.startswith(label.toPlainText()[:-1]) and label.toolTip() == message


def test_switching_to_the_light_theme_restyles_the_marker_labels(qtbot):
    plot = _plot(qtbot, Look())
    plot.add_events([Event(20.0, "config", "policy all → round-robin")])
    plot.scroll(SPAN)
    light = look_from_name("light")
    plot.set_look(light)
    label = _label(plot, "policy all → round-robin")
    assert label.fill.color().name() == pg.mkColor(light.theme.plot).name()
    assert label.color.name() == pg.mkColor(light.theme.event).name()
    plot.scroll(SPAN)
    qtbot.waitUntil(lambda: label.toPlainText() == "policy all → round-robin", timeout=2000)


def test_a_live_change_is_marked_when_the_engine_applied_it(dashboard, qtbot):
    asked_at = dashboard.engine.now()
    dashboard.presenter.change({"sessions": 4})

    def marker():
        return next(
            (m for m in dashboard.fps_plot.markers.markers if "sessions 3 → 4" in m.event.message),
            None,
        )

    qtbot.waitUntil(lambda: marker() is not None, timeout=10_000)
    applied = next(e for e in dashboard.engine.events() if e.message == marker().event.message)
    # events keep their time in ms (round(t, 3)), and rounding keeps order: a change
    # applied 0.03 ms after it was asked at 0.14500 s reads 0.145, not after 0.14500
    assert marker().line.value() == applied.t >= round(asked_at, 3)
