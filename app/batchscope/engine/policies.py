"""Batch policies: which waiting windows to run now, or when to look again.

A policy sees the waiting windows (session id, arrival time, in seconds on
the caller's clock) and the current time, and answers with a
:class:`Decision`. Policies never read a clock themselves: the live worker
passes ``time.perf_counter()``, the simulator its virtual time, tests a
number. The same objects drive both, so a simulated and a live run of the
same scenario differ only in what the device does.

Feedback (``observe``) is how the adaptive policy learns batch latency; the
others ignore it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from batchscope.config import (
    DYNAMIC_DEFAULT_MAX_BATCH,
    KNOBS,
    POLICY_PARAMS,
    ConfigError,
    RunConfig,
)


@dataclass(frozen=True)
class Waiting:
    """One window waiting in a session's mailbox.

    ``arrival`` is when this (newest) window was published; ``since`` is when the
    session's mailbox became non-empty, kept across overwrites. Deadlines
    (``dynamic``, ``fixed``) count from ``since``: counted from ``arrival``, every
    overwrite would push the deadline back and a delay longer than the frame
    interval would never fire.
    """

    session: int
    arrival: float  # s, on the caller's clock
    since: float | None = None  # s; None means the same as arrival

    @property
    def waiting_since(self) -> float:
        return self.arrival if self.since is None else self.since


@dataclass(frozen=True)
class Decision:
    """Take these sessions' windows now, or look again at ``wait_until`` (s).

    ``take`` empty and ``wait_until`` None: nothing to do until a new window arrives.
    """

    take: tuple[int, ...] = ()
    wait_until: float | None = None


IDLE = Decision()


class BatchPolicy(ABC):
    """Answers "take these now, or wait until t"; keeps whatever state it needs.

    Its knobs (``knobs``: RunConfig field names) are properties whose setters
    validate with the same :data:`~batchscope.config.KNOBS` entry as construction,
    so a knob can change while the policy runs without losing its state (the
    adaptive cap, the round-robin cursor), as Ray Serve's ``set_max_batch_size``.
    """

    name: str = ""

    @property
    def knobs(self) -> tuple[str, ...]:
        return POLICY_PARAMS[self.name]

    def retune(self, config: RunConfig) -> None:
        """Take ``config``'s values for this policy's knobs; all or none (ConfigError)."""
        values = {k: KNOBS[k].check(getattr(config, k)) for k in self.knobs}
        for k, v in values.items():
            setattr(self, k, v)

    @abstractmethod
    def select(self, waiting: Sequence[Waiting], now: float) -> Decision: ...

    def observe(self, batch_size: int, latency_ms: float) -> None:
        """Feedback after a batch: its size and its worst end-to-end latency (ms)."""

    @property
    def cap(self) -> int | None:
        """The largest batch this policy will form now (None: unbounded)."""
        return None

    def describe(self) -> str:
        return self.name


def _by_arrival(waiting: Sequence[Waiting]) -> list[Waiting]:
    return sorted(waiting, key=lambda w: (w.arrival, w.session))


def _longest_waiting(waiting: Sequence[Waiting]) -> list[Waiting]:
    """Sessions ordered by how long they have waited, overwrites included.

    What a capped batch takes first. Ordering by the newest window's arrival
    instead would starve a session whose window keeps being overwritten — the
    very flaw of ``oldest`` — as soon as the cap is below the session count.
    """
    return sorted(waiting, key=lambda w: (w.waiting_since, w.session))


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

    def select(self, waiting: Sequence[Waiting], now: float) -> Decision:
        if not waiting:
            return IDLE
        return Decision(take=(_by_arrival(waiting)[0].session,))

    @property
    def cap(self) -> int:
        return 1


class RoundRobin(BatchPolicy):
    """Run one window at a time, cycling over sessions in id order."""

    name = "round-robin"

    def __init__(self) -> None:
        self._last: int | None = None

    def select(self, waiting: Sequence[Waiting], now: float) -> Decision:
        if not waiting:
            return IDLE
        ids = sorted(w.session for w in waiting)
        if self._last is not None:
            after = [s for s in ids if s > self._last]
            nxt = after[0] if after else ids[0]
        else:
            nxt = ids[0]
        self._last = nxt
        return Decision(take=(nxt,))

    @property
    def cap(self) -> int:
        return 1


class BatchAll(BatchPolicy):
    """When the device is free, take every waiting window (longest-waiting first, to the cap)."""

    name = "all"

    max_batch = Knob("max_batch", required=False)

    def __init__(self, max_batch: int | None = None) -> None:
        self.max_batch = max_batch

    def select(self, waiting: Sequence[Waiting], now: float) -> Decision:
        if not waiting:
            return IDLE
        chosen = _longest_waiting(waiting)[: self.max_batch]
        return Decision(take=tuple(w.session for w in chosen))

    @property
    def cap(self) -> int | None:
        return self.max_batch

    def describe(self) -> str:
        return f"all (max {self.max_batch})" if self.max_batch else "all"


class Dynamic(BatchPolicy):
    """Triton-style: go when ``max_batch`` windows wait or the oldest waited ``max_delay_ms``."""

    name = "dynamic"

    max_batch = Knob("max_batch")
    max_delay_ms = Knob("max_delay_ms")

    def __init__(self, max_batch: int, max_delay_ms: float) -> None:
        self.max_batch = max_batch
        self.max_delay_ms = max_delay_ms

    def select(self, waiting: Sequence[Waiting], now: float) -> Decision:
        if not waiting:
            return IDLE
        ordered = _longest_waiting(waiting)
        deadline = ordered[0].waiting_since + self.max_delay_ms / 1000.0
        if len(ordered) >= self.max_batch or now >= deadline:
            return Decision(take=tuple(w.session for w in ordered[: self.max_batch]))
        return Decision(wait_until=deadline)

    @property
    def cap(self) -> int:
        return self.max_batch

    def describe(self) -> str:
        return f"dynamic (max {self.max_batch}, {self.max_delay_ms:g} ms)"


class FixedBatch(Dynamic):
    """Wait for exactly ``batch`` windows; after ``max_delay_ms`` take what is there.

    The delay is what keeps it from deadlocking when fewer sessions than
    ``batch`` exist. It is :class:`Dynamic` with the target size as the cap.
    """

    name = "fixed"

    batch = Knob("batch", store="_max_batch")

    def __init__(self, batch: int, max_delay_ms: float) -> None:
        self.batch = batch
        self.max_delay_ms = max_delay_ms

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

    slo_ms = Knob("slo_ms")
    max_batch = Knob("max_batch", required=False, after_set="_clip")

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

    def select(self, waiting: Sequence[Waiting], now: float) -> Decision:
        if not waiting:
            return IDLE
        chosen = _longest_waiting(waiting)[: self.cap]
        return Decision(take=tuple(w.session for w in chosen))

    def observe(self, batch_size: int, latency_ms: float) -> None:
        if latency_ms > self.slo_ms:
            self._cap = max(1.0, self._cap * 0.9)
        elif batch_size >= self.cap:
            self._cap = float(self.cap + 1)
            if self.max_batch is not None:
                self._cap = min(self._cap, float(self.max_batch))

    def describe(self) -> str:
        return f"adaptive (cap {self.cap}, objective {self.slo_ms:g} ms)"


def make_policy(config: RunConfig) -> BatchPolicy:
    """The policy object a config asks for (a new one: policies keep state)."""
    p = config.policy
    if p == "oldest":
        return OldestFirst()
    if p == "round-robin":
        return RoundRobin()
    if p == "all":
        return BatchAll(config.max_batch)
    if p == "dynamic":
        return Dynamic(config.max_batch or DYNAMIC_DEFAULT_MAX_BATCH, config.max_delay_ms)
    if p == "fixed":
        return FixedBatch(config.batch, config.max_delay_ms)
    if p == "adaptive":
        return AdaptiveAIMD(config.slo_ms, config.max_batch)
    raise ConfigError("policy", p, "unknown policy")
