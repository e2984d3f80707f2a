"""Faults on cue, live: what starts and what ends each kind on the engine's parts.

Why a module: a fault touches the feeder (a stalled or bursting session), the
devices' workers (a slow device: the one it names, or every one) or the roster (a
source error), and ends by itself on
the feeder's clock; :class:`RunFaults` starts a run's faults and opens the
segment each end begins, the engine only the segment a step opens
(``Engine.apply``). How faults compose is :mod:`batchscope.engine.faults`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from batchscope.config import RunConfig
from batchscope.engine.faults import ENDED, ActiveFaults
from batchscope.engine.feeder import Feeder
from batchscope.engine.report.phrases import fault_phrase
from batchscope.engine.roster import Roster
from batchscope.engine.segments import SegmentLog
from batchscope.engine.worker import Worker
from batchscope.experiment import Fault

Action = Callable[[], None]


def fault_actions(
    fault: Fault,
    active: ActiveFaults,
    feeder: Feeder,
    workers: Callable[[], Sequence[Worker]],
    roster: Roster,
    report_error: Callable[[str], object],
    fps: Callable[[], float | None],
) -> tuple[Action, Action]:
    """(start, end) of ``fault``; start runs on the caller's thread, end on the feeder's.

    Each sets the effect of all the faults on after it (:class:`ActiveFaults`),
    so an end undoes only its own fault's share. ``workers``: every device's, device 0
    first, as they are when the start or the end comes.
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

        def slowdown_of(worker: Worker) -> Action:
            def set_slowdown() -> None:  # the worker's thread: its device's product
                worker.slowdown = active.slowdown(worker.device)

            return set_slowdown

        def slow(change: Action, wait: bool) -> Action:
            def act() -> None:
                change()
                for worker in workers():
                    if wait:
                        worker.between_batches(slowdown_of(worker))
                    else:  # the feeder thread must not wait on a worker: hand it over
                        worker.call(slowdown_of(worker))

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
        workers: Callable[[], Sequence[Worker]],
        config: Callable[[], RunConfig],
        running: Callable[[], bool],
        event: Callable[[str, str], object],
        clock: Callable[[], float],
    ) -> None:
        self.active = ActiveFaults()
        self._feeder, self._roster, self._segments = feeder, roster, segments
        self._workers, self._config, self._running = workers, config, running
        self._event, self._clock = event, clock

    def stalled(self, sid: int) -> bool:
        return self.active.stalled(sid)

    def on(self) -> list[dict[str, Any]]:
        """The faults in effect, as a segment lists them."""
        return [f.as_json() for f in self.active.faults()]

    def start(self, faults: Sequence[Fault], at: float) -> tuple[list[Fault], str | None]:
        """Start each of ``faults`` at ``at`` (s, the engine's clock: the instant their
        segment opens, so that a fault of ``for_s`` gives its segment ``for_s``): those
        started, and the first error (each one an event)."""
        started, first_error = [], None
        for fault in faults:
            error = self._start(fault, at)
            if error is None:
                started.append(fault)
                continue
            self._event("error", f"not started ({fault_phrase(fault)}): {error}")
            first_error = first_error or error
        return started, first_error

    def _start(self, fault: Fault, at: float) -> str | None:
        config = self._config()
        if not self._running():
            return "the engine is not running"
        if fault.session is not None and self._roster.session(fault.session) is None:
            return f"{fault.kind}: no session {fault.session} (the run has {config.sessions})"
        if fault.kind == "slow_device" and config.serving:
            # the engine runs the batches on its own device, out of the worker's reach
            return (
                f"{fault.kind}: the device is {config.serving}'s own (a serving engine runs "
                "the batches): slow-device faults run on BatchScope's worker"
            )
        if fault.device is not None and fault.device >= config.devices:
            return f"{fault.kind}: no device {fault.device} (the run has {config.devices})"
        start, end = fault_actions(
            fault,
            self.active,
            self._feeder,
            self._workers,
            self._roster,
            lambda message: self._event("error", message),
            lambda: self._config().fps,
        )
        try:
            start()
        except Exception as exc:
            return f"{fault.kind}: {type(exc).__name__}: {exc}"
        text = fault_phrase(fault)
        self._event("fault", text)

        def ended() -> None:
            end()
            self._event("fault", f"{ENDED}{text}")
            if self._running():
                self._segments.open(
                    self._clock(), self._config(), {}, f"after: {text}", faults=self.on()
                )

        self._feeder.at(at + fault.for_s, ended)
        return None
