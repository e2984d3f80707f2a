"""The batching rules, once: each built-in policy's choice, adaptive's update, least-loaded's.

Pure functions over numbers and small sequences, in the subset of Python that numba
compiles: the live policies (:mod:`batchscope.engine.policies`) and router
(:mod:`batchscope.engine.routing`) call them as they are, and the simulator's compiled
loop (:mod:`batchscope.sim.fast_loop`) has numba compile them into it. So a rule is
written here and nowhere else; what differs between the callers is only how they hold
the waiting windows (tuples live, arrays in the loop).

Conventions: a cap of :data:`NO_CAP` means none; a session id is 0 or more, so a last id
of -1 means none yet; sequences of session ids are read by index up to ``n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Why a batch left (stored per batch as the index in this tuple).
REASONS = ("", "all waiting", "full", "deadline", "one at a time", "fixed size", "cap")
ALL_WAITING, FULL, DEADLINE, ONE_AT_A_TIME, FIXED_SIZE, CAP = range(1, len(REASONS))
NO_CAP = -1


def oldest_pick(ids: Sequence[int], n: int, arrival: Any) -> int:
    """``oldest``: the index in ``ids[:n]`` of the earliest arrival, then the lowest id
    (``arrival[id]``: the arrival of that session's waiting window)."""
    one = 0
    for k in range(1, n):
        s, best = ids[k], ids[one]
        if arrival[s] < arrival[best] or (arrival[s] == arrival[best] and s < best):
            one = k
    return one


def round_robin_pick(ids: Sequence[int], n: int, last: int) -> int:
    """``round-robin``: the index in ``ids[:n]`` of the lowest id after ``last`` (-1: none
    served yet), or of the lowest id when none is after it (cycling)."""
    one = 0
    after = -1
    for k in range(n):
        s = ids[k]
        if s < ids[one]:
            one = k
        if s > last and (after < 0 or s < ids[after]):
            after = k
    return after if after >= 0 else one


def capped_take(waiting: int, cap: int) -> tuple[int, int]:
    """``all`` and ``adaptive``: how many of the ``waiting`` windows (longest-waiting
    first) go now, and why."""
    if cap < 0 or waiting <= cap:
        return waiting, ALL_WAITING
    return cap, CAP


def deadline_take(
    waiting: int, cap: int, now: float, deadline: float, full: int
) -> tuple[int, int]:
    """``dynamic`` and ``fixed``: ``cap`` windows (longest-waiting first) as soon as that
    many wait (``full``: why such a batch left), all of them once ``now`` reached the
    longest-waiting one's ``deadline``; else (0, 0): wait until the deadline."""
    if waiting >= cap:
        return cap, full
    if now >= deadline:
        return waiting, DEADLINE
    return 0, 0


def aimd_next(grown: float, latency_ms: float, taken: int, slo_ms: float, top: float) -> float:
    """``adaptive``'s cap (Clipper's AIMD) after a batch of ``taken`` windows whose worst
    end-to-end latency was ``latency_ms``: ×0.9 (never below 1) when over ``slo_ms``;
    +1 after a batch the cap limited, up to ``top`` (its max_batch; inf: none); else as
    it was. ``grown`` is the cap as learnt (a float); the batch cap is its integer part."""
    cap = max(1, int(grown))
    if latency_ms > slo_ms:
        return max(1.0, grown * 0.9)
    if taken >= cap:
        return min(float(cap + 1), top)
    return grown


def two_choices(devices: int, first: float, second: float) -> tuple[int, int]:
    """``least-loaded``'s two distinct devices of ``devices`` (3 or more) from two uniform
    draws in [0, 1)."""
    a = int(first * devices)
    b = int(second * (devices - 1))
    if b >= a:
        b += 1
    return a, b


def less_loaded(a: int, b: int, load_a: int, load_b: int, free_a: float, free_b: float) -> int:
    """``least-loaded``'s choice of devices ``a`` and ``b``: fewer windows waiting, then
    the earlier free (an idle device's key is below any time), then the lower index."""
    if load_a < load_b or (load_a == load_b and (free_a < free_b or (free_a == free_b and a < b))):
        return a
    return b
