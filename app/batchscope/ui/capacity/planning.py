"""The Capacity view's planner thread: it hands each plan to a child process of lower
priority (:class:`~batchscope.sim.planner.background.PlanProcess`) and cancels it when the
inputs change. What a plan is (the inputs, the search, the result) is Qt-free, in
:mod:`batchscope.sim.planner.background`, so that the child never imports Qt.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from batchscope.config import ConfigError
from batchscope.profiles.profile import ProfileError
from batchscope.sim.planner import PlanCancelled
from batchscope.sim.planner.background import (
    PlanInputs,
    PlanProcess,
    PlanResult,
    Search,
    compute,
    no_profile_text,
    sweep_profile,
)

__all__ = [
    "CapacityPlanner",
    "PlanInputs",
    "PlanResult",
    "Search",
    "compute",
    "no_profile_text",
    "sweep_profile",
]

log = logging.getLogger(__name__)


class CapacityPlanner(QObject):
    """The thread that runs the capacity planner for the Capacity view.

    Why it exists: a plan simulates thousands of runs (about a second for the answer
    at 256×144, ten more for the plot's curves, on a 2-core laptop); on the
    GUI thread that would freeze the window and the UI timer. So this thread waits
    on it, one at a time, while the plan itself runs in a child process of lower
    priority (:class:`PlanProcess`: on a thread of the app it took the GIL from the
    live run); its result reaches the GUI thread only through the ``finished``
    signal (queued: it is emitted on this thread), and the answer ahead of its
    curves through ``answered``. ``progressed`` drives the progress bar the same
    way. ``compute_plan``: what plans instead (the tests' fakes, on this thread).

    New inputs (:meth:`request`) cancel the plan in progress: the planner polls
    ``cancelled()`` between simulations, which is true once the wanted inputs are
    not the ones being planned, so the loop starts over with the new ones.

    How it stops: :meth:`stop` sets the terminate flag *before* waking the loop;
    ``cancelled()`` is then true too, so a plan in progress ends at its next
    simulation (milliseconds) and the thread ends; ``stop`` joins for at most
    2 s, then ends the child process by its PID. An exception in a plan (a broken
    profile, a missing curve) is caught in the loop (or the child) and sent as that
    plan's ``error``: the thread never dies silently.
    A plain ``threading.Thread`` like the command thread: a QThread destroyed
    while it runs aborts the process.
    """

    progressed = Signal(object, int, int, str)  # (inputs, done, total, what)
    answered = Signal(object)  # PlanResult, partial: the answer, ahead of its curves
    finished = Signal(object)  # PlanResult

    def __init__(self, compute_plan: Callable[..., PlanResult] | None = None) -> None:
        super().__init__()
        self.process = PlanProcess() if compute_plan is None else None
        self._compute = compute_plan or self.process.compute  # type: ignore[union-attr]
        self._terminate = False
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._wanted: PlanInputs | None = None
        self.busy = False  # a plan is in progress (read by tests and the view)
        self._thread = threading.Thread(
            target=self._run, name="batchscope-ui-capacity", daemon=True
        )
        self._thread.start()

    def request(self, inputs: PlanInputs | None) -> None:
        """Plan ``inputs`` (None: nothing), cancelling any other plan in progress."""
        with self._lock:
            self._wanted = inputs
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._terminate = True
        self._wake.set()
        self._thread.join(timeout)
        if self.process is not None:
            self.process.stop(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._terminate:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                inputs = self._wanted
            if self._terminate or inputs is None:
                continue

            def cancelled(inputs: PlanInputs = inputs) -> bool:
                return self._terminate or self._wanted != inputs

            def progress(done: int, total: int, what: str, inputs: PlanInputs = inputs) -> None:
                self.progressed.emit(inputs, done, total, what)

            def answered(result: PlanResult, cancelled: Callable[[], bool] = cancelled) -> None:
                if not cancelled():
                    self.answered.emit(result)

            self.busy = True
            try:
                result = self._compute(inputs, progress, cancelled, answered)
            except PlanCancelled:
                continue  # the wake event is set: the loop plans the new inputs
            except (ProfileError, ConfigError) as exc:
                result = PlanResult(inputs, error=str(exc))
            except Exception as exc:  # the thread must survive any plan
                log.exception("capacity plan failed")
                result = PlanResult(inputs, error=f"the plan failed: {exc}")
            finally:
                self.busy = False
            if not cancelled():
                self.finished.emit(result)
