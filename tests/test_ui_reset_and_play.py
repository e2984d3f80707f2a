"""Reset and play (issue 48, item 1): an experiment started from the menu mid-run starts
as a fresh ``run --experiment`` would: statistics from zero, the time plots from its
start, while the run before it stays in the Segments table.

On 86228b5 the time plots went on showing the minute before the experiment, and the
sessions' counts (delivered, overwritten) and the whole-run figures went on from the
engine's start.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchscope.experiment import load_experiment

CHANGE_MS = 20_000
EXPERIMENT = "adaptive-budget"  # 8 sessions, adaptive policy, 512x288: a step at 0 s


@pytest.mark.slow
def test_an_experiment_from_the_menu_starts_plots_and_statistics_afresh(dashboard, qtbot):
    window, engine = dashboard, dashboard.engine
    window.show_segments()
    window.presenter.change({"policy": "oldest"}, by_user=False)  # a second segment
    qtbot.waitUntil(lambda: len(engine.segments.all()) == 2, timeout=CHANGE_MS)
    # the segment before has figures: 2 s past its settling second
    qtbot.waitUntil(
        lambda: engine.clock() - engine.segments.all()[1].start > 3.0, timeout=CHANGE_MS
    )
    assert window.presenter.history.origin == 0.0
    before = {s.id: s.delivered for s in engine.snapshot("run").sessions}
    assert min(before.values()) > 30  # a second and more of each session counted

    caption = load_experiment(EXPERIMENT).caption
    action = next(a for a in window.experiments_menu.actions() if a.text().startswith(EXPERIMENT))
    action.trigger()  # Experiments › adaptive-budget, as a user picks it mid-run
    qtbot.waitUntil(lambda: window.presenter.history.origin > 0.0, timeout=CHANGE_MS)
    segments = engine.segments.all()
    assert [s.caption for s in segments][2:] == [caption]  # no extra "statistics reset" one
    origin = window.presenter.history.origin
    snap = engine.snapshot()
    assert snap.segment.index == 2 and snap.segment.start_s == pytest.approx(origin)

    # the time plots start at the experiment's start, and fill from the left as a fresh
    # run's do
    window.show_tab(window.throughput)
    qtbot.waitUntil(lambda: np.size(window.throughput.curve.getData()[0]) >= 4, timeout=5_000)
    window.show_tab(window.fps_plot)
    qtbot.waitUntil(lambda: len(window.fps_plot.curves) >= 8, timeout=CHANGE_MS)
    qtbot.waitUntil(
        lambda: all(np.size(c.getData()[0]) >= 4 for c in window.fps_plot.curves.values()),
        timeout=5_000,
    )
    for curve in [*window.fps_plot.curves.values(), window.throughput.curve]:
        xs = curve.getData()[0]
        assert np.nanmin(xs) >= origin  # 86228b5: the minute before it
    left = window.fps_plot.plot.getViewBox().viewRange()[0][0]
    assert left == pytest.approx(origin)
    assert sorted(window.fps_plot.segment_lines) == [2]  # the earlier ones went with them

    # statistics from zero at its start: no session has delivered more than its fps
    # allows since then (86228b5: the counts went on from the engine's start)
    run = engine.snapshot("run")
    since = run.t - origin
    for s in run.sessions:
        assert s.delivered <= 30.0 * since + 5, (s.id, s.delivered, since)
    assert run.sessions[0].delivered < before[0] + 30.0 * since - 30

    # the run before it stays in the Segments table, with its figures
    qtbot.waitUntil(lambda: window.segment_table.table.rowCount() >= 3, timeout=CHANGE_MS)
    rows = {seg["index"]: seg for seg in window.segment_table.segments}
    assert {0, 1, 2} <= rows.keys()
    assert rows[1]["overall"] is not None and not rows[1]["too_short"]  # its figures kept
