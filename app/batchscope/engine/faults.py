"""Faults on cue: what starts and what ends each kind, and how overlapping faults compose.

Why a module: a fault touches the feeder (a stalled or bursting session),
the worker (a slow device) or the roster (a source error), and ends by itself
on the feeder's clock; the engine only opens the segments and events around
it (``Engine.inject``). The simulator plays the same faults by the same
composition rule (:class:`ActiveFaults`), so live and simulated agree.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from batchscope.config import RunConfig
from batchscope.engine.feeder import Feeder
from batchscope.engine.roster import Roster
from batchscope.engine.segments import SegmentLog
from batchscope.engine.worker import Worker
from batchscope.experiment import Fault

Action = Callable[[], None]

#: How the ``fault`` event that says a fault ended begins ("ended: session 0 stalls…").
ENDED = "ended: "


class ActiveFaults:
    """The faults in effect now, and what they add up to.

    Why: faults overlap (a stall of session 0 for 4 s at 2 s and another for
    12 s at 3 s), and the end of one must undo only its own effect. So every
    effect is recomputed from the faults still on, never reset outright: a
    session is stalled while any stall of it is on, and bursts of one session
    multiply their factors (a stall wins over a burst); slow devices multiply;
    a session's source is failed while any source error of it is on.
    Thread-safe: the engine starts faults on the caller's thread and ends them
    on the feeder's; hold :attr:`lock` around a change and the effect it sets.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._on: dict[int, Fault] = {}
        self._tokens = itertools.count()

    def add(self, fault: Fault) -> int:
        """``fault`` is on; the token that :meth:`remove` takes."""
        with self.lock:
            token = next(self._tokens)
            self._on[token] = fault
            return token

    def remove(self, token: int) -> Fault:
        with self.lock:
            return self._on.pop(token)

    def faults(self) -> list[Fault]:
        """The faults on, in the order they started."""
        with self.lock:
            return list(self._on.values())

    def pace(self, sid: int | None) -> float:
        """Session ``sid``'s pace factor: 0 while stalled, else the product of its bursts."""
        with self.lock:
            mine = [f for f in self._on.values() if f.session == sid]
            if any(f.kind == "stall" for f in mine):
                return 0.0
            return math.prod(float(f.factor or 1.0) for f in mine if f.kind == "burst")

    def stalled(self, sid: int) -> bool:
        return self.pace(sid) == 0.0

    def slowdown(self) -> float:
        """Every batch's compute is this × longer: the product of the slow devices on."""
        with self.lock:
            return math.prod(
                float(f.factor or 1.0) for f in self._on.values() if f.kind == "slow_device"
            )

    def failed(self, sid: int | None) -> bool:
        """Whether a source error of session ``sid`` is on."""
        with self.lock:
            return any(f.kind == "source_error" and f.session == sid for f in self._on.values())


def fault_changes(faults: list[Fault]) -> Any:
    """What a segment's ``changes`` say under ``"fault"``: the fault, or a list of several."""
    return faults[0].as_json() if len(faults) == 1 else [f.as_json() for f in faults]


def fault_actions(
    fault: Fault,
    active: ActiveFaults,
    feeder: Feeder,
    worker: Worker,
    roster: Roster,
    report_error: Callable[[str], object],
    fps: Callable[[], float | None],
) -> tuple[Action, Action]:
    """(start, end) of ``fault``; start runs on the caller's thread, end on the feeder's.

    Each sets the effect of all the faults on after it (:class:`ActiveFaults`),
    so an end undoes only its own fault's share.
    """
    sid = fault.session
    token: list[int] = []  # the start's token, for the end

    def on() -> None:
        token.append(active.add(fault))

    def off() -> None:
        active.remove(token.pop())

    if fault.kind in ("stall", "burst"):
        assert sid is not None, f"a {fault.kind} fault names its session (FAULT_FIELDS)"

        def pace(change: Action) -> Action:
            def act() -> None:
                with active.lock:
                    change()
                    feeder.scale(sid, active.pace(sid))

            return act

        return pace(on), pace(off)
    if fault.kind == "slow_device":

        def slow(change: Action, wait: bool) -> Action:
            def act() -> None:
                change()
                set_slowdown = lambda: setattr(worker, "slowdown", active.slowdown())  # noqa: E731
                if wait:
                    worker.between_batches(set_slowdown)
                else:  # the feeder thread must not wait on the worker: hand it over, go on
                    worker.call(set_slowdown)

            return act

        return slow(on, True), slow(off, False)
    if fault.kind == "source_error":
        assert sid is not None, "a source_error fault names its session (FAULT_FIELDS)"

        def fail() -> None:
            with active.lock:
                first = not active.failed(sid)
                on()
            if first:
                session = roster.session(sid)
                assert session is not None, f"no session {sid} (Engine checks before a start)"
                session.fail("source error (injected fault)")
                report_error(f"session {sid}: source error (injected fault)")

        def recover() -> None:
            with active.lock:
                off()
                last = not active.failed(sid)
            if last:
                roster.recover(sid, fps())

        return fail, recover
    raise ValueError(f"unknown fault {fault.kind!r}")


class RunFaults:
    """The faults of one live run: each starts now and ends by itself on the feeder's clock.

    The engine opens the segment a fault's step starts (``Engine.apply``); this
    object starts the faults (their effect by :func:`fault_actions`, composed by
    :class:`ActiveFaults`), says each start and end as a ``fault`` event, and opens
    the segment that each end begins, listing the faults still on. It reads the
    engine's state through callables: the worker is made when the engine opens,
    and the config and whether it runs change with every live change.
    """

    def __init__(
        self,
        feeder: Feeder,
        roster: Roster,
        segments: SegmentLog,
        worker: Callable[[], Worker],
        config: Callable[[], RunConfig],
        running: Callable[[], bool],
        event: Callable[[str, str], object],
        clock: Callable[[], float],
    ) -> None:
        self.active = ActiveFaults()
        self._feeder, self._roster, self._segments = feeder, roster, segments
        self._worker, self._config, self._running = worker, config, running
        self._event, self._clock = event, clock

    def stalled(self, sid: int) -> bool:
        return self.active.stalled(sid)

    def on(self) -> list[dict[str, Any]]:
        """The faults in effect, as a segment lists them."""
        return [f.as_json() for f in self.active.faults()]

    def start(self, faults: Sequence[Fault]) -> tuple[list[Fault], str | None]:
        """Start each of ``faults``: those started, and the first error (each one an event)."""
        started, first_error = [], None
        for fault in faults:
            error = self._start(fault)
            if error is None:
                started.append(fault)
                continue
            self._event("error", f"not started ({fault.describe()}): {error}")
            first_error = first_error or error
        return started, first_error

    def _start(self, fault: Fault) -> str | None:
        config = self._config()
        if not self._running():
            return "the engine is not running"
        if fault.session is not None and self._roster.session(fault.session) is None:
            return f"{fault.kind}: no session {fault.session} (the run has {config.sessions})"
        start, end = fault_actions(
            fault,
            self.active,
            self._feeder,
            self._worker(),
            self._roster,
            lambda message: self._event("error", message),
            lambda: self._config().fps,
        )
        try:
            start()
        except Exception as exc:
            return f"{fault.kind}: {type(exc).__name__}: {exc}"
        text = fault.describe()
        self._event("fault", text)

        def ended() -> None:
            end()
            self._event("fault", f"{ENDED}{text}")
            if self._running():
                self._segments.open(
                    self._clock(), self._config(), {}, f"after: {text}", faults=self.on()
                )

        self._feeder.at(self._clock() + fault.for_s, ended)
        return None
