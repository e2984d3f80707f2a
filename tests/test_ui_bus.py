"""The bus view, the neighbour and deadline-drop controls, and faults from the menu."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest

from batchscope.config import RunConfig
from batchscope.engine.report.bus_layout import bus_layout, reasons_text
from batchscope.engine.rules import REASONS
from batchscope.engine.snapshot import BusRecords, SessionView
from batchscope.engine.stats import BATCH_DTYPE, ITEM_DTYPE, OVERWRITE_DTYPE
from batchscope.experiment import ExperimentError, Fault
from batchscope.render.palette import session_colour
from batchscope.ui.sessions.panel import COLUMNS, SessionsPanel
from batchscope.ui.theme import Look
from batchscope.ui.window.faults_menu import KINDS, FaultDialog, inject, parse_fault


def records() -> BusRecords:
    """Two batches on a clock whose origin is 100 s: {S0, S2} full, then {S1} by deadline."""
    t0 = 100.0
    batches = np.zeros(2, BATCH_DTYPE)
    batches["start"], batches["end"], batches["size"] = (
        [t0 + 5.0, t0 + 6.0],
        [t0 + 5.5, t0 + 6.2],
        [2, 1],
    )
    batches["reason"] = [REASONS.index("full"), REASONS.index("deadline")]
    batches["cap"] = [2, 0]
    items = np.zeros(3, ITEM_DTYPE)
    items["session"] = [2, 0, 1]
    items["arrival"] = [t0 + 4.9, t0 + 4.8, t0 + 5.9]
    items["start"] = [t0 + 5.0, t0 + 5.0, t0 + 6.0]
    items["result"] = [t0 + 5.5, t0 + 5.5, t0 + 6.2]
    overwrites = np.zeros(1, OVERWRITE_DTYPE)
    overwrites["session"], overwrites["t"] = [1], [t0 + 5.2]
    return BusRecords(items, batches, overwrites, t0)


def test_the_layout_stacks_each_batch_by_session_with_waits_and_overwrites():
    lay = bus_layout(records(), now=8.0, sessions=[0, 1, 2], span=10.0)
    assert lay.lanes == (0, 1, 2)
    assert len(lay.batches) == 2 and lay.members == ((0, 2), (1,))
    x0, x1, y0 = lay.cells[2]
    assert (x0.tolist(), x1.tolist(), y0.tolist()) == ([5.0], [5.5], [lay.cell_h])  # above S0
    assert lay.cells[0][2].tolist() == [0.0]
    assert lay.waits[0][0].tolist() == pytest.approx([4.8])  # arrival → batch start
    assert lay.batches["wait_ms"].tolist() == pytest.approx([200.0, 100.0])
    assert lay.overwrites[0].tolist() == pytest.approx([5.2])
    assert lay.overwrites[1].tolist() == pytest.approx([lay.lane_y(1) + 0.28])
    assert lay.overwrites[2].tolist() == [1]
    assert lay.reason_counts() == {"full": 1, "deadline": 1}
    assert reasons_text(lay.reason_counts()) == "full 50%, deadline 50%"
    assert lay.busy() == pytest.approx(0.07)
    assert lay.batch_at(5.7) is None and lay.batch_at(6.1) == 1
    assert "left: full (cap 2)" in lay.describe(0) and "S0 S2" in lay.describe(0)


def test_an_expired_window_is_marked_below_its_lane():
    base = records()
    expiries = np.zeros(2, OVERWRITE_DTYPE)
    expiries["session"], expiries["t"] = [3, 0], [base.t0 + 5.6, base.t0 + 1.0]  # one in view
    bus = BusRecords(base.items, base.batches, base.overwrites, base.t0, expiries)
    lay = bus_layout(bus, now=8.0, sessions=[0, 1, 2], span=5.0)
    assert lay.lanes == (0, 1, 2, 3)  # a session seen only by its drop still gets a lane
    assert lay.expiries[0].tolist() == pytest.approx([5.6])
    assert lay.expiries[1].tolist() == pytest.approx([lay.lane_y(3) - 0.28])
    assert lay.expiries[2].tolist() == [3]


def test_lanes_for_a_few_sessions_keep_every_window_in_the_band():
    lay = bus_layout(records(), now=8.0, sessions=[0, 1, 2], span=10.0, lanes_for=[1, 2])
    assert lay.lanes == (1, 2)
    assert sorted(lay.cells) == [0, 1, 2]  # S0's window still fills its cell of the bus
    assert sorted(lay.waits) == [1, 2]  # but only the singled-out get a lane
    assert lay.overwrites[2].tolist() == [1]
    full = bus_layout(records(), now=8.0, sessions=[0, 1, 2], span=10.0)
    assert lay.cell_h == pytest.approx(lay.band[1] / 3)  # a full bus is still all three
    assert full.cell_h == pytest.approx(full.band[1] / 3)
    only_s0 = bus_layout(records(), now=8.0, sessions=[0, 1, 2], span=10.0, lanes_for=[0])
    assert len(only_s0.overwrites[0]) == 0  # S1's overwrite has no lane to sit on


def test_close_marks_thin_to_one_per_marks_width_on_each_lane():
    from batchscope.ui.plots.bus import thin_marks

    # 230 overwrites in 10 s on each of two lanes (23 fps lost), marks 0.1 s wide
    x = np.tile(np.linspace(0.0, 9.99, 230), 2)
    y = np.repeat([-1.0, -2.0], 230)
    tx, ty = thin_marks(x, y, 0.1)
    for lane in (-1.0, -2.0):
        kept = np.sort(tx[ty == lane])
        assert len(kept) == 100  # one per 0.1 s cell
        assert np.diff(kept).min() > 0.05  # none drawn over another
        # every overwrite lies within one mark's width of a drawn mark
        assert np.abs(x[y == lane][:, None] - kept[None, :]).min(axis=1).max() < 0.1
    sparse = np.array([1.0, 3.0]), np.array([-1.0, -1.0])
    assert [a.tolist() for a in thin_marks(*sparse, 0.1)] == [[1.0, 3.0], [-1.0, -1.0]]


def test_at_64_sessions_the_bus_has_lanes_for_the_tiles_sessions(qtbot):
    from batchscope.engine.snapshot import slowest_sessions
    from batchscope.ui.plots.bus import BusView
    from test_ui_many_sessions import snapshot

    base = records()
    items = np.zeros(64, ITEM_DTYPE)
    items["session"] = np.arange(64)
    items["arrival"], items["start"], items["result"] = (
        base.t0 + 4.0,
        base.t0 + 5.0,
        base.t0 + 5.5,
    )
    batches = base.batches[:1].copy()
    batches["size"] = 64
    bus = BusRecords(items, batches, base.overwrites, base.t0)
    from dataclasses import replace

    snap = replace(snapshot(64, t=8.0), bus=bus)
    view = BusView(Look())
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    view.update_from(snap)
    lay = view.layout_now
    assert lay.lanes == tuple(sorted(s.id for s in slowest_sessions(snap.sessions)))
    assert len(lay.lanes) == 16 and 7 in lay.lanes  # S7, the slowest, among them
    assert sum(len(c[0]) for c in lay.cells.values()) == 64  # the bus carries all 64
    assert view.plot.getAxis("left").labelText == "lanes: the 16 slowest of 64"


def test_the_bus_view_draws_one_bar_per_batch_of_the_snapshot(dashboard, qtbot):
    bus = dashboard.bus
    dashboard.show_tab(bus)
    bus.span.setCurrentIndex(bus.span.findData(5.0))
    qtbot.waitUntil(lambda: bus.layout_now is not None and len(bus.layout_now.batches) > 20)
    snap = dashboard.engine.snapshot()
    bus.update_from(snap)
    lay = bus.layout_now
    b = snap.bus.batches
    start, end = b["start"] - snap.bus.t0, b["end"] - snap.bus.t0
    shown = (end >= snap.t - 5.0) & (start <= snap.t)
    starts = np.concatenate([item.opts["x0"] for item in bus.cells])
    assert len(np.unique(starts)) == shown.sum()  # one bar per batch in the visible span
    assert len(starts) == b["size"][shown].sum()  # one cell per window it carried
    for sid in (0, 1, 2):
        item = bus.cells[sid]
        assert len(item.opts["x0"]) > 0
        assert item.opts["brush"].color().name() == pg.mkColor(session_colour(sid)).name()
    assert "why batches left: all waiting 100%" in bus.title.text()
    mid = float((lay.batches["start"][-1] + lay.batches["end"][-1]) / 2)
    assert "left: all waiting" in bus.describe_at(mid)


def test_the_adaptive_cap_shows_under_the_bus(dashboard, qtbot):
    bus = dashboard.bus
    dashboard.show_tab(bus)
    dashboard.presenter.change({"policy": "adaptive", "max_batch": 8, "slo_ms": 200.0})
    qtbot.waitUntil(lambda: bus.state_widget.isVisible(), timeout=10_000)
    caps = bus.cap_curve.yData
    assert caps is not None and caps.max() >= 1  # batches before the switch have no cap (0)


def test_the_neighbour_sliders_send_only_their_field(controls, qtbot):
    controls.neighbours.setValue(2)
    qtbot.waitUntil(lambda: controls.sent == [{"neighbours": 2}])
    controls.neighbour_duty.setValue(0.5)
    qtbot.waitUntil(lambda: controls.sent[-1:] == [{"neighbour_duty": 0.5}])
    assert "busy jobs" in controls.neighbours.toolTip()


def test_values_outside_the_slider_ranges_are_shown_as_they_are(controls):
    config = RunConfig(neighbours=12, neighbour_duty=0.35, drop_after_ms=12.5)
    controls.show_config(config)
    assert controls.neighbours.value() == 12  # the slider offers 0-8; 12 is valid
    assert controls.neighbour_duty.value() == pytest.approx(0.35)
    assert controls.drop_on.isChecked() and controls.drop_ms.text() == "12.5"
    controls.show_config(RunConfig(drop_after_ms=100_000.0))
    assert controls.drop_ms.text() == "100000"
    assert controls.sent == []


def test_the_deadline_drop_is_off_by_default_and_refuses_a_bad_value(controls):
    controls.show_config(RunConfig())
    assert not controls.drop_on.isChecked() and not controls.drop_ms.isEnabled()
    controls.drop_ms.setText("0")
    controls.drop_on.setChecked(True)
    assert controls.sent == []
    assert "drop_after_ms = 0.0: must be greater than 0" in controls.error.text()
    controls.drop_ms.setText("150")
    controls.drop_ms.editingFinished.emit()
    assert controls.sent == [{"drop_after_ms": 150.0}]
    controls.drop_on.setChecked(False)
    assert controls.sent[-1] == {"drop_after_ms": None}


def test_the_sessions_table_shows_expired_windows(qtbot):
    panel = SessionsPanel(Look())
    qtbot.addWidget(panel)
    view = SessionView(0, "synthetic", "running", None, 30.0, 10, 3, {}, {}, None, expired=7)
    panel.update_sessions([view])
    assert panel.table.item(0, COLUMNS.index("Expired")).text() == "7"


def test_a_fault_dialog_refuses_bad_values_in_one_line(qtbot):
    with pytest.raises(ExperimentError, match=r"^fault: burst: factor = 0.0: must be"):
        parse_fault("burst", {"session": "0", "factor": "0", "for_s": "5"}, 3)
    with pytest.raises(ExperimentError, match="session = 5: no such session"):
        parse_fault("stall", {"session": "5", "for_s": "5"}, 3)
    with pytest.raises(ExperimentError, match="for_s = 'x': expected a number"):
        parse_fault("slow_device", {"factor": "2", "for_s": "x"}, 3)
    dialog = FaultDialog("burst", 3)
    qtbot.addWidget(dialog)
    assert {k: e.text() for k, e in dialog.fields.items()} == {
        "session": "0",
        "factor": "3",
        "for_s": "5",
    }
    dialog.fields["for_s"].setText("-1")
    dialog.accept()
    assert dialog.result_fault is None and "For (s) = -1.0" in dialog.error.text()
    dialog.fields["for_s"].setText("2")
    dialog.accept()
    assert dialog.result_fault == Fault("burst", 2.0, 0, 3.0)


def test_a_fault_from_the_menu_is_an_event_on_the_time_plots(dashboard, qtbot):
    names = [a.objectName() for a in dashboard.faults_menu.actions()]
    assert names == [f"fault-{k}" for k in KINDS]
    inject(dashboard.presenter, Fault("stall", 1.0, 1))

    def marked() -> list[str]:
        return [
            m.event.message for m in dashboard.fps_plot.markers.markers if m.event.kind == "fault"
        ]

    qtbot.waitUntil(lambda: "S1 stalls for 1 s" in marked(), timeout=5000)
    qtbot.waitUntil(lambda: "ended: S1 stalls for 1 s" in marked(), timeout=5000)
