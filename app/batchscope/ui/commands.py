"""The one thread that changes the engine on behalf of the UI.

Why it exists: opening a source decodes a whole video file (≈ 0.7 s for a
sample clip, more for the synthetic scene), and a resolution change re-opens
every source inside ``Engine.apply``; done on the GUI thread that would
freeze the window mid-talk. So every engine change (config, sources, start,
reset) is a job run here, one at a time and in order, and the result comes
back to the GUI thread as a Qt signal (queued across threads).

Config changes coalesce: while one apply (or backend rebuild) is in flight,
later slider moves merge into one pending change set, applied next against
the engine's config of that moment (so a source added meanwhile is kept).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from batchscope.config import ConfigError
from batchscope.engine.engine import Engine

#: Longest wait for a backend rebuild (the real model's build and warm-up on a slow CPU).
APPLY_TIMEOUT_S = 180.0

Job = Callable[[], "str | None"]  # returns an error message, or None when it worked


class EngineCommands(QObject):
    """Runs engine changes off the GUI thread; ``finished(label, error)`` after each."""

    finished = Signal(str, object)

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self._engine = engine
        self._cond = threading.Condition()
        self._jobs: deque[tuple[str, Job]] = deque()
        self._pending: dict[str, Any] = {}
        self._config_queued = False
        self._running_job = False
        self._terminate = False
        self._thread = threading.Thread(
            target=self._run, name="batchscope-ui-commands", daemon=True
        )
        self._thread.start()

    # -- GUI thread ---------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        with self._cond:
            return bool(self._jobs) or self._running_job

    def submit(self, label: str, job: Job) -> None:
        with self._cond:
            self._jobs.append((label, job))
            self._cond.notify()

    def apply_changes(self, changes: dict[str, Any]) -> None:
        """Merge ``changes`` (RunConfig fields) into the pending set and apply it soon."""
        with self._cond:
            self._pending.update(changes)
            if not self._config_queued:
                self._config_queued = True
                self._jobs.append(("apply", self._apply_pending))
                self._cond.notify()

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the job in progress, drop the rest, end the thread."""
        with self._cond:
            self._terminate = True
            self._jobs.clear()
            self._cond.notify()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def terminating(self) -> bool:
        return self._terminate

    # -- the command thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._terminate:
                    self._cond.wait()
                if self._terminate:
                    return
                label, job = self._jobs.popleft()
                self._running_job = True
            try:
                error = job()
            except Exception as exc:  # a failed job must not end the thread
                error = f"{type(exc).__name__}: {exc}"
            finally:
                with self._cond:
                    self._running_job = False
            if not self._terminate:
                self.finished.emit(label, error)

    def _apply_pending(self) -> str | None:
        with self._cond:
            changes, self._pending = self._pending, {}
            self._config_queued = False
        if not self._engine.running:
            return "the engine is not running (see the start error)"
        try:
            config = self._engine.config.with_changes(**changes)
        except ConfigError as exc:
            return str(exc)
        done = threading.Event()
        result: list[str | None] = [None]

        def on_done(error: str | None) -> None:
            result[0] = error
            done.set()

        self._engine.apply(config, on_done)
        waited = 0.0
        while not done.wait(0.1):
            waited += 0.1
            if self._terminate:
                return None
            if waited > APPLY_TIMEOUT_S:
                return f"the new backend took longer than {APPLY_TIMEOUT_S:.0f} s to build"
        return result[0]
