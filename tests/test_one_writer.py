"""``engine.config`` has one writer: every change is a delta made under one lock (issue 43,
item 3), and a source added or removed is a change with its own segment (item 9).

The concurrency tests hold a user's change in its backend build (a gate) while another
writer comes in, so the interleaving that lost a change on 86228b5 happens every time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from PySide6.QtCore import Qt

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.player import ExperimentPlayer
from batchscope.experiment import Experiment, load_experiment
from batchscope.ui.live.commands import EngineCommands
from contract import SMALL_EMULATED, wait_for

#: seconds a writer that must wait for the held change is given to run ahead of it (on
#: the old code it did, in a few ms with a tiny clip, and its change was then lost)
RUN_AHEAD_S = 1.0


@pytest.fixture
def clip(tmp_path: Path) -> str:
    """A 10-frame 128x72 video: opened (decoded) in milliseconds."""
    path = tmp_path / "tiny.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30, (128, 72))
    for i in range(10):
        writer.write(np.full((72, 128, 3), 20 * i, np.uint8))
    writer.release()
    return str(path)


@pytest.fixture
def engine():
    e = Engine(RunConfig(**{**SMALL_EMULATED, "sessions": 2}))
    e.open()
    e.start()
    assert wait_for(lambda: min(s.delivered for s in e.snapshot().sessions) > 2)
    yield e
    e.stop()


class HeldBuild:
    """The engine's next backend build waits until :meth:`release` (later builds do not)."""

    def __init__(self, engine: Engine) -> None:
        self.building, self._release = threading.Event(), threading.Event()
        build = engine.devices.build_backend
        calls = []

        def held(config: RunConfig):
            calls.append(config)
            if len(calls) == 1:
                self.building.set()
                assert self._release.wait(30), "the test never released the build"
            return build(config)

        engine.devices.build_backend = held  # type: ignore[method-assign]

    def release(self) -> None:
        self._release.set()


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def specs(engine: Engine) -> tuple[str, ...]:
    return tuple(s.spec for s in engine.sources)


def users_change(engine: Engine, **changes: object) -> tuple[threading.Thread, list[object]]:
    """``changes`` made as the app's controls make them (the UI's command thread), on a
    thread; the list gets each job's (label, error)."""
    commands = EngineCommands(engine, start=False)
    done: list[object] = []
    commands.finished.connect(
        lambda label, error: done.append((label, error)), Qt.ConnectionType.DirectConnection
    )
    commands.apply_changes(dict(changes))
    thread, _ = in_thread(commands.run_queued)
    return thread, done


def experiment(tmp_path: Path, steps: str, base: str = "") -> Experiment:
    path = tmp_path / "e.toml"
    path.write_text(
        'name = "t"\nduration = 30\n[base]\nbackend = "emulated"\nprofile = "laptop-8gb"\n'
        f'precision = "fp16"\nresolution = "256x144"\nsources = ["synthetic"]\n{base}{steps}'
    )
    return load_experiment(str(path))


def play(engine: Engine, exp: Experiment) -> tuple[ExperimentPlayer, list[tuple[int, object]]]:
    steps: list[tuple[int, object]] = []
    player = ExperimentPlayer(engine, exp, on_step=lambda i, e: steps.append((i, e)))
    player.start()
    return player, steps


def test_a_source_added_during_a_change_stays_in_the_config(engine, qapp, clip):
    # 86228b5: the change computed its config before the source was added and wrote it
    # after: the roster played two sources while the config (and report) listed one
    held = HeldBuild(engine)
    change, result = users_change(engine, precision="fp32")
    assert held.building.wait(10)
    add, _ = in_thread(lambda: engine.add_source(clip))
    add.join(RUN_AHEAD_S)  # the old code added it at once; now it waits for the change
    held.release()
    change.join(30)
    add.join(30)
    assert result == [("apply", None)]
    assert specs(engine) == ("synthetic", clip)
    assert engine.config.sources == ("synthetic", clip)
    assert engine.config.precision == "fp32"
    assert engine.report()["config"]["sources"] == ["synthetic", clip]


@pytest.mark.slow
def test_a_step_keeps_a_users_change_and_source_made_meanwhile(engine, qapp, tmp_path, clip):
    # 86228b5: the step read the config before the user's precision change took the lock,
    # then wrote it back whole: the precision reverted to fp16, and the step's re-open of
    # the sources closed the source the user had just added
    exp = experiment(tmp_path, '[[step]]\nat = 0.2\nsessions = 3\nresolution = "512x288"\n')
    held = HeldBuild(engine)
    change, result = users_change(engine, precision="fp32")
    assert held.building.wait(10)
    apply, step_called = engine.apply, threading.Event()

    def step_apply(*args, **kwargs):
        step_called.set()
        return apply(*args, **kwargs)

    engine.apply = step_apply  # type: ignore[method-assign]
    player, steps = play(engine, exp)
    try:
        assert step_called.wait(10)  # the step is on its way in while the change builds
        add, _ = in_thread(lambda: engine.add_source(clip))
        add.join(RUN_AHEAD_S)
        held.release()
        change.join(30)
        add.join(30)
        assert wait_for(lambda: steps, 30)
    finally:
        player.stop()
    assert result == [("apply", None)] and steps == [(0, None)]
    config = engine.config
    assert (config.precision, config.sessions, config.resolution) == ("fp32", 3, (512, 288))
    assert config.sources == specs(engine) == ("synthetic", clip)
    assert engine.sources[1].source.resolution == (512, 288)


def test_a_step_invalid_on_the_running_config_is_a_failed_step(engine, tmp_path):
    # valid in its file's order (the base caps batches), not on the running config (no
    # cap): refused whole on the config of the moment, and its segment says what was
    # tried and why, as the simulator's does (86228b5: a segment with neither)
    exp = experiment(
        tmp_path, '[[step]]\nat = 0.1\npolicy = "dynamic"\ncaption = "dyn"\n', "max_batch = 4\n"
    )
    player, steps = play(engine, exp)
    try:
        assert wait_for(lambda: steps, 10)
    finally:
        player.stop()
    error = steps[0][1]
    assert isinstance(error, str) and "max-batch" in error
    assert engine.config.policy == "all"
    seg = engine.segments.all()[-1]
    assert seg.error == error and seg.changes == {"policy": "dynamic"}
    assert seg.caption == "dyn"


def test_a_source_added_or_removed_opens_a_segment_naming_it(engine):
    # 86228b5: adding a source re-mapped session 1 onto it with no segment and no event
    before = len(engine.segments.all())
    engine.add_source("synthetic:7")
    segments = engine.segments.all()
    assert len(segments) == before + 1
    assert segments[-1].changes == {"sources": ("synthetic", "synthetic:7")}
    assert segments[-1].config.sources == ("synthetic", "synthetic:7")
    assert engine.roster.session(1).source.spec == "synthetic:7"
    engine.remove_source("synthetic")
    segments = engine.segments.all()
    assert len(segments) == before + 2
    assert segments[-1].changes == {"sources": ("synthetic:7",)}
    messages = [e.message for e in engine.events() if e.kind == "config"]
    assert any("synthetic:7" in m and "sources" in m for m in messages)
