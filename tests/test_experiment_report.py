"""A report describes what ran (issue 43, item 8): an experiment played inside a longer
run covers only its own segments, and segment 0 keeps its own caption.

86228b5: File › Export report… titled a 740 s, 27-segment run with the last experiment
("camera-stalls, duration 20 s"), and the player relabelled segment 0 with its caption.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.player import ExperimentPlayer
from batchscope.experiment import Experiment, load_experiment
from batchscope.render.page import build_html
from batchscope.sim.simulated_experiment import simulate_experiment
from contract import SMALL_EMULATED, wait_for

STEPS = """
name = "{name}"
caption = "{name}: the whole idea"
duration = {duration}
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
sources = ["synthetic"]
[[step]]
at = 0
sessions = 2
caption = "{name} begins"
[[step]]
at = 0.3
sessions = 3
caption = "{name} goes on"
"""


def experiment(tmp_path: Path, name: str, duration: float = 0.6) -> Experiment:
    path = tmp_path / f"{name}.toml"
    path.write_text(STEPS.format(name=name, duration=duration))
    return load_experiment(str(path))


@pytest.fixture
def engine():
    e = Engine(RunConfig(**{**SMALL_EMULATED, "sessions": 1}))
    e.open()
    e.start()
    yield e
    e.stop()


def test_an_experiment_started_mid_run_labels_its_own_segments_not_segment_0(engine, tmp_path):
    assert engine.apply(engine.config.with_changes(sessions=4)) is None  # segments 0 and 1
    exp = experiment(tmp_path, "mid")
    # as the app starts one from the menu: its first config as a step, then the player
    assert engine.apply(exp.config_at(0), caption="mid begins", step=True) is None
    player = ExperimentPlayer(engine, exp)
    player.start()
    assert wait_for(lambda: player.finished.is_set())
    player.stop()  # its thread has ended (it finished): joined
    segments = engine.segments.all()
    assert [s.caption for s in segments] == ["", "", "mid begins", "mid goes on"]
    assert segments[2].changes == {"sessions": 2}  # step 0's, as simulated
    assert player.segments() == (2, 3)
    engine.apply({"sessions": 1})  # after it: not the experiment's
    assert player.segments() == (2, 3)


def test_the_report_names_each_experiment_with_its_segments_and_no_title(tmp_path):
    from batchscope.ui.window.export import name_experiments  # (a Qt module)

    report = simulate_experiment(experiment(tmp_path, "a", 6))  # 2 segments: 0-3, 3-6 s
    del report["experiment"]  # a report body with two segments, as a live run's has none
    first, second = experiment(tmp_path, "first"), experiment(tmp_path, "camera-stalls")
    named = name_experiments(report, [(first, (0, 0)), (second, (1, None))])
    assert "experiment" not in named  # neither played the whole run: neither titles it
    assert [(e["name"], e["segments"]) for e in named["experiments"]] == [
        ("first", [0, 0]),
        ("camera-stalls", [1, 1]),  # still playing: up to the last segment
    ]
    assert named["experiments"][1]["text"].startswith("\nname = ")
    text = build_html(named)
    assert "BatchScope report: simulation" in text and "BatchScope report: camera" not in text
    assert "<li>first: segment 0 — first: the whole idea</li>" in text
    assert "<li>camera-stalls: segment 1 — camera-stalls: the whole idea</li>" in text
    assert text.count("<h2>Experiment file:") == 2


def test_one_experiment_that_played_the_whole_run_titles_it(tmp_path):
    from batchscope.ui.window.export import name_experiments

    exp = experiment(tmp_path, "whole", 6)
    report = simulate_experiment(exp)
    del report["experiment"]
    named = name_experiments(report, [(exp, (0, 1))])
    assert named["experiment"]["name"] == "whole" and named["experiment"]["segments"] == [0, 1]
    assert "BatchScope report: whole" in build_html(named)
