"""Demo scenarios: their definitions, the timed runner, and what they do to the engine."""

from __future__ import annotations

import pytest

from batchscope.config import RunConfig
from batchscope.ui.scenarios import SCENARIOS, Scenario, ScenarioRunner, find_scenario, step


def test_every_scenario_builds_valid_configs():
    keys = [s.key for s in SCENARIOS]
    assert len(set(keys)) == len(keys)
    for scenario in SCENARIOS:
        assert scenario.caption.endswith((".", "!")) and scenario.steps[0].at_s == 0
        times = [s.at_s for s in scenario.steps]
        assert times == sorted(times)
        config = RunConfig()
        for s in scenario.steps:
            config = config.with_changes(**s.as_dict())  # validates
        assert config.backend == "emulated"


def test_bus_or_taxi_steps():
    s = find_scenario("bus-or-taxi")
    assert [
        (st.at_s, st.as_dict().get("sessions"), st.as_dict().get("policy")) for st in s.steps
    ] == [(0, 3, "oldest"), (10, 6, None), (20, None, "all")]
    assert find_scenario(s.name.upper()) is s
    with pytest.raises(KeyError, match="choose from"):
        find_scenario("nope")


def test_runner_fires_steps_in_time_and_cancels(qtbot):
    runner = ScenarioRunner()
    quick = Scenario(
        "q",
        "Quick",
        "first.",
        (step(0, sessions=2), step(0.05, "second.", sessions=3), step(5, sessions=4)),
    )
    fired, captions = [], []
    runner.step_due.connect(lambda st, i: fired.append(i))
    runner.caption_changed.connect(captions.append)
    runner.start(quick)
    assert fired == [0]
    qtbot.waitUntil(lambda: fired == [0, 1], timeout=2000)
    assert captions == ["first.", "second."]
    runner.cancel()
    assert captions[-1] == "" and runner.scenario is None
    assert not runner._timer.isActive() and runner.pending_steps == 0  # step 2 never fires
    assert fired == [0, 1]


def test_scenario_drives_the_engine_and_a_control_cancels_it(dashboard, qtbot):
    dashboard.start_scenario(find_scenario("small-inputs"))
    engine = dashboard.engine
    qtbot.waitUntil(
        lambda: (engine.config.sessions, engine.config.resolution) == (8, (256, 144)),
        timeout=10_000,
    )
    assert dashboard.caption.isVisibleTo(dashboard)
    assert "256×144" in dashboard.caption.text()
    assert dashboard.sessions.count.value() == 8
    dashboard.controls.policy.setCurrentIndex(0)  # the user takes over
    assert dashboard.presenter.scenarios.scenario is None
    assert not dashboard.caption.isVisibleTo(dashboard)
