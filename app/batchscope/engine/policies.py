"""Batch policies: which waiting windows to run now, or when to look again.

A policy sees the waiting windows (session id, arrival time, in seconds on
the caller's clock) and the current time, and answers with a
:class:`Decision`. Policies never read a clock themselves: the live worker
passes ``time.perf_counter()``, the simulator its virtual time, tests a
number. The same objects drive both, so a simulated and a live run of the
same scenario differ only in what the device does.

Feedback (``observe``) is how the adaptive policy learns batch latency; the
others ignore it. Each rule itself (which windows, why, adaptive's update) is a
function in :mod:`batchscope.engine.rules`, which the simulator's compiled loop calls
too; a class here holds the policy's knobs and state and hands the rule its windows.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection
from operator import itemgetter
from typing import Any, NamedTuple, Protocol

from batchscope.config import (
    KNOBS,
    POLICY_PARAMS,
    ConfigError,
    RunConfig,
)
from batchscope.engine.rules import (
    FIXED_SIZE,
    FULL,
    NO_CAP,
    ONE_AT_A_TIME,
    aimd_next,
    capped_take,
    deadline_take,
    oldest_pick,
    round_robin_pick,
)

#: Positions in a :class:`Waiting` (policies read waiting windows by index).
ARRIVAL, SESSION, SINCE = 0, 1, 2


class Waiting(tuple):
    """One window waiting in a session's mailbox: ``(arrival, session, since)``.

    ``arrival`` is when this (newest) window was published; ``since`` is when the
    session's mailbox became non-empty, kept across overwrites (``since``
    omitted: the arrival). Deadlines (``dynamic``, ``fixed``) count from ``since``:
    counted from ``arrival``, every overwrite would push the deadline back and a
    delay longer than the frame interval would never fire.

    Why a tuple read by index: a decision is on the worker's hot path and the
    simulator makes thousands a run. Ordered as a tuple, waiting windows sort by
    arrival then session (oldest first) in C, and ``itemgetter(SINCE, SESSION)``
    orders them by waiting time without a Python key function. The simulator
    passes plain lists in the same layout, updated in place as frames arrive
    (one object per pending window, not per frame), so a policy reads them by
    index, never keeps one past ``select``, and never changes one.
    """

    __slots__ = ()

    def __new__(cls, session: int, arrival: float, since: float | None = None) -> Waiting:
        return tuple.__new__(cls, (arrival, session, arrival if since is None else since))

    session = property(itemgetter(SESSION), doc="the session's id")
    arrival = property(itemgetter(ARRIVAL), doc="s, on the caller's clock")
    since = property(itemgetter(SINCE), doc="s, when the mailbox became non-empty")

    def __repr__(self) -> str:
        return f"Waiting(session={self[SESSION]}, arrival={self[ARRIVAL]}, since={self[SINCE]})"


class WaitingWindow(Protocol):
    """What ``select`` reads: a :class:`Waiting`, or the simulator's list in its layout.

    Read by index (:data:`ARRIVAL`, :data:`SESSION`, :data:`SINCE`) and ordered
    as a sequence (oldest arrival first).
    """

    def __getitem__(self, index: int, /) -> Any: ...

    def __lt__(self, other: Any, /) -> bool: ...


class Decision(NamedTuple):
    """Take these sessions' windows now, or look again at ``wait_until`` (s).

    ``take`` empty and ``wait_until`` None: nothing to do until a new window arrives.
    ``reason``: why the batch leaves now (an index into
    :data:`~batchscope.engine.rules.REASONS`).
    """

    take: tuple[int, ...] = ()
    wait_until: float | None = None
    reason: int = 0


IDLE = Decision()


class BatchPolicy(ABC):
    """Answers "take these now, or wait until t"; keeps whatever state it needs.

    Its knobs (``knobs``: RunConfig field names) are properties whose setters
    validate with the same :data:`~batchscope.config.KNOBS` entry as construction,
    so a knob can change while the policy runs without losing its state (the
    adaptive cap, the round-robin cursor), as Ray Serve's ``set_max_batch_size``.
    """

    name: str = ""
    #: Whether ``observe`` changes anything (the simulator skips the call otherwise).
    learns: bool = False

    @property
    def knobs(self) -> tuple[str, ...]:
        return POLICY_PARAMS[self.name]

    @classmethod
    def from_config(cls, config: RunConfig) -> BatchPolicy:
        """A new one with ``config``'s values for its knobs (the knobs are its
        constructor's keyword arguments)."""
        return cls(**{k: getattr(config, k) for k in POLICY_PARAMS[cls.name]})

    def retune(self, config: RunConfig) -> None:
        """Take ``config``'s values for this policy's knobs; all or none (ConfigError)."""
        values = {k: KNOBS[k].check(getattr(config, k)) for k in self.knobs}
        for k, v in values.items():
            setattr(self, k, v)

    @abstractmethod
    def select(self, waiting: Collection[WaitingWindow], now: float) -> Decision: ...

    def observe(self, batch_size: int, latency_ms: float) -> None:
        """Feedback after a batch: its size and its worst end-to-end latency (ms)."""

    @property
    def cap(self) -> int | None:
        """The largest batch this policy will form now (None: unbounded)."""
        return None

    @property
    def shape(self) -> int | None:
        """The batch size the device runs, whatever was taken (None: the windows taken).

        Only ``fixed`` has one: a batch short of it is padded with empty rows.
        """
        return None

    def describe(self) -> str:
        return self.name


_session = itemgetter(SESSION)
_since_then_session = itemgetter(SINCE, SESSION)


def _longest_waiting(waiting: Collection[WaitingWindow]) -> list[WaitingWindow]:
    """Sessions ordered by how long they have waited, overwrites included.

    What a capped batch takes first. Ordering by the newest window's arrival
    instead would starve a session whose window keeps being overwritten — the
    very flaw of ``oldest`` — as soon as the cap is below the session count.
    """
    return sorted(waiting, key=_since_then_session)


class Knob:
    """A policy's knob as an attribute: every assignment is checked by ``KNOBS[name]``.

    ``required`` refuses None (a policy that cannot run without a value); ``store``
    names the attribute that holds it (``fixed``'s ``batch`` is its cap);
    ``after_set`` is the policy's method to call once a new value is in.
    """

    def __init__(
        self, name: str, required: bool = True, store: str = "", after_set: str = ""
    ) -> None:
        self.name = name
        self.required = required
        self.store = store or f"_{name}"
        self.after_set = after_set

    def __get__(self, policy: Any, owner: type | None = None) -> Any:
        return self if policy is None else getattr(policy, self.store)

    def __set__(self, policy: Any, value: Any) -> None:
        if value is None and self.required:
            raise ConfigError(self.name, None, "this policy needs a value")
        setattr(policy, self.store, KNOBS[self.name].check(value))
        if self.after_set:
            getattr(policy, self.after_set)()


class OldestFirst(BatchPolicy):
    """Run the single window that arrived earliest.

    Under overload this starves sessions: a window that gets overwritten
    takes a fresh arrival time and keeps losing to the others.
    """

    name = "oldest"

    def select(self, waiting: Collection[WaitingWindow], now: float) -> Decision:
        if not waiting:
            return IDLE
        ids = list(map(_session, waiting))
        arrival = {w[SESSION]: w[ARRIVAL] for w in waiting}
        return Decision((ids[oldest_pick(ids, len(ids), arrival)],), None, ONE_AT_A_TIME)

    @property
    def cap(self) -> int:
        return 1


class RoundRobin(BatchPolicy):
    """Run one window at a time, cycling over sessions in id order."""

    name = "round-robin"

    def __init__(self) -> None:
        self._last: int | None = None

    def select(self, waiting: Collection[WaitingWindow], now: float) -> Decision:
        if not waiting:
            return IDLE
        ids = list(map(_session, waiting))
        last = -1 if self._last is None else self._last
        nxt = self._last = ids[round_robin_pick(ids, len(ids), last)]
        return Decision((nxt,), None, ONE_AT_A_TIME)

    @property
    def cap(self) -> int:
        return 1


class BatchAll(BatchPolicy):
    """When the device is free, take every waiting window (longest-waiting first, to the cap)."""

    name = "all"

    max_batch = Knob("max_batch", required=False)
    _max_batch: int | None  # the knob's store, read directly in select

    def __init__(self, max_batch: int | None = None) -> None:
        self.max_batch = max_batch

    def select(self, waiting: Collection[WaitingWindow], now: float) -> Decision:
        if not waiting:
            return IDLE
        cap = self._max_batch
        take, why = capped_take(len(waiting), NO_CAP if cap is None else cap)
        return Decision(tuple(map(_session, _longest_waiting(waiting)[:take])), None, why)

    @property
    def cap(self) -> int | None:
        return self.max_batch

    def describe(self) -> str:
        return f"all (max {self.max_batch})" if self.max_batch else "all"


class Dynamic(BatchPolicy):
    """Triton-style: go when ``max_batch`` windows wait or the oldest waited ``max_delay_ms``."""

    name = "dynamic"
    _full = FULL  # what a batch that reached the cap is called

    max_batch = Knob("max_batch")
    max_delay_ms = Knob("max_delay_ms")
    _max_batch: int  # the knobs' stores, read directly in select
    _max_delay_ms: float

    def __init__(self, max_batch: int, max_delay_ms: float) -> None:
        self.max_batch = max_batch
        self.max_delay_ms = max_delay_ms

    def select(self, waiting: Collection[WaitingWindow], now: float) -> Decision:
        if not waiting:
            return IDLE
        ordered = _longest_waiting(waiting)
        deadline = ordered[0][SINCE] + self._max_delay_ms / 1000.0
        take, why = deadline_take(len(ordered), self._max_batch, now, deadline, self._full)
        if take:
            return Decision(tuple(map(_session, ordered[:take])), None, why)
        return Decision((), deadline)

    @property
    def cap(self) -> int:
        return self.max_batch

    def describe(self) -> str:
        return f"dynamic (max {self.max_batch}, {self.max_delay_ms:g} ms)"


class FixedBatch(Dynamic):
    """A constant batch shape: the device always runs ``batch`` rows.

    It goes as :class:`Dynamic` does with ``batch`` as the cap (when ``batch``
    windows wait, or when the oldest waited ``max_delay_ms``: the delay keeps it
    from deadlocking with fewer sessions than ``batch``), but a batch short of
    ``batch`` is padded with empty rows (:attr:`shape`): the one shape a static
    TensorRT engine or a single captured CUDA graph can run. The padding costs the
    device the time of a full batch and delivers nothing; reports count it apart
    (``overall.padded``), never in ``batch_sizes``.
    """

    name = "fixed"
    _full = FIXED_SIZE

    batch = Knob("batch", store="_max_batch")

    def __init__(self, batch: int, max_delay_ms: float) -> None:
        self.batch = batch
        self.max_delay_ms = max_delay_ms

    @property
    def shape(self) -> int:
        return self._max_batch

    def describe(self) -> str:
        return f"fixed ({self.max_batch}, {self.max_delay_ms:g} ms)"


class AdaptiveAIMD(BatchPolicy):
    """Clipper's AIMD: like ``all`` with a cap; cap +1 while under the objective, ×0.9 over it.

    The latency fed back is the worst end-to-end latency (arrival → result)
    of the batch just finished, so the objective is what a client sees.
    Only batches that were limited by the cap grow it: a batch smaller than
    the cap says nothing about whether a larger one would fit. Changing the
    objective keeps the cap it has learnt; a lower ``max_batch`` clips it.
    """

    name = "adaptive"
    learns = True

    slo_ms = Knob("slo_ms")
    max_batch = Knob("max_batch", required=False, after_set="_clip")
    _slo_ms: float  # the knobs' stores, read directly in observe
    _max_batch: int | None

    def __init__(self, slo_ms: float, max_batch: int | None = None, start: int = 1) -> None:
        self._cap = float(start)
        self.slo_ms = slo_ms
        self.max_batch = max_batch

    def _clip(self) -> None:
        if self.max_batch is not None:
            self._cap = min(self._cap, float(self.max_batch))

    @property
    def cap(self) -> int:
        return max(1, int(self._cap))

    def select(self, waiting: Collection[WaitingWindow], now: float) -> Decision:
        if not waiting:
            return IDLE
        take, why = capped_take(len(waiting), max(1, int(self._cap)))  # self.cap, inlined
        return Decision(tuple(map(_session, _longest_waiting(waiting)[:take])), None, why)

    def observe(self, batch_size: int, latency_ms: float) -> None:
        # the knobs' stores read directly: this runs after every batch
        top = math.inf if self._max_batch is None else float(self._max_batch)
        self._cap = aimd_next(self._cap, latency_ms, batch_size, self._slo_ms, top)

    def describe(self) -> str:
        return f"adaptive (cap {self.cap}, objective {self.slo_ms:g} ms)"


#: Each built-in policy's rule, by the name its :data:`~batchscope.policy_kinds.KINDS`
#: entry has (tests/test_policy_kinds.py: one rule for every kind, one kind for every rule).
RULES: dict[str, type[BatchPolicy]] = {
    rule.name: rule
    for rule in (OldestFirst, RoundRobin, BatchAll, Dynamic, FixedBatch, AdaptiveAIMD)
}


def make_policy(config: RunConfig) -> BatchPolicy:
    """The policy object a config asks for (a new one: policies keep state)."""
    rule = RULES.get(config.policy)
    if rule is None:
        raise ConfigError("policy", config.policy, "unknown policy")
    return rule.from_config(config)
