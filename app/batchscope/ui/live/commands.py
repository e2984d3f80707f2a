"""The one thread that changes the engine on behalf of the UI.

Why it exists: opening a source decodes a whole video file (≈ 0.7 s for a
sample clip, more for the synthetic scene), building a backend loads and
warms up the model, and a resolution change re-opens every source; done on
the GUI thread that would freeze the window mid-talk. So every engine change
(config, sources, start, reset) is a job run here, one at a time and in
order, and the result comes back to the GUI thread as a Qt signal (queued
across threads).

Config changes coalesce: while one apply (or backend rebuild) is in flight,
later slider moves merge into one pending change set, handed to the engine
as the fields it changes (the engine makes them on its config of that
moment, under its one lock: a source added or a step played meanwhile stays).

How it stops: ``terminate()`` sets the terminate flag *before* waking the
loop (a woken loop then never starts another job) and drops the queued
jobs; ``stop()`` does that and joins for at most ``STOP_TIMEOUT_S``. A job
still running after that (a backend build the engine could not cancel) is
abandoned, not joined forever: ``stop`` logs it and returns its label, and
the thread, a daemon, ends with the process. That is why this is a plain
``threading.Thread`` and not a ``QThread``: a QThread destroyed while it
runs aborts the process.

A job's exception is caught inside the loop and reported as that job's
error in ``finished``; the thread never dies silently.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from PySide6.QtCore import QObject, Signal

from batchscope.config import RunConfig

log = logging.getLogger(__name__)

#: Longest wait for a backend rebuild (the real model's build and warm-up on a slow CPU).
APPLY_TIMEOUT_S = 180.0
#: Longest wait in ``stop`` for the job in progress before it is abandoned.
STOP_TIMEOUT_S = 2.0

Job = Callable[[], "str | None"]  # returns an error message, or None when it worked


class ConfigurableEngine(Protocol):
    """What the command thread needs of the engine to apply config changes."""

    config: RunConfig
    running: bool

    def apply(
        self,
        change: RunConfig | Mapping[str, Any],
        on_done: Callable[[str | None], None] | None = None,
        caption: str = "",
        step: bool = False,
        fresh: bool = False,
    ) -> str | None: ...


class EngineCommands(QObject):
    """Runs engine changes off the GUI thread; ``finished(label, error)`` after each.

    ``start=False`` starts no thread: the caller runs the queued jobs with
    ``run_queued()`` on its own thread (how tests drive the presenter).
    """

    finished = Signal(str, object)

    def __init__(self, engine: ConfigurableEngine, start: bool = True) -> None:
        super().__init__()
        self._engine = engine
        self._cond = threading.Condition()
        self._jobs: deque[tuple[str, Job]] = deque()
        self._pending: dict[str, Any] = {}
        self._config_queued = False
        self._current: str | None = None  # label of the job running now
        self._terminate = False
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(
                target=self._run, name="batchscope-ui-commands", daemon=True
            )
            self._thread.start()

    # -- GUI thread ---------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        with self._cond:
            return bool(self._jobs) or self._current is not None

    def submit(self, label: str, job: Job) -> None:
        with self._cond:
            if self._terminate:
                return
            self._jobs.append((label, job))
            self._cond.notify()

    def apply_changes(self, changes: dict[str, Any]) -> None:
        """Merge ``changes`` (RunConfig fields) into the pending set and apply it soon."""
        with self._cond:
            if self._terminate:
                return
            self._pending.update(changes)
            if not self._config_queued:
                self._config_queued = True
                self._jobs.append(("apply", self._apply_pending))
                self._cond.notify()

    def terminate(self) -> None:
        """Start no more jobs (the flag is set before the loop wakes); drop the queued ones."""
        with self._cond:
            self._terminate = True
            self._jobs.clear()
            self._pending = {}
            self._cond.notify_all()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> str | None:
        """``terminate`` and join; returns None, or the label of the job left running."""
        self.terminate()
        if self._thread is None:
            return None
        self._thread.join(timeout)
        if not self._thread.is_alive():
            return None
        label = self._current or "?"
        log.warning(
            "the UI command thread is still running %r after %.1f s; left behind (daemon)",
            label,
            timeout,
        )
        return label

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def terminating(self) -> bool:
        return self._terminate

    def run_queued(self) -> None:
        """Run every queued job on the calling thread (only with ``start=False``)."""
        assert self._thread is None, "the command thread runs the jobs"
        while True:
            with self._cond:
                if self._terminate or not self._jobs:
                    return
                label, job = self._jobs.popleft()
                self._current = label
            self._run_job(label, job)

    # -- the command thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._terminate:
                    self._cond.wait()
                if self._terminate:
                    return
                label, job = self._jobs.popleft()
                self._current = label
            self._run_job(label, job)

    def _run_job(self, label: str, job: Job) -> None:
        try:
            error = job()
        except Exception as exc:  # a failed job must not end the thread
            error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._cond:
                self._current = None
        if not self._terminate:
            self.finished.emit(label, error)

    def _apply_pending(self) -> str | None:
        with self._cond:
            changes, self._pending = self._pending, {}
            self._config_queued = False
        if not self._engine.running:
            return "the engine is not running (see the start error)"
        done = threading.Event()
        result: list[str | None] = [None]

        def on_done(error: str | None) -> None:
            result[0] = error
            done.set()

        self._engine.apply(changes, on_done)  # the fields changed, on the config of then
        waited = 0.0
        while not done.wait(0.1):
            waited += 0.1
            if self._terminate:
                return None
            if waited > APPLY_TIMEOUT_S:
                return f"the new backend took longer than {APPLY_TIMEOUT_S:.0f} s to build"
        return result[0]
