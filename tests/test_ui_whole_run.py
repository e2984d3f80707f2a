"""The whole run in view (issue 48, item 3): the time plots show the whole run, its
segments marked, and go back to the live last 60 s.

The engine keeps 300 s of its timeline; the window keeps a bounded, decimated copy of
all of it (``RunHistory``), so a 2-hour run still plots. On 86228b5 the plots showed the
last 60 s only and nothing older than 300 s was anywhere on the UI side.
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine.metrics import MONITOR_PERIOD_S, TIMELINE_SAMPLES, TimelineSample
from batchscope.ui.live import RunHistory
from batchscope.ui.plots import FpsPlot, ThroughputPlot, time_window, whole_window
from batchscope.ui.plots.time_plots import SPAN_S
from batchscope.ui.theme import Look

TWO_HOURS = 2 * 3600.0


def sample(t: float, sessions: int = 2) -> TimelineSample:
    """fps 30 for session 0, 20 for 1; throughput t / 100 (a ramp); rss 1000 MB."""
    fps = {0: 30.0, 1: 20.0}
    return TimelineSample(
        t, {sid: fps[sid] for sid in range(sessions)}, t / 100.0, 0.5, 4.0, {"rss_mb": 1000.0}
    )


def play(history: RunHistory, until: float, stall: tuple[float, float] | None = None) -> deque:
    """Feed ``history`` as the window does: the engine's 300 s timeline, read every
    ~10 s (a snapshot's copy); ``stall``: (from, to) s without samples."""
    timeline: deque = deque(maxlen=TIMELINE_SAMPLES)
    n = int(until / MONITOR_PERIOD_S)
    for k in range(n + 1):
        t = k * MONITOR_PERIOD_S
        if stall is None or not stall[0] <= t < stall[1]:
            timeline.append(sample(t))
        if k % 40 == 0 or k == n:
            history.add(list(timeline))
            assert len(history) <= history.max_points  # bounded all along
    return timeline


def test_two_hours_stay_bounded_and_cover_the_whole_span():
    history = RunHistory(max_points=1000)
    timeline = play(history, TWO_HOURS)
    assert timeline[0].t == pytest.approx(TWO_HOURS - 300 + MONITOR_PERIOD_S)  # the engine's
    assert history.max_points // 2 <= len(history) <= history.max_points
    first, last = history.span
    assert first <= 2 * history.step  # from the start of the run ...
    assert last >= TWO_HOURS - history.step  # ... to its end
    t, fps, throughput, memory = history.arrays()
    assert np.all(np.diff(t) > 0)
    assert np.all(np.diff(t) <= 1.01 * history.step)  # evenly covered: no hole, no pile
    # each point is the mean of its samples: flat series stay flat, a ramp stays on it
    assert np.allclose(fps[0], 30.0) and np.allclose(fps[1], 20.0)
    assert np.allclose(memory["rss_mb"], 1000.0)
    assert np.allclose(throughput, t / 100.0)


def test_a_stall_stays_a_gap_in_the_whole_run():
    history = RunHistory(max_points=400)
    play(history, 1800.0, stall=(600.0, 900.0))
    window = whole_window(history, now=1800.0)
    assert window.whole and window.x_range == (0.0, 1800.0)
    hole = (window.t > 600.0 + 4 * history.step) & (window.t < 900.0 - 4 * history.step)
    assert not np.isfinite(window.fps[0][hole]).any()  # the line breaks over the stall
    assert np.isnan(window.fps[0]).sum() == 1  # one break, nowhere else


def test_the_plots_start_over_at_an_experiment_and_keep_its_segments():
    history = RunHistory(max_points=100)
    history.mark_segment(0, 0.0)
    history.mark_segment(1, 40.0)
    play(history, 100.0)
    history.restart(60.0)
    history.mark_segment(2, 60.0)
    assert len(history) == 0 and history.origin == 60.0
    assert history.segment_starts() == [(2, 60.0)]  # those before it went with the data
    timeline = play(history, 130.0)
    t, *_ = history.arrays()
    assert t[0] >= 60.0 and t[-1] == pytest.approx(130.0, abs=history.step)
    # the live span starts there too, until it has run 60 s, as a fresh run's fills
    live = time_window(list(timeline), now=100.0, since=60.0)
    assert live.x_range == (60.0, 60.0 + SPAN_S) and live.t.min() >= 60.0


def snapshot_at(t: float) -> SimpleNamespace:
    config = RunConfig(sessions=2, fps=30.0, backend="emulated")
    sessions = [SimpleNamespace(id=i, state="running", fps=25.0) for i in range(2)]
    return SimpleNamespace(t=t, config=config, sessions=sessions, throughput_wps=50.0)


def test_the_plots_draw_the_whole_run_with_its_segments_then_the_live_span(qtbot):
    """Ten minutes: the whole run draws all of it (the engine's timeline holds the last
    300 s) with a boundary at each segment; live draws the last 60 s."""
    history = RunHistory()
    for index, start in enumerate((0.0, 120.0, 480.0)):
        history.mark_segment(index, start)
    timeline = play(history, 600.0)
    snap = snapshot_at(600.0)
    fps, throughput = FpsPlot(Look()), ThroughputPlot(Look())
    for plot in (fps, throughput):
        qtbot.addWidget(plot)
        plot.resize(700, 300)
        plot.show()
        plot.set_segments(history.segment_starts())
    whole = whole_window(history, snap.t)
    fps.update_from(snap, whole)
    throughput.update_from(snap, whole)
    assert fps.plot.getViewBox().viewRange()[0] == pytest.approx([0.0, 600.0])
    xs = fps.curves[0].getData()[0]
    assert xs.min() < 1.0 and xs.max() > 599.0  # from the run's first second to now
    assert throughput.curve.getData()[0].min() < 1.0
    lines = fps.segment_lines
    assert sorted((i, line.value()) for i, line in lines.items()) == [
        (0, 0.0),
        (1, 120.0),
        (2, 480.0),
    ]
    live = time_window(list(timeline), snap.t)
    fps.update_from(snap, live)
    assert fps.plot.getViewBox().viewRange()[0] == pytest.approx([540.0, 600.0])
    assert fps.curves[0].getData()[0].min() >= 540.0


@pytest.mark.slow
def test_whole_run_toggles_every_time_plot_and_back_to_live(dashboard, qtbot):
    """On a running dashboard: "Whole run" on one plot switches all three and View's
    item, the plots span the run from its start with each segment's boundary; clicked
    again, they follow the live span."""
    window, engine = dashboard, dashboard.engine
    qtbot.waitUntil(lambda: len(window.presenter.history) >= 8, timeout=15_000)
    window.presenter.change({"sessions": 2}, by_user=False)  # a second segment
    qtbot.waitUntil(lambda: len(engine.segments.all()) >= 2, timeout=15_000)
    window.fps_plot.whole_button.click()
    assert window.presenter.whole_run and window.whole_run_action.isChecked()
    assert all(plot.whole_run for plot in window.time_plots)
    starts = [(s.index, s.start - engine.segments.all()[0].start) for s in engine.segments.all()]
    qtbot.waitUntil(lambda: len(window.fps_plot.segment_lines) >= 2, timeout=5_000)
    drawn = {i: line.value() for i, line in window.fps_plot.segment_lines.items()}
    for index, start in starts[1:]:
        # the snapshot's start_s (engine s) against the log's, both since the first segment
        assert drawn[index] - drawn[0] == pytest.approx(start, abs=1e-6)
    left = window.fps_plot.plot.getViewBox().viewRange()[0][0]
    assert left == pytest.approx(window.presenter.history.origin)
    window.whole_run_action.trigger()  # View › Time plots: whole run, off
    assert not window.presenter.whole_run
    assert not any(plot.whole_run for plot in window.time_plots)
    assert not window.fps_plot.whole_button.isChecked()
