"""The Capacity view's planner thread and what it plans: the inputs, the search, the result.

:func:`compute` is a pure function of a :class:`PlanInputs` (the planner's
:func:`~batchscope.sim.planner.plan`, then each policy's curve for the plot);
:class:`CapacityPlanner` runs it off the GUI thread and cancels it when the
inputs change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from batchscope.config import ConfigError, format_resolution
from batchscope.profiles.profile import DeviceProfile, ProfileError, list_profiles, load_profile
from batchscope.sim.planner import (
    DEFAULT_DURATION_S,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SEEDS,
    Budget,
    Plan,
    PlanCancelled,
    Series,
    plan,
    series,
)

log = logging.getLogger(__name__)

#: The planner thread's nice value (Linux schedules threads apart): below the engine's threads.
NICENESS = 10


@dataclass(frozen=True)
class Search:
    """How hard the planner looks (``plan --duration/--seeds/--max-sessions``; same defaults)."""

    duration_s: float = DEFAULT_DURATION_S
    seeds: int = DEFAULT_SEEDS
    max_sessions: int = DEFAULT_MAX_SESSIONS


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan depends on; a new value cancels the plan in progress."""

    profile: str | None  # name or path; None: the torch backend's sweep profile, found later
    device: str  # the torch backend's device (cpu, cuda:N), where ``profile`` is None
    precision: str
    resolution: tuple[int, int]
    budget: Budget
    search: Search


@dataclass(frozen=True)
class PlanResult:
    inputs: PlanInputs
    plan: Plan | None = None
    series: tuple[Series, ...] = ()
    profile: str = ""  # the profile's name, as planned
    error: str | None = None  # one line: why there is no plan


def sweep_profile(device: str) -> DeviceProfile | None:
    """The profile ``batchscope sweep --device DEVICE`` saved on this machine, if any."""
    from batchscope.profiles.machine import default_name, device_facts  # imports torch

    label, _, _ = device_facts(device)
    name = default_name(label)
    for _kind, found in list_profiles():
        if isinstance(found, DeviceProfile) and name in (
            found.name,
            getattr(found.path, "stem", ""),
        ):
            return found
    return None


def no_profile_text(inputs: PlanInputs) -> str:
    return (
        f"No profile for this device yet. Measure one (minutes), then come back: "
        f"batchscope sweep --device {inputs.device} --precision {inputs.precision} "
        f"--resolution {format_resolution(inputs.resolution)}"
    )


def compute(
    inputs: PlanInputs,
    progress: Callable[[int, int, str], None],
    cancelled: Callable[[], bool],
) -> PlanResult:
    """The plan and each policy's curve for the plot (a pure function of ``inputs``).

    ``progress(done, total, what)`` counts the six policies twice: their search, then
    their curve; raises PlanCancelled when ``cancelled()`` turns true.
    """
    if inputs.profile is None:
        profile = sweep_profile(inputs.device)
        if profile is None:
            return PlanResult(inputs, error=no_profile_text(inputs))
    else:
        profile = load_profile(inputs.profile)
    n = 0

    def searched(done: int, total: int, policy: str) -> None:
        nonlocal n
        n = total
        progress(done, 2 * total, f"searched {policy}")

    s = inputs.search
    result = plan(
        profile,
        inputs.precision,
        inputs.resolution,
        inputs.budget,
        max_sessions=s.max_sessions,
        duration_s=s.duration_s,
        seeds=s.seeds,
        progress=searched,
        cancelled=cancelled,
    )
    top = max(p.max_sessions for p in result.policies)
    up_to = min(max(top + 3, 6), s.max_sessions)
    curves: list[Series] = []
    for k, p in enumerate(result.policies):  # one policy at a time: progress and cancel between
        if cancelled():
            raise PlanCancelled()
        one = dataclasses.replace(result, policies=(p,))
        curves += series(one, profile, up_to=up_to)
        progress(n + k + 1, 2 * n, f"drew {p.policy}")
    return PlanResult(inputs, result, tuple(curves), profile.name)


class CapacityPlanner(QObject):
    """The thread that runs the capacity planner for the Capacity view.

    Why it exists: a plan simulates thousands of runs (1.6 s for laptop-8gb at
    512×288, 17 s with the plot's curves at 256×144 on a 2-core laptop); on the
    GUI thread that would freeze the window and the UI timer. So the plan runs
    here, one at a time, and its result reaches the GUI thread only through the
    ``finished`` signal (queued: it is emitted on this thread). ``progressed``
    drives the progress bar the same way.

    New inputs (:meth:`request`) cancel the plan in progress: the planner polls
    ``cancelled()`` between simulations, which is true once the wanted inputs are
    not the ones being planned, so the loop starts over with the new ones.

    How it stops: :meth:`stop` sets the terminate flag *before* waking the loop;
    ``cancelled()`` is then true too, so a plan in progress ends at its next
    simulation (milliseconds) and the thread ends; ``stop`` joins for at most
    2 s. An exception in a plan (a broken profile, a missing curve) is caught in
    the loop and sent as that plan's ``error``: the thread never dies silently.
    A plain ``threading.Thread`` like the command thread: a QThread destroyed
    while it runs aborts the process.
    """

    progressed = Signal(object, int, int, str)  # (inputs, done, total, what)
    finished = Signal(object)  # PlanResult

    def __init__(self, compute_plan: Callable[..., PlanResult] = compute) -> None:
        super().__init__()
        self._compute = compute_plan
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

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        # yield the CPU to the live worker's threads: the plan can wait, a batch cannot
        # (off Linux, or where it is not allowed, it plans at normal priority)
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
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

            self.busy = True
            try:
                result = self._compute(inputs, progress, cancelled)
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
