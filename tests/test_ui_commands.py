"""The UI's command thread: jobs in order, errors reported, and a stop from every state."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from batchscope.config import RunConfig
from batchscope.ui.commands import STOP_TIMEOUT_S, EngineCommands


class FakeEngine:
    """Applies a config at once, or (``hold``) calls ``on_done`` only when released."""

    def __init__(self) -> None:
        self.config = RunConfig()
        self.running = True
        self.applied: list[RunConfig] = []
        self.hold = False
        self.pending: list[Callable[[str | None], None]] = []

    def apply(self, new: RunConfig, on_done: Callable[[str | None], None] | None = None) -> None:
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


def timed_stop(commands: EngineCommands) -> tuple[str | None, float]:
    t0 = time.monotonic()
    left = commands.stop()
    return left, time.monotonic() - t0


def test_jobs_run_in_order_and_an_exception_is_reported_not_fatal(commands, qtbot):
    def boom() -> None:
        raise OSError("disk gone")

    commands.submit("one", lambda: None)
    commands.submit("two", boom)
    commands.submit("three", lambda: "refused")
    qtbot.waitUntil(lambda: len(commands.results) == 3, timeout=2000)
    assert commands.results == [("one", None), ("two", "OSError: disk gone"), ("three", "refused")]
    assert commands.alive and not commands.busy


def test_config_changes_coalesce_while_a_job_runs(commands, qtbot):
    started, release = threading.Event(), threading.Event()
    commands.submit("slow", blocker(started, release))
    assert started.wait(2)
    commands.apply_changes({"sessions": 2})
    commands.apply_changes({"sessions": 3, "policy": "oldest"})
    assert commands.busy
    release.set()
    qtbot.waitUntil(lambda: len(commands.results) == 2, timeout=2000)
    assert commands._engine.applied == [RunConfig(sessions=3, policy="oldest")]
    assert commands.results[-1] == ("apply", None)


def test_stop_when_idle(commands):
    left, took = timed_stop(commands)
    assert left is None and not commands.alive and took < 0.5


def test_stop_drops_queued_jobs(commands):
    started, release = threading.Event(), threading.Event()
    ran = []
    commands.submit("slow", blocker(started, release))
    commands.submit("queued", lambda: ran.append(1))
    assert started.wait(2)
    threading.Timer(0.1, release.set).start()
    left, took = timed_stop(commands)
    assert left is None and took < STOP_TIMEOUT_S
    assert ran == [] and not commands.alive
    commands.submit("after", lambda: ran.append(2))
    assert ran == [] and not commands.busy


def test_stop_while_an_apply_waits_for_the_backend(commands, qtbot):
    commands._engine.hold = True  # the backend never finishes building
    commands.apply_changes({"precision": "fp32"})
    qtbot.waitUntil(lambda: bool(commands._engine.pending), timeout=2000)
    left, took = timed_stop(commands)
    assert left is None and took < 0.5  # the wait sees the terminate flag
    assert commands.results == []  # nothing is reported after stop


def test_a_job_that_outlives_stop_is_abandoned_and_reported(commands, caplog):
    started, release = threading.Event(), threading.Event()
    commands.submit("build backend", blocker(started, release))
    assert started.wait(2)
    with caplog.at_level(logging.WARNING, logger="batchscope.ui.commands"):
        left, took = timed_stop(commands)
    assert left == "build backend"
    assert STOP_TIMEOUT_S <= took < STOP_TIMEOUT_S + 0.5
    assert "'build backend'" in caplog.text and "left behind" in caplog.text
    assert commands.alive and commands._thread.daemon
    release.set()
    commands._thread.join(2)
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
