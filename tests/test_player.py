"""The experiment player: steps land at their times, a failed step is a segment, stop is prompt."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from batchscope.engine.engine import Engine
from batchscope.engine.player import ExperimentPlayer, first_config
from batchscope.experiment import Experiment, load_experiment

BASE = """
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
fps = 30
sources = ["synthetic"]
"""


def experiment(tmp_path: Path, steps: str, duration: float = 3) -> Experiment:
    path = tmp_path / "e.toml"
    path.write_text(f'name = "t"\ncaption = "a test"\nduration = {duration}\n{BASE}{steps}')
    return load_experiment(str(path))


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class Played:
    """An engine started on the experiment's first config, and its player."""

    def __init__(self, exp: Experiment) -> None:
        self.steps: list[tuple[int, str | None, float]] = []
        self.engine = Engine(first_config(exp))
        self.engine.open()
        self.engine.start()
        self.player = ExperimentPlayer(self.engine, exp, on_step=self._step)
        self.player.start()

    def _step(self, index: int, error: str | None) -> None:
        self.steps.append((index, error, self.engine.now()))

    def close(self) -> None:
        self.player.stop()
        self.engine.stop()


@pytest.fixture
def play():
    made: list[Played] = []

    def start(exp: Experiment) -> Played:
        made.append(Played(exp))
        return made[-1]

    yield start
    for p in made:
        p.close()


STEPS = """
[[step]]
at = 0
sessions = 2
policy = "oldest"
caption = "two, oldest first"
[[step]]
at = 1
sessions = 3
[[step]]
at = 2
policy = "all"
max_batch = 4
caption = "batch all"
"""


def test_steps_land_on_time_and_segments_match_them(tmp_path, play):
    exp = experiment(tmp_path, STEPS)
    p = play(exp)
    assert p.engine.config.sessions == 2 and p.engine.config.policy == "oldest"
    assert p.player.finished.wait(10)
    assert [i for i, _, _ in p.steps] == [0, 1, 2]
    for (_, error, t), step in zip(p.steps[1:], exp.steps[1:], strict=True):
        assert error is None
        assert abs(t - step.at) < 0.2, (t, step.at)
    segments = p.engine.report()["segments"]
    assert [s["changes"] for s in segments] == [
        {"sessions": 2, "policy": "oldest"},
        {"sessions": 3},
        {"policy": "all", "max_batch": 4},
    ]
    assert [s["caption"] for s in segments] == ["two, oldest first", "", "batch all"]
    for seg, step in zip(segments[1:], exp.steps[1:], strict=True):
        assert abs(seg["start_s"] - step.at) < 0.2
    assert segments[-1]["config"]["sessions"] == 3
    assert p.engine.config == exp.config_at(2)


def test_a_failed_step_is_a_segment_with_its_error_and_the_next_step_applies(tmp_path, play):
    exp = experiment(
        tmp_path,
        """
[[step]]
at = 0
sessions = 2
[[step]]
at = 0.5
resolution = "1024x576"
[[step]]
at = 1.5
policy = "oldest"
""",
        duration=2.5,
    )
    p = play(exp)
    assert p.player.finished.wait(10)
    errors = {i: e for i, e, _ in p.steps}
    assert errors[0] is None and errors[2] is None
    assert "1024x576" in errors[1]
    segments = p.engine.report()["segments"]
    assert len(segments) == 3
    assert segments[1]["changes"] == {"resolution": [1024, 576]}
    assert "1024x576" in segments[1]["error"]
    assert segments[1]["config"]["resolution"] == [256, 144]  # went on as before
    assert segments[2]["changes"] == {"policy": "oldest"}
    assert "error" not in segments[2]
    assert p.engine.config.resolution == (256, 144) and p.engine.config.policy == "oldest"


def test_a_first_step_after_0_s_applies_at_its_time(tmp_path, play):
    exp = experiment(tmp_path, "[[step]]\nat = 0.5\nsessions = 1\n", duration=1)
    p = play(exp)
    assert p.engine.config == exp.base
    assert p.player.finished.wait(10)
    segments = p.engine.report()["segments"]
    assert [s["changes"] for s in segments] == [{}, {"sessions": 1}]


def test_stop_mid_experiment_is_prompt_and_applies_nothing_more(tmp_path, play):
    exp = experiment(tmp_path, STEPS, duration=30)
    p = play(exp)
    wait_for(lambda: p.player.steps_done >= 1)
    p.player.stop()  # joins for at most its timeout: alive after it means it overran it
    assert not p.player.alive
    assert not p.player.finished.is_set()
    assert p.engine.config == exp.config_at(0)


def test_stop_before_the_engine_clock_reaches_a_step_while_waiting(tmp_path, play):
    exp = experiment(tmp_path, "[[step]]\nat = 20\nsessions = 1\n", duration=25)
    p = play(exp)
    wait_for(lambda: p.player.alive)
    p.player.stop()  # the wait for the step at 20 s sees the flag, or the join times out
    assert not p.player.alive


def test_an_exception_in_the_loop_is_an_event_not_a_dead_thread(tmp_path, play):
    exp = experiment(tmp_path, "[[step]]\nat = 0.2\nsessions = 1\n", duration=1)
    p = play(exp)
    fired = threading.Event()

    def boom(*_: object) -> None:
        fired.set()
        raise RuntimeError("boom")

    p.player._on_step = boom
    wait_for(fired.is_set)
    wait_for(lambda: not p.player.alive)
    assert any("experiment player: RuntimeError: boom" in e.message for e in p.engine.events())
