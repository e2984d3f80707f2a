"""Faults on cue: what starts and what ends each kind, on the engine's parts.

Why a module: a fault touches the feeder (a stalled or bursting session),
the worker (a slow device) or the roster (a source error), and ends by itself
on the feeder's clock; the engine only opens the segments and events around
it (``Engine.inject``).
"""

from __future__ import annotations

from collections.abc import Callable

from batchscope.engine.feeder import Feeder
from batchscope.engine.roster import Roster
from batchscope.engine.worker import Worker
from batchscope.experiment import Fault

Action = Callable[[], None]


def fault_actions(
    fault: Fault,
    feeder: Feeder,
    worker: Worker,
    roster: Roster,
    report_error: Callable[[str], None],
    fps: Callable[[], float | None],
) -> tuple[Action, Action]:
    """(start, end) of ``fault``; start runs on the caller's thread, end on the feeder's."""
    sid = fault.session
    if fault.kind in ("stall", "burst"):
        factor = 0.0 if fault.kind == "stall" else float(fault.factor)
        return (lambda: feeder.scale(sid, factor), lambda: feeder.scale(sid, 1.0))
    if fault.kind == "slow_device":
        factor = float(fault.factor)
        return (
            lambda: worker.between_batches(lambda: setattr(worker, "slowdown", factor)),
            # the feeder thread must not wait on the worker: hand it over and go on
            lambda: worker.call(lambda: setattr(worker, "slowdown", 1.0)),
        )
    if fault.kind == "source_error":

        def fail() -> None:
            roster.session(sid).fail("source error (injected fault)")
            report_error(f"session {sid}: source error (injected fault)")

        return (fail, lambda: roster.recover(sid, fps()))
    raise ValueError(f"unknown fault {fault.kind!r}")
