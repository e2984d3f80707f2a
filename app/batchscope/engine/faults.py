"""Faults: how overlapping faults compose, the same live and in the simulator.

A fault (:class:`~batchscope.experiment.Fault`) touches the feeder (a stalled or
bursting session), the worker (a slow device) or the roster (a source error) live
(:mod:`batchscope.engine.fault_actions`), and the simulator's clock when
simulated (:mod:`batchscope.sim.changes`); both ask :class:`ActiveFaults` what
the faults on add up to, so live and simulated agree.
"""

from __future__ import annotations

import itertools
import math
import threading
from typing import Any

from batchscope.experiment import Fault

#: How the ``fault`` event that says a fault ended begins ("ended: S0 stalls for 5 s").
ENDED = "ended: "


class ActiveFaults:
    """The faults in effect now, and what they add up to.

    Why: faults overlap (a stall of session 0 for 4 s at 2 s and another for
    12 s at 3 s), and the end of one must undo only its own effect. So every
    effect is recomputed from the faults still on, never reset outright: a
    session is stalled while any stall of it is on, and bursts of one session
    multiply their factors (a stall wins over a burst); slow devices multiply, on
    the device each names (on every device when it names none);
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

    def slowdown(self, device: int) -> float:
        """Device ``device``'s batches' compute is this × longer: the product of the slow
        devices on that name it or no device (every device)."""
        with self.lock:
            return math.prod(
                float(f.factor or 1.0)
                for f in self._on.values()
                if f.kind == "slow_device" and f.device in (None, device)
            )

    def failed(self, sid: int | None) -> bool:
        """Whether a source error of session ``sid`` is on."""
        with self.lock:
            return any(f.kind == "source_error" and f.session == sid for f in self._on.values())


def fault_changes(faults: list[Fault]) -> Any:
    """What a segment's ``changes`` say under ``"fault"``: the fault, or a list of several."""
    return faults[0].as_json() if len(faults) == 1 else [f.as_json() for f in faults]
