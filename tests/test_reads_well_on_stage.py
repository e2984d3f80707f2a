"""What still read badly (issue 48, item 4, the rest): a reconnecting stream's tile, the
Bus tab at 16 sessions, the fault dialog."""

from __future__ import annotations

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.metrics import Latest
from batchscope.engine.snapshot import SessionView, Snapshot
from batchscope.ui.sessions.video_wall import VideoWall
from batchscope.ui.theme import Look

BARS = [(255, 255, 255), (255, 255, 0), (0, 255, 255), (0, 255, 0), (255, 0, 255), (255, 0, 0)]


def colour_bars() -> np.ndarray:
    """A test stream's last frame: SMPTE-like bars, all of them bright."""
    frame = np.zeros((144, 256, 3), np.uint8)
    for i, rgb in enumerate(BARS):
        frame[:, i * 256 // len(BARS) : (i + 1) * 256 // len(BARS)] = rgb
    return frame


def bars_snapshot(state: str, error: str | None = None) -> Snapshot:
    latest = Latest(colour_bars(), None, seq=5, frame_index=5, latency_ms=10.0)
    view = SessionView(0, "rtsp://cam", state, error, 0.0, 10, 0, {}, {}, latest)
    return Snapshot(
        t=1.0,
        config=RunConfig(),
        running=True,
        paused=False,
        device="d",
        weights="w",
        draws_detections=True,
        policy="all",
        oom_cap=None,
        sessions=[view],
        recent_latency_ms={},
        batch_sizes={},
        throughput_wps=0.0,
        busy=0.0,
        memory={},
        timeline=[],
    )


def test_a_reconnecting_tile_says_so_on_a_dark_plate(qtbot):
    """86228b5 drew "reconnecting (2)" in light grey straight on the last frame: on colour
    bars it was unreadable. Now the text sits on a dark plate."""
    wall = VideoWall(Look())
    qtbot.addWidget(wall)
    wall.resize(512, 288)
    for state, error in (("reconnecting (2)", None), ("error", "connection refused")):
        wall.update_from(bars_snapshot(state, error), {})
        image = wall.grab().toImage()
        # the band through the text: the middle half of the tile's width, ±8 px about the
        # text's line (a little below the centre: it keeps clear of the badge)
        y0 = 144 + 10 - 8
        dark = total = 0
        for y in range(y0, y0 + 16, 2):
            for x in range(200, 312, 2):
                c = image.pixelColor(x, y)
                total += 1
                dark += max(c.red(), c.green(), c.blue()) < 80
        assert dark / total > 0.5, (state, dark / total)  # 86228b5: 0 (bars only)


def bus_snapshot(sessions: int):
    from dataclasses import replace

    from batchscope.engine.snapshot import BusRecords
    from batchscope.engine.stats import ITEM_DTYPE
    from test_ui_bus import records
    from test_ui_many_sessions import snapshot

    base = records()
    items = np.zeros(sessions, ITEM_DTYPE)
    items["session"] = np.arange(sessions)
    items["arrival"], items["start"], items["result"] = (
        base.t0 + 4.0,
        base.t0 + 5.0,
        base.t0 + 5.5,
    )
    batches = base.batches[:1].copy()
    batches["size"] = sessions
    return replace(
        snapshot(sessions, t=8.0), bus=BusRecords(items, batches, base.overwrites, base.t0)
    )


def test_the_bus_names_only_lanes_that_have_room_for_their_name(qtbot):
    """16 lanes in a short pane (the Bus tab with the Segments dock open): 86228b5 named
    12 of them whatever the height, and the names ran into each other."""
    from PySide6.QtGui import QFontMetricsF

    from batchscope.ui.plots.bus import BusView

    for look, height in ((Look(), 260), (Look().toggled_presentation(), 300), (Look(), 900)):
        view = BusView(look)
        qtbot.addWidget(view)
        view.resize(700, height)
        view.show()
        qtbot.waitExposed(view)
        view.update_from(bus_snapshot(16))
        view.update_from(bus_snapshot(16))  # laid out at its size now
        axis = view.plot.getAxis("left")
        ticks = [(y, text) for y, text in axis._tickLevels[0] if text.startswith("S")]
        vb = view.plot.getViewBox()
        ys = sorted(vb.mapViewToScene(pg_point(0, y)).y() for y, _ in ticks)
        font = axis.style["tickFont"] or axis.font()
        need = QFontMetricsF(font).height()
        assert len(ticks) >= 2
        assert min(np.diff(ys)) >= need, (height, len(ticks), np.diff(ys).min(), need)
        if height == 900:
            assert len(ticks) == 16  # room for every name: each named


def pg_point(x: float, y: float):
    from PySide6.QtCore import QPointF

    return QPointF(x, y)


def test_the_fault_dialog_words_its_error_for_a_fault_and_shows_it_whole(qtbot):
    """86228b5 said "fault: stall: session = 7: no such session (this step has sessions 0
    to 2)" (an experiment file's words) in a label cut at the dialog's height."""
    from batchscope.ui.window.faults_menu import FaultDialog

    dialog = FaultDialog("stall", 3)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    dialog.fields["session"].setText("7")
    dialog.fields["for_s"].setText("5")
    dialog.accept()
    text = dialog.error.text()
    assert text == "Session = 7: no such session (the run has sessions 0 to 2)"
    typed = "five seconds, or so, give or take a few, whatever the device allows"
    dialog.fields["session"].setText("0")
    dialog.fields["for_s"].setText(typed)
    dialog.accept()
    assert dialog.error.text().startswith(f"For (s) = {typed!r}: expected a number")
    qtbot.wait(10)  # its resize laid out
    label = dialog.error
    assert label.height() >= label.heightForWidth(label.width())  # every line of it
    assert dialog.rect().contains(label.geometry())
