"""Many sessions (16–256): a slider over the engine's range, an fps band with the slowest named,
the slowest sessions' tiles first, sorted overwritten bars; and a source's note on its rows."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from batchscope.config import KNOBS, RunConfig
from batchscope.engine.metrics import Latest, TimelineSample
from batchscope.engine.roster import SourceSlot
from batchscope.engine.snapshot import SessionView, Snapshot
from batchscope.render.palette import session_colour
from batchscope.ui.plots.distributions import MIN_BAR_PX, BatchSizeBars, OverwrittenBars, bar_width
from batchscope.ui.plots.time_plots import BAND_ABOVE, FpsPlot, fps_band, time_window
from batchscope.ui.sessions.panel import COLUMNS, NOTE_MARK, SessionsPanel
from batchscope.ui.sessions.video_wall import MAX_TILES, VideoWall
from batchscope.ui.theme import Look

STATE = COLUMNS.index("State")


def _fps(sid: int) -> float:
    """Session 7 is the slowest; the others spread between 20 and 29.9 fps."""
    return 4.0 if sid == 7 else 20.0 + (sid * 37 % 100) / 10


def snapshot(n: int, t: float = 10.0) -> Snapshot:
    frame = np.zeros((72, 128, 3), np.uint8)
    sessions = [
        SessionView(
            i,
            "clip.mp4",
            "running",
            None,
            _fps(i),
            10,
            i % 5,
            {},
            {},
            Latest(frame, None, 1, 1, 5.0),
        )
        for i in range(n)
    ]
    timeline = [
        TimelineSample(k * 0.5, {i: _fps(i) + 0.1 * (k % 3) for i in range(n)}, 0.0, 0.0, 1.0, {})
        for k in range(int(t / 0.5) + 1)
    ]
    return Snapshot(
        t=t,
        config=RunConfig(sessions=n),
        running=True,
        paused=False,
        device="d",
        weights="w",
        draws_detections=False,
        policy="all",
        oom_cap=None,
        sessions=sessions,
        recent_latency_ms={},
        batch_sizes={},
        throughput_wps=0.0,
        busy=0.0,
        memory={},
        timeline=timeline,
    )


def _fed_fps_plot(qtbot, n: int) -> FpsPlot:
    plot = FpsPlot(Look())
    qtbot.addWidget(plot)
    plot.resize(800, 400)
    plot.show()
    snap = snapshot(n)
    plot.update_from(snap, time_window(snap.timeline, snap.t))
    return plot


def test_the_slider_covers_the_engines_whole_session_range(qtbot):
    panel = SessionsPanel(Look())
    qtbot.addWidget(panel)
    assert (
        (panel.count.minimum(), panel.count.maximum())
        == (1, 256)
        == (
            KNOBS["sessions"].lo,
            KNOBS["sessions"].hi,
        )
    )
    panel.show_count(64)
    assert panel.count.value() == 64
    asked: list[int] = []
    panel.sessions_changed.connect(asked.append)
    panel.count.setValue(256)
    qtbot.waitUntil(lambda: asked == [256], timeout=10_000)


@pytest.mark.parametrize("n", [1, 4, BAND_ABOVE])
def test_up_to_a_dozen_sessions_get_a_line_each(qtbot, n):
    plot = _fed_fps_plot(qtbot, n)
    assert not plot.banded
    assert sorted(sid for sid, c in plot.curves.items() if c.isVisible()) == list(range(n))
    assert plot.title.text() == "Frames per second, per session"


@pytest.mark.parametrize("n", [BAND_ABOVE + 1, 64, 256])
def test_above_a_dozen_sessions_fps_is_a_band_with_the_slowest_named(qtbot, n):
    plot = _fed_fps_plot(qtbot, n)
    assert plot.banded and plot.median.isVisible() and plot.slow.isVisible()
    assert not any(c.isVisible() for c in plot.curves.values())
    assert plot.slowest_id == 7
    assert plot.title.text().startswith("Slowest S7 4.0 fps · ")
    assert plot.key.isVisibleTo(plot) and "slowest:&nbsp;S7&nbsp;(4.0&nbsp;fps)" in plot.key.text()
    # the key is a row under the title, never a box on the data
    assert plot.key.geometry().bottom() <= plot.widget.geometry().top()
    y = plot.slow.getData()[1]
    assert y[-1] == pytest.approx(_fps(7) + 0.1 * (20 % 3))
    lo, hi = plot.band_lo.getData()[1], plot.band_hi.getData()[1]
    assert lo[0] == pytest.approx(4.0) and hi[0] == pytest.approx(max(_fps(i) for i in range(n)))
    # a live theme change recolours the key's chips, the slowest's in its session colour
    from batchscope.ui.theme import look_from_name

    light = look_from_name("light")
    plot.set_look(light)
    assert f"color:{light.theme.accent}" in plot.key.text()
    assert f"color:{session_colour(7)}" in plot.key.text()
    # back to a few sessions: lines again, no band
    snap = snapshot(4)
    plot.update_from(snap, time_window(snap.timeline, snap.t))
    assert not plot.banded and sum(c.isVisible() for c in plot.curves.values()) == 4
    assert not plot.key.isVisibleTo(plot)


def test_the_band_is_min_median_max_per_sample_and_skips_gaps():
    band = fps_band(
        [
            np.array([1.0, np.nan, 5.0]),
            np.array([3.0, np.nan, np.nan]),
            np.array([2.0, np.nan, 7.0]),
        ]
    )
    assert band.lo[0] == 1.0 and band.mid[0] == 2.0 and band.hi[0] == 3.0
    assert np.isnan(band.mid[1])
    assert (band.lo[2], band.mid[2], band.hi[2]) == (5.0, 6.0, 7.0)


def test_past_sixteen_sessions_the_slowest_get_the_tiles_slowest_first(qtbot):
    wall = VideoWall(Look())
    qtbot.addWidget(wall)
    wall.resize(800, 450)
    snap = snapshot(64)
    snap.sessions[30] = SessionView(30, "x.mp4", "error", "decode failed", 0.0, 0, 0, {}, {}, None)
    wall.update_from(snap, {})
    shown = [t.sid for t in wall._tiles]
    expected = sorted(range(64), key=lambda i: (0.0 if i == 30 else _fps(i), i))[:MAX_TILES]
    assert shown == expected and shown[:2] == [30, 7]
    # as many sessions as tiles: all of them, by id
    wall.update_from(snapshot(MAX_TILES), {})
    assert [t.sid for t in wall._tiles] == list(range(MAX_TILES))


@pytest.mark.parametrize("n", [64, 256])
def test_many_overwritten_bars_are_sorted_without_session_ticks(qtbot, n):
    bars = OverwrittenBars(Look())
    qtbot.addWidget(bars)
    bars.update_from(snapshot(n))
    heights = list(bars.bars.opts["height"])
    assert heights == sorted(heights, reverse=True) and len(heights) == n
    assert list(bars.bars.opts["x"]) == list(range(n))
    assert bars.plot.getAxis("bottom")._tickLevels is None
    assert bars.plot.getAxis("bottom").labelText == "sessions, most overwritten first"
    assert "most S4 (4)" in bars.title.text()
    bars.update_from(snapshot(4))
    assert list(bars.bars.opts["x"]) == [0, 1, 2, 3]
    assert bars.plot.getAxis("bottom")._tickLevels == [[(float(i), f"S{i}") for i in range(4)]]


def test_a_sources_note_marks_its_session_rows(qtbot):
    panel = SessionsPanel(Look())
    qtbot.addWidget(panel)
    note = "long file: looping its first 25 frames (of 40)"
    slots = [
        SourceSlot("/v/long.mp4", SimpleNamespace(name="long.mp4", note=note)),
        SourceSlot("/v/ok.mp4", SimpleNamespace(name="ok.mp4", note="")),
    ]
    views = [
        SessionView(i, ["long.mp4", "ok.mp4"][i % 2], "running", None, 30.0, 1, 0, {}, {}, None)
        for i in range(3)
    ]
    panel.update_sessions(views, slots)
    states = [panel.table.item(r, STATE) for r in range(3)]
    assert [s.text() for s in states] == ["running" + NOTE_MARK, "running", "running" + NOTE_MARK]
    # the tip says the state whole (a narrow panel cuts it), then the note
    assert states[0].toolTip() == f"running{NOTE_MARK}\n{note}"
    assert states[1].toolTip() == "running"
    assert panel.table.item(0, COLUMNS.index("Source")).toolTip() == f"/v/long.mp4\n{note}"


def test_the_note_of_an_opened_source_is_said_in_the_status_line_and_on_its_row(
    qtbot, tiny_video: Path, ui_settings, monkeypatch
):
    from batchscope.engine.engine import Engine
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.window.main_window import MainWindow

    # room for 20 of the clip's 60 frames at 256×144: it loops its first 20
    monkeypatch.setattr(sys.modules["batchscope.engine.roster"], "CACHE_BYTES", 20 * 256 * 144 * 3)
    config = RunConfig(
        sources=(str(tiny_video),),
        sessions=2,
        backend="emulated",
        profile="laptop-8gb",
        precision="fp16",
        resolution=(256, 144),
    )
    window = MainWindow(Engine(config), Look(), ui_settings, devices=device_choices(gpus=[]))
    qtbot.addWidget(window)
    window.show()
    window.start()
    try:
        qtbot.waitUntil(
            lambda: "looping its first 20" in window.status_line.message.text(), timeout=15_000
        )
        assert window.status_line.message.text().startswith("tiny.mp4: long file")
        table = window.sessions.table
        qtbot.waitUntil(lambda: table.rowCount() == 2, timeout=30_000)
        assert table.item(0, STATE).text().endswith(NOTE_MARK)
        assert "looping its first 20" in table.item(1, STATE).toolTip()
        # said once: a later message stays through the next ticks (each looks at the notes)
        window.status_line.show_message("something else", "info")
        seen = window.tick_stats.ticks
        qtbot.waitUntil(lambda: window.tick_stats.ticks >= seen + 3, timeout=30_000)
        assert window.status_line.message.text() == "something else"
    finally:
        window.close()


def _bar_px(qtbot, sizes: dict[int, int]) -> float:
    """The width on screen (px) of the batch-size bars for ``sizes`` on a 320 px card."""
    from dataclasses import replace

    bars = BatchSizeBars(Look())
    qtbot.addWidget(bars)
    bars.resize(320, 240)
    bars.show()
    view = bars.plot.getViewBox()
    qtbot.waitUntil(lambda: view.width() > 200, timeout=5000)
    snap = replace(snapshot(64), batch_sizes=sizes)
    bars.update_from(snap)
    width = bars.bars.opts["width"]
    left, right = view.viewRange()[0]
    return width * view.width() / (right - left)


def test_a_lone_batch_size_at_64_sessions_is_a_bar_not_a_sliver(qtbot):
    """64 sessions, every batch full: one bar among 64 sizes was 1-2 px wide."""
    assert _bar_px(qtbot, {64: 500}) >= MIN_BAR_PX - 0.01


def test_bars_of_every_size_keep_their_gaps(qtbot):
    px = _bar_px(qtbot, {k: 10 for k in range(1, 65)})
    unit = px / 0.7
    assert px < unit  # 0.7 of a unit: neighbours never touch
    assert bar_width(np.array([60.0, 62.0, 64.0]), 64.2, 280.0) == pytest.approx(1.376, abs=1e-3)
    # (6 px in units: 1.376; the bars 2 apart leave room for 1.6)
    assert bar_width(np.array([63.0, 64.0]), 64.2, 280.0) == pytest.approx(0.8)
    assert bar_width(np.array([3.0]), 4.2, 280.0) == 0.7  # wide already


def test_a_tile_badge_fits_its_tile(qapp):
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QFont, QFontMetrics

    from batchscope.ui.sessions.video_wall import _pill_width, badge_label

    font = QFont("DejaVu Sans")
    font.setBold(True)
    label, size = badge_label(3, 7.0, font, QRectF(0, 0, 320, 180))
    assert (label, size) == ("S3   7.0 fps", 180 / 11)  # a large tile: whole, at full size
    label, _ = badge_label(11, 7.0, font, QRectF(0, 0, 60, 34))
    assert label == "S11 7.0"  # a small one: without the unit
    for width in (160.0, 100.0, 85.0):  # 64 sessions on a 1280x800 screen: ~85 px tiles
        rect = QRectF(0, 0, width, width * 9 / 16)
        label, size = badge_label(11, 7.0, font, rect)
        font.setPointSizeF(size)
        assert _pill_width(QFontMetrics(font), label) <= width - 10


def test_batch_size_ticks_step_by_powers_of_two_to_fit():
    from batchscope.ui.plots.distributions import nice_step

    assert nice_step(4, 8) == 1
    assert nice_step(64, 8) == 8
    assert nice_step(64, 5) == 16
    assert nice_step(256, 30) == 16
