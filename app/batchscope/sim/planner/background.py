"""The capacity plan the app draws, computed in a child process of lower priority.

Why a process: planning simulates thousands of runs; on a thread of the app's own
process it held the GIL the live run's threads need (the live run fell from 21 to 16 fps
beside it, issue 25), however low its thread's priority. In a child process at nice
:data:`NICENESS` it competes only for a core, and the OS gives the live run first call.

:func:`compute` is a pure function of a :class:`PlanInputs` (the planner's
:func:`~batchscope.sim.planner.plan`, then each policy's curve for the plot);
:class:`PlanProcess` runs it in the child: one plan at a time, progress and the result
sent back over a pipe, a cancel flag the child polls between simulations.

How it stops: :meth:`PlanProcess.stop` asks the child to end, then terminates and at last
kills it by its PID; the child also ends by itself when its parent is gone (it checks
between simulations and every second), so a killed app leaves no planner behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from batchscope.config import ConfigError, format_resolution
from batchscope.profiles.profile import (
    DeviceProfile,
    ProfileError,
    list_profiles,
    load_profile,
    mig_slice,
)
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
from batchscope.sim.planner.devices import DevicesPlan, fewest_devices, sessions_for_devices

#: The child's nice value: below the live run's threads (Linux and macOS; ignored elsewhere).
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
    devices: int = 1  # >1: also the most sessions that many devices carry (plan --devices)
    carry: int = 0  # >0: also the fewest devices that carry that many (plan --sessions)
    # >0: the devices' answers are for MIG slices (K g) of the profile's GPU, each slice
    # planned as a device of its own (emulated by assumption: profile.mig_slice)
    mig: int = 0


@dataclass(frozen=True)
class PlanResult:
    inputs: PlanInputs
    plan: Plan | None = None
    series: tuple[Series, ...] = ()
    profile: str = ""  # the profile's name, as planned
    error: str | None = None  # one line: why there is no plan
    partial: bool = False  # the answer alone, sent ahead: its curves are still being drawn
    across: DevicesPlan | None = None  # for ``inputs.devices`` devices (more than 1)
    fewest: DevicesPlan | None = None  # for ``inputs.carry`` sessions (None: none fits)
    devices_error: str | None = None  # one line: why there is no devices answer


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
    answered: Callable[[PlanResult], None] | None = None,
) -> PlanResult:
    """The plan and each policy's curve for the plot (a pure function of ``inputs``).

    ``progress(done, total, what)`` counts the six policies twice: their search, then
    their curve; raises PlanCancelled when ``cancelled()`` turns true. ``answered``, if
    given, gets the answer as soon as the search has it (a ``partial`` result, without
    its curves and its search's runs): the search takes a second where the curves take
    ten (256x144), and the user waits for the answer, not the plot. The curves play
    in this process, one run after another: the child is a daemon process, which may
    not have children of its own (and one core is left to the live run).
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

    def plan_on(on: DeviceProfile, progress: Callable[[int, int, str], None] | None) -> Plan:
        return plan(
            on,
            inputs.precision,
            inputs.resolution,
            inputs.budget,
            max_sessions=s.max_sessions,
            duration_s=s.duration_s,
            seeds=s.seeds,
            progress=progress,
            cancelled=cancelled,
        )

    result = plan_on(profile, searched)
    if answered is not None:
        answer = PlanResult(inputs, without_runs(result), (), profile.name, partial=True)
        answered(answer)
    across = fewest = None
    devices_error = None
    each, each_plan = profile, result  # a device: the whole GPU, or a MIG slice of it
    try:
        if inputs.mig and (inputs.devices > 1 or inputs.carry > 0):
            each = mig_slice(profile, inputs.mig)  # its curve scaled by the stated rule
            progress(n, 2 * n, f"planning one {each.name}")
            each_plan = plan_on(each, None)
        if inputs.devices > 1:
            progress(n, 2 * n, f"sessions for {inputs.devices} devices")
            across = sessions_for_devices(each_plan, each, inputs.devices, cancelled=cancelled)
        if inputs.carry > 0:
            progress(n, 2 * n, f"fewest devices for {inputs.carry} sessions")
            fewest = fewest_devices(each_plan, each, inputs.carry, cancelled=cancelled)
    except (ConfigError, ProfileError) as exc:
        devices_error = str(exc)
    curves = series(
        result,
        profile,
        limit=s.max_sessions,
        cancelled=cancelled,
        progress=lambda done, total, policy: progress(n + done, 2 * n, f"drew {policy}"),
    )
    return PlanResult(
        inputs, result, tuple(curves), profile.name, None, False, across, fewest, devices_error
    )


def without_runs(result: Plan) -> Plan:
    """``result`` without its search's runs (closures and all: they stay where they ran)."""
    return dataclasses.replace(result, runs=None)


class PlanProcess:
    """One child process that computes plans (:func:`compute`) on request.

    :meth:`compute` has the signature of :func:`compute` and runs it in the child: it
    blocks its caller (the app's planner thread), forwarding the child's progress and
    polling ``cancelled()``, which it passes on to the child. Started on the first plan.
    """

    def __init__(self) -> None:
        self._proc: Any = None
        self._conn: Connection | None = None
        self._cancel: Any = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # a fresh interpreter: no fork of a Qt process
        here, there = ctx.Pipe()
        self._cancel = ctx.Event()
        self._proc = ctx.Process(
            target=_child,
            args=(there, self._cancel, os.getpid()),
            name="batchscope-planner",
            daemon=True,
        )
        self._proc.start()
        there.close()
        self._conn = here

    def compute(
        self,
        inputs: PlanInputs,
        progress: Callable[[int, int, str], None],
        cancelled: Callable[[], bool],
        answered: Callable[[PlanResult], None] | None = None,
    ) -> PlanResult:
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()
            # this call's own handles: stop() (the app closing) may clear the fields meanwhile
            proc, conn, cancel = self._proc, self._conn, self._cancel
            assert conn is not None and cancel is not None
            cancel.clear()
            conn.send(inputs)
            while True:
                if cancelled():
                    cancel.set()
                try:
                    if not conn.poll(0.05):
                        if proc.is_alive():
                            continue
                        raise EOFError
                    kind, payload = conn.recv()
                except (EOFError, OSError):  # the child ended, or stop() closed the pipe
                    if self._proc is proc:
                        self._proc = None
                    if cancelled():  # stopped: the app is closing
                        raise PlanCancelled() from None
                    return PlanResult(inputs, error="the planner process ended")
                if kind == "progress":
                    progress(*payload)
                elif kind == "answer":
                    if answered is not None:
                        answered(payload)
                elif kind == "cancelled":
                    raise PlanCancelled()
                elif kind == "error":
                    return PlanResult(inputs, error=payload)
                else:
                    return payload

    def stop(self, timeout: float = 2.0) -> None:
        """End the child: asked, then terminated, then killed (by PID)."""
        with contextlib.suppress(OSError, ValueError):
            if self._cancel is not None:
                self._cancel.set()
            if self._conn is not None:
                self._conn.send(None)
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.join(timeout / 2)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout / 2)
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _child(conn: Connection, cancel: Any, parent: int) -> None:
    """The child's loop: a plan per request, until asked to end or the parent is gone."""
    with contextlib.suppress(AttributeError, OSError):
        os.nice(NICENESS)

    def orphaned() -> bool:
        return os.getppid() != parent

    def watch() -> None:  # a child blocked on the pipe still ends with its parent
        while not orphaned():
            threading.Event().wait(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    while True:
        try:
            inputs = conn.recv()
        except EOFError:
            return
        if inputs is None:
            return

        def progress(done: int, total: int, what: str) -> None:
            conn.send(("progress", (done, total, what)))

        def answered(answer: PlanResult) -> None:
            conn.send(("answer", answer))

        try:
            result = compute(inputs, progress, lambda: cancel.is_set() or orphaned(), answered)
        except PlanCancelled:
            conn.send(("cancelled", None))
            continue
        except (ProfileError, ConfigError) as exc:
            conn.send(("error", str(exc)))
            continue
        except Exception as exc:  # the child must answer every request
            conn.send(("error", f"the plan failed: {type(exc).__name__}: {exc}"))
            continue
        if result.plan is not None:  # its search's runs (closures and all) stay here
            result = dataclasses.replace(result, plan=without_runs(result.plan))
        conn.send(("result", result))
