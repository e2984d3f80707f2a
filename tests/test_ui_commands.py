"""The UI's command thread: jobs in order, errors reported, and a stop from every state."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from batchscope.config import RunConfig
from batchscope.ui.live.commands import STOP_TIMEOUT_S, EngineCommands
from contract import wait_for


class FakeEngine:
    """Applies a config at once, or (``hold``) calls ``on_done`` only when released."""

    def __init__(self) -> None:
        self.config = RunConfig()
        self.running = True
        self.applied: list[RunConfig] = []
        self.hold = False
        self.pending: list[Callable[[str | None], None]] = []

    def apply(
        self,
        change: RunConfig | Mapping[str, Any],
        on_done: Callable[[str | None], None] | None = None,
    ) -> None:
        new = change if isinstance(change, RunConfig) else self.config.with_changes(**change)
        self.applied.append(new)
        self.config = new
        if self.hold:
            self.pending.append(on_done)
        elif on_done:
            on_done(None)


@pytest.fixture
def commands(qapp):
    c = EngineCommands(FakeEngine())
    c.results = []
    c.finished.connect(lambda label, error: c.results.append((label, error)))
    yield c
    c.stop()


def blocker(started: threading.Event, release: threading.Event) -> Callable[[], None]:
    def job() -> None:
        started.set()
        release.wait()

    return job


def test_jobs_run_in_order_and_an_exception_is_reported_not_fatal(commands, qtbot):
    def boom() -> None:
        raise OSError("disk gone")

    commands.submit("one", lambda: None)
    commands.submit("two", boom)
    commands.submit("three", lambda: "refused")
    qtbot.waitUntil(lambda: len(commands.results) == 3, timeout=10_000)
    assert commands.results == [("one", None), ("two", "OSError: disk gone"), ("three", "refused")]
    assert commands.alive and not commands.busy


def test_config_changes_coalesce_while_a_job_runs(commands, qtbot):
    started, release = threading.Event(), threading.Event()
    commands.submit("slow", blocker(started, release))
    assert started.wait(10)
    commands.apply_changes({"sessions": 2})
    commands.apply_changes({"sessions": 3, "policy": "oldest"})
    assert commands.busy
    release.set()
    qtbot.waitUntil(lambda: len(commands.results) == 2, timeout=10_000)
    assert commands._engine.applied == [RunConfig(sessions=3, policy="oldest")]
    assert commands.results[-1] == ("apply", None)


def test_stop_when_idle(commands):
    # stop joins for at most STOP_TIMEOUT_S: None and a dead thread mean the idle loop woke
    assert commands.stop() is None and not commands.alive


def test_stop_drops_queued_jobs(commands):
    started, release = threading.Event(), threading.Event()
    ran = []
    commands.submit("slow", blocker(started, release))
    commands.submit("queued", lambda: ran.append(1))
    assert started.wait(10)
    # the running job ends once stop has begun (not after a fixed delay, which a loaded
    # machine could let pass before stop starts): stop waits for it and drops the queued one
    threading.Thread(
        target=lambda: wait_for(lambda: commands.terminating) and release.set()
    ).start()
    assert commands.stop() is None  # the job ended within STOP_TIMEOUT_S
    assert ran == [] and not commands.alive
    commands.submit("after", lambda: ran.append(2))
    assert ran == [] and not commands.busy


def test_stop_while_an_apply_waits_for_the_backend(commands, qtbot):
    commands._engine.hold = True  # the backend never finishes building
    commands.apply_changes({"precision": "fp32"})
    qtbot.waitUntil(lambda: bool(commands._engine.pending), timeout=10_000)
    # the wait sees the terminate flag: left to itself it waits APPLY_TIMEOUT_S (180 s), and
    # stop would give up on it after STOP_TIMEOUT_S and return its label
    assert commands.stop() is None and not commands.alive
    assert commands.results == []  # nothing is reported after stop


def test_a_job_that_outlives_stop_is_abandoned_and_reported(commands, caplog):
    started, release = threading.Event(), threading.Event()
    commands.submit("build backend", blocker(started, release))
    assert started.wait(10)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="batchscope.ui.live.commands"):
        left = commands.stop()
    # it waited the whole timeout for the job, then gave up on it (returned while the job
    # still runs: not joined forever)
    assert time.monotonic() - t0 >= STOP_TIMEOUT_S
    assert left == "build backend"
    assert "'build backend'" in caplog.text and "left behind" in caplog.text
    assert commands.alive and commands._thread.daemon
    release.set()
    commands._thread.join(10)
    assert not commands.alive
    assert commands.results == []


def test_without_a_thread_the_caller_runs_the_jobs(qapp):
    c = EngineCommands(FakeEngine(), start=False)
    results = []
    c.finished.connect(lambda label, error: results.append((label, error)))
    c.apply_changes({"sessions": 5})
    assert not c.alive and c.busy
    c.run_queued()
    assert results == [("apply", None)] and c._engine.config.sessions == 5
    assert c.stop() is None
