"""The notes on the time plots avoid each other and the plot's own "target" label: close
events stack in rows, and those with no free row fold into the note before them, which
then reads "+k" and lists them all in its tooltip."""

from __future__ import annotations

import itertools

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF

from batchscope.engine.metrics import Event
from batchscope.ui.plots.notes import GAP_PX, Note, place_notes
from batchscope.ui.plots.time_plots import FpsPlot, TimeWindow
from batchscope.ui.theme import Look

SPAN = TimeWindow(np.empty(0), x_range=(0.0, 60.0))


def fps_plot(qtbot, width: int = 700, height: int = 320) -> FpsPlot:
    plot = FpsPlot(Look())
    qtbot.addWidget(plot)
    plot.resize(width, height)
    plot.show()
    qtbot.waitUntil(lambda: plot.plot.getViewBox().width() > width / 2, timeout=5000)
    plot.plot.setYRange(0, 34.5, padding=0)  # the target (30 fps) near the top, as live
    return plot


def settled(plot: FpsPlot) -> bool:
    """Every shown label drawn where the last layout put it: beside its own line (the
    scene updates its items' geometry after the event loop runs)."""
    view = plot.plot.getViewBox()
    for m in plot.markers.markers:
        if not m.label.isVisible():
            continue
        line_x = view.mapViewToScene(pg.Point(m.event.t, 0.0)).x()
        rect = m.label.sceneBoundingRect()
        if abs((rect.right() if m.shown[1] else rect.left()) - line_x) > 1.5:
            return False
    return True


def shown_rects(plot: FpsPlot) -> list[tuple[str, QRectF]]:
    return [
        (m.event.message, m.label.sceneBoundingRect())
        for m in plot.markers.markers
        if m.label.isVisible()
    ]


def overlaps(rects: list[tuple[str, QRectF]]) -> list[tuple[str, str]]:
    return [(a, b) for (a, ra), (b, rb) in itertools.combinations(rects, 2) if ra.intersects(rb)]


def test_two_notes_half_a_second_apart_take_two_rows():
    notes = [Note(300.0, 140.0), Note(306.0, 115.0)]
    a, b = place_notes(notes, 640.0, rows=3)
    assert (a.row, b.row) == (0, 1) and not a.left and not b.left
    assert (a.room, b.room) == (140.0, 115.0)  # whole: nothing cut


def test_a_note_keeps_clear_of_what_the_plot_reserves_and_folds_when_no_row_is_free():
    (spot,) = place_notes([Note(600.0, 90.0)], 640.0, rows=2, clear=[(0, 560.0, 620.0)])
    assert spot.row == 1 and spot.left  # no room right of the line; row 0 is the target's
    crowd = [Note(100.0 + 5 * i, 120.0) for i in range(4)]
    placed = place_notes(crowd, 640.0, rows=2)
    assert [p.row for p in placed] == [0, 1, None, None]
    assert [p.host for p in placed[2:]] == [1, 1]
    for p, q in itertools.combinations(
        [(n, s) for n, s in zip(crowd, placed, strict=True) if s.row is not None], 2
    ):
        if p[1].row == q[1].row:
            (a0, a1), (b0, b1) = p[1].extent(p[0].x), q[1].extent(q[0].x)
            assert a1 + GAP_PX <= b0 or b1 + GAP_PX <= a0


def test_a_long_note_is_cut_to_make_room_for_the_next_rather_than_fold_it():
    start, change = place_notes([Note(10.0, 400.0), Note(200.0, 100.0)], 640.0, rows=1)
    assert (start.row, change.row) == (0, 0)  # both shown, in the one row
    assert start.room == 200.0 - GAP_PX - 10.0 and change.room == 100.0


def test_two_events_half_a_second_apart_draw_labels_that_do_not_intersect(qtbot):
    plot = fps_plot(qtbot)
    plot.add_events(
        [
            Event(0.0, "config", "start: batch all waiting, 5 sessions on emulated:laptop-8gb"),
            Event(3.0, "fault", "S2 stalls for 4 s"),
            Event(7.0, "fault", "ended: S2 stalls for 4 s"),
            Event(20.0, "fault", "burst ×4 on S0 for 5 s"),
            Event(20.5, "config", "policy oldest → all"),
        ]
    )
    plot.scroll(SPAN)
    qtbot.waitUntil(lambda: len(shown_rects(plot)) == 5 and settled(plot), timeout=2000)
    texts = {m.event.message: m.label.toPlainText() for m in plot.markers.markers}
    assert texts == {m: m for m in texts}  # each whole
    assert overlaps(shown_rects(plot)) == []


def test_notes_at_the_live_edge_leave_the_target_label_readable(qtbot):
    plot = fps_plot(qtbot)
    plot.add_events(
        [Event(58.5, "config", "sessions 4 → 8"), Event(59.0, "fault", "S1 stalls for 4 s")]
    )
    plot.scroll(SPAN)
    qtbot.waitUntil(lambda: len(shown_rects(plot)) == 2 and settled(plot), timeout=2000)
    qtbot.waitUntil(  # the target label drawn where the notes were told it is
        lambda: plot.keep_clear()[0].contains(plot.target_label.sceneBoundingRect()), timeout=2000
    )
    target = plot.target_label.sceneBoundingRect()
    assert plot.target_label.toPlainText() == "target"
    assert [m for m, r in shown_rects(plot) if r.intersects(target)] == []
    assert overlaps(shown_rects(plot)) == []


def test_a_crowd_of_events_folds_into_a_marker_whose_tooltip_lists_them(qtbot):
    plot = fps_plot(qtbot, height=200)
    events = [Event(10.0 + 0.3 * i, "config", f"sessions {i} → {i + 1}") for i in range(9)]
    plot.add_events(events)
    plot.scroll(SPAN)
    qtbot.waitUntil(lambda: settled(plot), timeout=2000)
    shown = shown_rects(plot)
    assert len(shown) < len(events) and overlaps(shown) == []
    hosts = [
        m for m in plot.markers.markers if m.label.isVisible() and "+" in m.label.toPlainText()
    ]
    assert len(hosts) == 1
    host = hosts[0]
    folded = len(events) - len(shown)
    assert host.label.toPlainText().endswith(f" +{folded}")
    tip = host.label.toolTip()
    listed = [ev.message for ev in events if ev.message in tip]
    hidden = [m.event.message for m in plot.markers.markers if not m.label.isVisible()]
    assert set(hidden) <= set(listed) and host.event.message in listed


def test_a_first_note_too_long_for_its_one_row_ends_before_the_target_label():
    # 1280x800 in presentation mode: one row, a long start note, the target label right;
    # the note used to be laid over the label ("nothing placed yet: the top row anyway")
    (spot,) = place_notes([Note(10.0, 900.0)], 640.0, rows=1, clear=[(0, 560.0, 620.0)])
    assert spot.row == 0 and not spot.left
    a, b = spot.extent(10.0)
    assert a == 10.0 and b <= 560.0 - GAP_PX


def test_notes_keep_their_rows_apart_when_the_plot_gets_shorter(qtbot):
    """A note's place is a fraction of the plot's height: when the plot got shorter (the
    Segments dock opened, the band's key appeared) with the same rows, the notes kept
    their old fractions and ran into each other (the fit check saw it in presentation
    mode at 1920x1080)."""
    plot = fps_plot(qtbot, 700, 520)
    plot.add_events(
        [
            Event(0.0, "config", "start: batch all waiting, 4 sessions"),
            Event(0.4, "config", "policy all → oldest"),
            Event(0.8, "fault", "burst ×4 on S0 for 5 s"),
        ]
    )
    plot.scroll(SPAN)
    qtbot.waitUntil(lambda: len(shown_rects(plot)) == 3 and settled(plot), timeout=2000)
    assert overlaps(shown_rects(plot)) == []
    rows = sorted({m.shown[2] for m in plot.markers.markers})
    plot.resize(700, 420)  # still room for the same rows
    view = plot.plot.getViewBox()
    qtbot.waitUntil(lambda: view.height() < 400, timeout=2000)
    plot.plot.setYRange(0, 34.5, padding=0)
    qtbot.waitUntil(lambda: settled(plot), timeout=2000)
    qtbot.waitUntil(lambda: overlaps(shown_rects(plot)) == [], timeout=2000)
    assert sorted({m.shown[2] for m in plot.markers.markers}) == rows  # the same rows


def test_the_target_label_stays_inside_a_short_plot_when_its_line_is_midway(qtbot):
    """A short plot (1280x800 in presentation mode: a data area under two labels tall)
    whose y range grew past the target (a burst at 60 fps): the line midway has room for
    the label neither above nor under it. It was put under the line and ran out of the
    plot's bottom (the fit check saw it on a busy machine); it now stays inside."""
    plot = FpsPlot(Look(presentation=True))
    qtbot.addWidget(plot)
    plot.resize(700, 130)
    plot.show()
    view = plot.plot.getViewBox()
    label = plot.target_label
    plot.plot.setYRange(0, 60, padding=0)  # the target (30 fps) halfway up
    tall = label.textItem.boundingRect().height()
    qtbot.waitUntil(lambda: view.width() > 350, timeout=5000)
    assert tall < view.height() < 2 * tall  # room for one label, not one each side
    for _ in range(2):  # the layout asks where the label is: keep_clear places it
        plot.scroll(SPAN)
    bounds = view.sceneBoundingRect().adjusted(-2, -2, 2, 2)
    qtbot.waitUntil(lambda: bounds.contains(label.sceneBoundingRect()), timeout=2000)
    assert plot.keep_clear()[0].contains(label.sceneBoundingRect())
