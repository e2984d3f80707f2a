"""The event loop of a plain run: one config from start to end, with its policy inline.

Why it exists: the capacity planner simulates hundreds of runs per answer (and
``plan --plot`` a thousand), and nearly all of them are *plain*: one config, no
step after the opening, no fault, no ``drop_after_ms``, no neighbours on the
device. :func:`~batchscope.sim.simulator.play` plays those here, without the
agenda of changes, and with each built-in policy's choice made inline instead of
through ``select`` (a call, a :class:`~batchscope.engine.policies.Decision` and a
tuple of ids per batch). The choices are the policies' own rules, word for word:

- ``oldest``: the waiting window with the earliest arrival (then the lower id);
- ``round-robin``: the next waiting id after the last one served, cycling;
- ``all`` and ``adaptive``: every waiting window, longest-waiting first, up to the
  cap (``adaptive``'s cap moves by its ``observe`` rule, AIMD, played inline on a local
  and left in the policy at the end);
- ``dynamic`` and ``fixed``: ``max_batch`` (``batch``) longest-waiting windows as
  soon as that many wait, else all of them once the longest has waited
  ``max_delay_ms``; ``fixed`` pads the batch to its shape.

The records are the ones :func:`play`'s general loop makes, bit for bit:
``benchmarks/sim_speed.py --check`` compares every trace and report of its grid
with a dump made before this loop existed, and ``tests/test_planner_speed.py`` plays
random plain runs both ways. A policy this module does not know (a subclass, a
new kind) plays in the general loop.

Why fewer steps give the same records: the general loop asks the policy at every
window, batch end, timer and look, but only some of those instants can change its
answer. The work-conserving policies (``oldest``, ``round-robin``, ``all``,
``adaptive``) take something whenever a window waits and the device is free, so the
device is idle only with every mailbox empty: a batch starts at a batch's end or at a
window's arrival, and the looks (a run's first frames) decide nothing. ``dynamic``
and ``fixed`` answer "wait until the deadline" until ``cap`` windows wait or the
deadline (the earliest ``since`` + the delay) passes, so they are asked at a batch's
end, at a window's arrival on an idle device and at the deadline. ``all`` and
``adaptive`` also skip the mailboxes when they can (:func:`_all_waiting`).

The mailboxes are a dict, session -> ``[arrival, session, since]``, filled in the
schedule's order, (time, session): a window into an empty mailbox is added at the end
with its time as ``since``, one that replaces a waiting one keeps its place. So the
dict's order is (since, session), the order ``all``, ``adaptive``, ``dynamic`` and
``fixed`` take the longest-waiting windows in, and a batch is its first items (the
general loop sorts them).

A :data:`Stop` may end a run early (the planner's reject-only rules, checked
every :data:`CHECK_EVERY_S` of virtual time at a batch's end): the loop then
returns None instead of the records.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Collection
from itertools import islice
from operator import itemgetter
from typing import Any

from batchscope.engine.policies import (
    ALL_WAITING,
    CAP,
    DEADLINE,
    FIXED_SIZE,
    FULL,
    ONE_AT_A_TIME,
    AdaptiveAIMD,
    BatchAll,
    BatchPolicy,
    Dynamic,
    FixedBatch,
    OldestFirst,
    RoundRobin,
)
from batchscope.profiles.profile import BatchCurve
from batchscope.sim.clock import NEVER, Clock, Schedule

#: (start, size, end, curve index, why it left, the policy's cap then, padded rows)
Measured = list[tuple[float, int, float, int, int, int, int]]
#: The measured batches' windows, batch after batch: their arrivals (s) and sessions (two
#: flat lists: keeping each window's pending list to the end would hand the garbage
#: collector ~20 000 long-lived objects a run to walk, again and again).
Delivered = tuple[list[float], list[int]]
#: ``stop(now, waiting, measured, delivered)``: True ends the run (see the module doc);
#: ``waiting``: the sessions with a window waiting (no batch runs at ``now``)
Stop = Callable[[float, Collection[int], Measured, Delivered], bool]
CHECK_EVERY_S = 0.5  # virtual seconds between two asks of a Stop

_arrival_of, _session_of = itemgetter(0), itemgetter(1)


def kind(policy: BatchPolicy) -> str | None:
    """Which inline choice plays ``policy`` (None: the general loop plays it)."""
    for cls, name in (
        (OldestFirst, "oldest"),
        (RoundRobin, "round-robin"),
        (BatchAll, "all"),
        (AdaptiveAIMD, "adaptive"),
        (FixedBatch, "fixed"),
        (Dynamic, "dynamic"),
    ):
        if type(policy) is cls:
            return name
    return None


def play_plain(
    policy: BatchPolicy,
    frames: Schedule,
    clock: Clock,
    curve: BatchCurve,
    t0: float,
    t_end: float,
    stop: Stop | None = None,
) -> tuple[Measured, Delivered] | None:
    """The measured batches and their windows of a plain run (None: ``stop`` ended it).

    ``frames`` is the run's one schedule (from 0 s to ``t_end``), ``clock`` the clock
    that made it (every session's frames ``clock.period`` apart).
    """
    name = kind(policy)
    assert name is not None, "play() sends only the built-in policies here"
    if name in ("dynamic", "fixed"):
        return _waiting(policy, name == "fixed", frames, curve, t0, t_end, stop)
    if name in ("all", "adaptive"):
        adaptive = name == "adaptive"
        return _all_waiting(policy, adaptive, frames, clock.period, curve, t0, t_end, stop)
    return _one_at_a_time(policy, name == "oldest", frames, curve, t0, t_end, stop, clock.sessions)


def _one_at_a_time(
    policy: BatchPolicy,
    oldest: bool,
    frames: Schedule,
    curve: BatchCurve,
    t0: float,
    t_end: float,
    stop: Stop | None,
    sessions: int,
) -> tuple[Measured, Delivered] | None:
    """``oldest`` and ``round-robin``: one window a batch, at every batch's end with a
    window waiting and at a window's arrival on an idle device.

    The mailboxes are one dict, session -> its waiting window's arrival. For ``oldest`` it
    is kept in publishing order (a window that replaces one moves its session to the end):
    the schedule publishes in the order of (time, session), the key ``oldest`` takes the
    least of, so its choice is the dict's first item. ``round-robin`` looks for the next
    session id after the last one served, cycling over the ``sessions`` ids."""
    ft, fs, opened = frames.times, frames.sessions, frames.opened
    i = 0
    pending: dict[int, float] = OrderedDict() if oldest else {}
    to_end = pending.move_to_end if isinstance(pending, OrderedDict) else None
    take_first = pending.popitem if isinstance(pending, OrderedDict) else None
    measured: Measured = []
    delivered: Delivered = ([], [])
    record = measured.append
    add_arrival, add_session = delivered[0].append, delivered[1].append
    one = curve.ms(1) * 1.0 / 1000.0  # the general loop's ``ms × slowdown / 1000``
    last: int | None = getattr(policy, "_last", None)  # round-robin's cursor
    cycle = list(range(sessions)) * 2  # ids after ``last``: cycle[last + 1 : last + 1 + n]
    check_at = t0 if stop is not None else NEVER
    while True:
        now = ft[i]  # idle: every mailbox is empty until the next window
        if now > t_end:
            break
        t = now
        while t <= now:
            pending[fs[i]] = t
            opened.append(i)
            i += 1
            t = ft[i]
        while pending:  # the device is free at now and a window waits: a batch starts
            if take_first is not None:
                taken, arrival = take_first(False)
            else:
                start = 0 if last is None else last + 1
                for taken in cycle[start : start + sessions]:
                    if taken in pending:
                        break
                last = taken
                arrival = pending.pop(taken)
            free_at = now + one
            t = ft[i]
            while t <= free_at:
                s = fs[i]
                if s in pending:
                    pending[s] = t
                    if to_end is not None:
                        to_end(s)
                else:
                    pending[s] = t
                    opened.append(i)
                i += 1
                t = ft[i]
            if free_at > t_end:  # the batch ends after the run
                return _done(policy, last, frames, i, measured, delivered)
            if free_at >= t0:
                record((now, 1, free_at, 0, ONE_AT_A_TIME, 1, 0))
                add_arrival(arrival)
                add_session(taken)
            now = free_at
            if now >= check_at:
                assert stop is not None
                if stop(now, pending, measured, delivered):
                    return None
                check_at = now + CHECK_EVERY_S
    return _done(policy, last, frames, i, measured, delivered)


def _all_waiting(
    policy: BatchPolicy,
    adaptive: bool,
    frames: Schedule,
    period: float,
    curve: BatchCurve,
    t0: float,
    t_end: float,
    stop: Stop | None,
) -> tuple[Measured, Delivered] | None:
    """``all`` and ``adaptive``: every waiting window, longest-waiting first, up to the cap,
    at every batch's end with a window waiting and at a window's arrival on an idle device.

    Mostly a batch takes every window that arrived while the one before it ran, into
    empty mailboxes: those windows are then a slice ``[i, j)`` of the schedule, already
    in the order the policy takes them (by arrival, then id: the schedule's order, and
    each window its mailbox's first), so no mailbox is filled. The mailboxes are filled
    only when a window stays behind (a cap below the windows waiting) or when a slice
    spans a frame interval (a session may have published twice: overwritten).
    """
    ft, fs, opened = frames.times, frames.sessions, frames.opened
    pending: dict[int, list[Any]] = {}
    waiting = pending.values()
    get = pending.get
    measured: Measured = []
    delivered: Delivered = ([], [])
    record = measured.append
    add_arrivals, add_sessions = delivered[0].extend, delivered[1].extend
    add_opened = opened.extend
    batch_s: dict[int, float] = {}
    cap_all = None if adaptive else policy._max_batch  # type: ignore[attr-defined]
    # adaptive's AIMD (AdaptiveAIMD.observe as _aimd, on a local; written back at the end):
    # its cap never falls below 1.0, so ``max(1, int(cap))`` is ``int(cap)``
    aimd = policy if adaptive else None
    assert aimd is None or isinstance(aimd, AdaptiveAIMD)
    grown = aimd._cap if aimd else 0.0
    slo_ms = aimd._slo_ms if aimd else 0.0
    top = float(aimd._max_batch) if aimd and aimd._max_batch is not None else math.inf
    apart = period * (1.0 - 1e-9)  # two frames of one session are at least this far apart
    check_at = t0 if stop is not None else NEVER
    i = 0
    while True:
        now = ft[i]  # idle: every mailbox is empty until the next window
        if now > t_end:
            break
        j = i + 1
        while ft[j] <= now:  # the windows of this instant (one a session)
            j += 1
        while True:  # the device is free at now: what waits is pending, or else [i, j)
            cap = int(grown) if adaptive else cap_all
            if not pending:
                n = j - i
                if n == 0:
                    break  # nothing waits: idle
                if cap is None or n <= cap:  # the slice, whole, in the policy's order
                    arrived = ft[i:j]
                    add_opened(range(i, j))
                    duration = batch_s.get(n)
                    if duration is None:
                        duration = batch_s[n] = curve.ms(n) * 1.0 / 1000.0
                    free_at = now + duration
                    i = j
                    j = bisect_right(ft, free_at, i)
                    if free_at > t_end:  # the batch ends after the run
                        frames.published = _fill(ft, fs, i, j, pending, opened)
                        return _left(aimd, grown, measured, delivered)
                    if free_at >= t0:
                        record((now, n, free_at, 0, ALL_WAITING, cap or 0, 0))
                        add_arrivals(arrived)
                        add_sessions(fs[i - n : i])
                    if adaptive:
                        grown = _aimd(grown, (free_at - arrived[0]) * 1000.0, n, cap, slo_ms, top)
                    now = free_at
                    if j - i > 1 and ft[j - 1] - ft[i] >= apart:  # maybe overwritten
                        i = _fill(ft, fs, i, j, pending, opened)
                    if now >= check_at:
                        assert stop is not None
                        if stop(now, pending or fs[i:j], measured, delivered):
                            return None
                        check_at = now + CHECK_EVERY_S
                    continue
                i = _fill(ft, fs, i, j, pending, opened)  # some stay behind: the mailboxes
            if cap is None or len(pending) <= cap:
                taken = list(waiting)  # longest-waiting first: the mailboxes' order
                pending.clear()
                reason = ALL_WAITING
            else:
                taken = list(islice(waiting, cap))
                for r in taken:
                    del pending[r[1]]
                reason = CAP
            n = len(taken)
            duration = batch_s.get(n)
            if duration is None:
                duration = batch_s[n] = curve.ms(n) * 1.0 / 1000.0
            free_at = now + duration
            if pending:  # the windows left behind wait on: fill their mailboxes
                t = ft[i]
                while t <= free_at:
                    s = fs[i]
                    q = get(s)
                    if q is None:
                        pending[s] = [t, s, t]
                        opened.append(i)
                    else:
                        q[0] = t
                    i += 1
                    t = ft[i]
                j = i
            else:
                j = bisect_right(ft, free_at, i)
                if j - i > 1 and ft[j - 1] - ft[i] >= apart:
                    i = _fill(ft, fs, i, j, pending, opened)
            if free_at > t_end:
                frames.published = _fill(ft, fs, i, j, pending, opened)
                return _left(aimd, grown, measured, delivered)
            if free_at >= t0:
                record((now, n, free_at, 0, reason, cap or 0, 0))
                add_arrivals(map(_arrival_of, taken))
                add_sessions(map(_session_of, taken))
            if adaptive:
                latency_ms = (free_at - min(map(_arrival_of, taken))) * 1000.0
                grown = _aimd(grown, latency_ms, n, cap, slo_ms, top)
            now = free_at
            if now >= check_at:
                assert stop is not None
                if stop(now, pending or fs[i:j], measured, delivered):
                    return None
                check_at = now + CHECK_EVERY_S
    frames.published = i
    return _left(aimd, grown, measured, delivered)


def _aimd(grown: float, latency_ms: float, n: int, cap: Any, slo_ms: float, top: float) -> float:
    """:meth:`AdaptiveAIMD.observe` on plain values: the cap after a batch of ``n`` under
    the cap ``cap`` (``int(grown)``) that took ``latency_ms``; ``top``: its max_batch."""
    if latency_ms > slo_ms:
        grown *= 0.9
        return 1.0 if grown < 1.0 else grown
    if n >= cap:
        grown = float(cap + 1)
        return top if grown > top else grown
    return grown


def _left(
    aimd: AdaptiveAIMD | None, grown: float, measured: Measured, delivered: Delivered
) -> tuple[Measured, Delivered]:
    """The records, with adaptive's cap written back as observe() would have left it."""
    if aimd is not None:
        aimd._cap = grown
    return measured, delivered


def _fill(
    ft: list[float],
    fs: list[int],
    i: int,
    j: int,
    pending: dict[int, list[Any]],
    opened: list[int],
) -> int:
    """Publish the windows ``[i, j)`` into the mailboxes (the general loop's rule); ``j``."""
    get = pending.get
    for k in range(i, j):
        s, t = fs[k], ft[k]
        r = get(s)
        if r is None:
            pending[s] = [t, s, t]
            opened.append(k)
        else:
            r[0] = t
    return j


def _done(
    policy: BatchPolicy,
    last: int | None,
    frames: Schedule,
    i: int,
    measured: Measured,
    delivered: Delivered,
) -> tuple[Measured, Delivered]:
    frames.published = i
    if isinstance(policy, RoundRobin):
        policy._last = last  # the cursor as the policy would have left it
    return measured, delivered


def _waiting(
    policy: BatchPolicy,
    fixed: bool,
    frames: Schedule,
    curve: BatchCurve,
    t0: float,
    t_end: float,
    stop: Stop | None,
) -> tuple[Measured, Delivered] | None:
    """``dynamic`` and ``fixed``: a batch leaves when ``cap`` windows wait or when the
    longest-waiting one has waited ``max_delay_ms``.

    The general loop asks the policy at every window, batch end, timer and look; between
    two of its takes the answer is "wait until the deadline" each time, so here the
    deadline is kept (the earliest ``since`` + the delay) and the rule is checked at the
    instants that can change it: a batch's end, a window's arrival on an idle device, the
    deadline itself."""
    ft, fs, opened = frames.times, frames.sessions, frames.opened
    i = 0
    pending: dict[int, list[Any]] = {}
    waiting = pending.values()
    get = pending.get
    measured: Measured = []
    delivered: Delivered = ([], [])
    record = measured.append
    add_arrivals, add_sessions = delivered[0].extend, delivered[1].extend
    cap: int = policy._max_batch  # type: ignore[attr-defined]
    delay_s = policy._max_delay_ms / 1000.0  # type: ignore[attr-defined]
    full = FIXED_SIZE if fixed else FULL
    shape = cap if fixed else 0
    batch_s: dict[int, float] = {}
    deadline = NEVER  # the longest-waiting window's, while one waits
    check_at = t0 if stop is not None else NEVER
    now = ft[0]
    while now <= t_end:  # the device is free at now
        t = ft[i]
        while t <= now:
            s = fs[i]
            r = get(s)
            if r is None:
                if not pending:
                    deadline = t + delay_s
                pending[s] = [t, s, t]
                opened.append(i)
            else:
                r[0] = t
            i += 1
            t = ft[i]
        n = len(pending)
        if n >= cap:  # Dynamic.select, inline (the mailboxes' order is longest-waiting first)
            taken = list(islice(waiting, cap))
            reason = full
        elif n and now >= deadline:
            taken = list(waiting)
            reason = DEADLINE
        else:  # wait: for the next window, or the deadline
            now = t if not n or t < deadline else deadline
            continue
        for r in taken:
            del pending[r[1]]
        if pending:
            deadline = next(iter(waiting))[2] + delay_s  # the longest-waiting one's since
        n = len(taken)
        rows = n if shape <= n else shape
        duration = batch_s.get(rows)
        if duration is None:
            duration = batch_s[rows] = curve.ms(rows) * 1.0 / 1000.0
        start, free_at = now, now + duration
        while t <= free_at:
            s = fs[i]
            r = get(s)
            if r is None:
                if not pending:
                    deadline = t + delay_s
                pending[s] = [t, s, t]
                opened.append(i)
            else:
                r[0] = t
            i += 1
            t = ft[i]
        if free_at > t_end:  # the batch ends after the run
            break
        if free_at >= t0:
            record((start, n, free_at, 0, reason, cap, rows - n))
            add_arrivals(map(_arrival_of, taken))
            add_sessions(map(_session_of, taken))
        now = free_at
        if now >= check_at:
            assert stop is not None
            if stop(now, pending, measured, delivered):
                return None
            check_at = now + CHECK_EVERY_S
    frames.published = i
    return measured, delivered
