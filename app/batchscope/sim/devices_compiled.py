"""The devices' loop of a plain run, compiled: :func:`play_devices`' turns, in numba.

Why it exists: the issue of several devices asks the simulator for ≥ 3 000× real time
per device at 4 devices × 64 sessions, 174 ns a window; one turn of a Python loop that
publishes a window costs more than that (docs/BENCHMARKS.md has the arithmetic). A
*plain* run on several devices (one config from start to end: no experiment step, no
change of pace, no measured host, no deadline drop, one resolution, a built-in
policy: what ``simulate --devices`` and the planner's fewest devices play) plays here
instead, on arrays, with the same turns and the same rules as
:func:`~batchscope.sim.devices.play_devices` (that module's doc), word for word:

- every window in the schedule's order: one that finds its session's window waiting
  overwrites it where it waits; one that opens a mailbox is placed by the router
  (``pinned``: the session's device; ``least-loaded``: the power of two choices on
  waiting windows with :func:`~batchscope.engine.routing.least_loaded`'s draws, from
  the same ``random.Random`` state, its Mersenne Twister replayed here);
- a device is asked when a window arrives on it while it is idle, when its batch ends
  and when its timer falls due, devices in index order at one instant;
- each device's mailboxes are kept in the order they opened, which is the order
  (since, session) the policies take the longest-waiting windows in, and the built-in
  policies' choices are made inline (``oldest``, ``round-robin``, ``all``,
  ``adaptive`` with its AIMD, ``dynamic`` and ``fixed`` with their deadline timers).

The records are :func:`play_devices`' to the bit: ``tests/test_devices_compiled.py``
plays random plain runs both ways and compares every batch, window and overwrite.
Where numba cannot compile it (not installed, a frozen build), :func:`compiled` is
False and the Python loop plays every run.
"""

from __future__ import annotations

import functools
import heapq
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from batchscope.engine.policies import (
    ALL_WAITING,
    CAP,
    DEADLINE,
    FIXED_SIZE,
    FULL,
    ONE_AT_A_TIME,
    BatchPolicy,
)
from batchscope.profiles.profile import BatchCurve
from batchscope.sim.clock import Schedule
from batchscope.sim.plain import Delivered, Measured, kind

#: The built-in policies the compiled loop plays (plain.kind's names), by their code in it.
KINDS = {"oldest": 0, "round-robin": 1, "all": 2, "adaptive": 3, "dynamic": 4, "fixed": 5}
ROUTER_CODES = {"pinned": 0, "least-loaded": 1}


def _loop(
    ft: np.ndarray,
    fs: np.ndarray,
    t0: float,
    t_end: float,
    n_dev: int,
    batch_s: np.ndarray,
    code: int,
    cap: int,
    delay_s: float,
    slo_ms: float,
    grown_from: float,
    router: int,
    pins: np.ndarray,
    mt: np.ndarray,
    mti: np.ndarray,
    n_ids: int,
) -> tuple[Any, ...]:
    """The run's turns (module doc). ``cap``: the policy's max_batch (``fixed``: its
    batch), -1 for none; ``delay_s``: ``dynamic``/``fixed``'s max_delay_ms / 1000;
    ``grown_from``: adaptive's cap to start from; ``mt``/``mti``: least-loaded's
    Mersenne Twister state (changed in place)."""
    inf = np.inf
    nf = ft.size
    where = np.full(n_ids, -1, np.int64)
    arrival = np.zeros(n_ids)
    since = np.zeros(n_ids)
    waitq = np.zeros((n_dev, n_ids), np.int64)  # each device's mailboxes, in opening order
    wn = np.zeros(n_dev, np.int64)
    busy = np.zeros(n_dev, np.bool_)
    touched = np.zeros(n_dev, np.bool_)
    free_at = np.full(n_dev, inf)
    timers = np.full(n_dev, inf)
    start = np.zeros(n_dev)
    why = np.zeros((n_dev, 3), np.int64)  # reason, the policy's cap, padded rows
    cursor = np.full(n_dev, -1, np.int64)  # round-robin's last id served (-1: none yet)
    grown = np.full(n_dev, grown_from)  # adaptive's cap on each device (AdaptiveAIMD._cap)
    taken_s = np.zeros((n_dev, n_ids), np.int64)
    taken_a = np.zeros((n_dev, n_ids))
    tn = np.zeros(n_dev, np.int64)
    m_f = np.empty((nf + 1, 2))  # start, end
    m_i = np.empty((nf + 1, 5), np.int64)  # size, device, reason, cap, padded
    d_a = np.empty(nf)
    d_s = np.empty(nf, np.int64)
    opened = np.empty(nf, np.int64)
    nm = nd = no = 0
    heap = [(0.0, 0)]
    heap.pop()
    i = 0
    while True:
        while len(heap) > 0:  # drop what was superseded (a batch end or a timer moved)
            at, d = heap[0]
            if at == free_at[d] or at == timers[d]:
                break
            heapq.heappop(heap)
        now = ft[i] if i < nf else inf
        if len(heap) > 0 and heap[0][0] < now:
            now = heap[0][0]
        if now == inf:
            break
        while i < nf and ft[i] <= now:  # publish the windows up to now
            s = fs[i]
            t = ft[i]
            d = where[s]
            if d < 0:  # it opens a mailbox: the router places it
                if router == 0:
                    d = pins[s]
                elif n_dev < 2:
                    d = 0
                else:
                    if n_dev == 2:
                        a, b = 0, 1
                    else:
                        a = int(_random(mt, mti) * n_dev)
                        b = int(_random(mt, mti) * (n_dev - 1))
                        if b >= a:
                            b += 1
                    ka = free_at[a] if busy[a] else -1.0
                    kb = free_at[b] if busy[b] else -1.0
                    if wn[a] < wn[b] or (wn[a] == wn[b] and (ka < kb or (ka == kb and a < b))):
                        d = a
                    else:
                        d = b
                where[s] = d
                since[s] = t
                waitq[d, wn[d]] = s
                wn[d] += 1
                opened[no] = i
                no += 1
            arrival[s] = t
            if not busy[d]:
                touched[d] = True
            i += 1
        if now > t_end:  # what ends after the run is not measured
            break
        while len(heap) > 0 and heap[0][0] <= now:
            touched[heapq.heappop(heap)[1]] = True
        for d in range(n_dev):
            if not touched[d]:
                continue
            touched[d] = False
            if busy[d] and free_at[d] <= now:  # its batch ends
                busy[d] = False
                free_at[d] = inf
                n = tn[d]
                if now >= t0:
                    m_f[nm, 0] = start[d]
                    m_f[nm, 1] = now
                    m_i[nm, 0] = n
                    m_i[nm, 1] = d
                    m_i[nm, 2] = why[d, 0]
                    m_i[nm, 3] = why[d, 1]
                    m_i[nm, 4] = why[d, 2]
                    nm += 1
                    for k in range(n):
                        d_a[nd] = taken_a[d, k]
                        d_s[nd] = taken_s[d, k]
                        nd += 1
                if code == 3:  # AdaptiveAIMD.observe
                    oldest = taken_a[d, 0]
                    for k in range(1, n):
                        if taken_a[d, k] < oldest:
                            oldest = taken_a[d, k]
                    latency_ms = (now - oldest) * 1000.0
                    c = max(1, int(grown[d]))
                    if latency_ms > slo_ms:
                        grown[d] = max(1.0, grown[d] * 0.9)
                    elif n >= c:
                        grown[d] = float(c + 1)
                        if cap >= 0:
                            grown[d] = min(grown[d], float(cap))
            if timers[d] <= now:
                timers[d] = inf
            w = wn[d]
            if busy[d] or w == 0:
                continue
            reason = 0
            take = 0  # the first ``take`` mailboxes (longest waiting), or ``one`` alone
            one = -1
            policy_cap = 0
            if code == 0:  # oldest: the earliest arrival, then the lower id
                one = 0
                for k in range(1, w):
                    s, best = waitq[d, k], waitq[d, one]
                    if arrival[s] < arrival[best] or (arrival[s] == arrival[best] and s < best):
                        one = k
                reason, policy_cap = ONE_AT_A_TIME, 1
            elif code == 1:  # round-robin: the next id after the last served, cycling
                one = 0
                after = -1
                for k in range(w):
                    s = waitq[d, k]
                    if s < waitq[d, one]:
                        one = k
                    if s > cursor[d] and (after < 0 or s < waitq[d, after]):
                        after = k
                if after >= 0:
                    one = after
                cursor[d] = waitq[d, one]
                reason, policy_cap = ONE_AT_A_TIME, 1
            elif code == 2 or code == 3:  # all, adaptive: longest-waiting first, to the cap
                c = cap if code == 2 else max(1, int(grown[d]))
                take = w if c < 0 or w <= c else c
                reason = CAP if c >= 0 and w > c else ALL_WAITING
                policy_cap = c if c >= 0 else 0
            else:  # dynamic, fixed: full, or the longest-waiting one's deadline passed
                deadline = since[waitq[d, 0]] + delay_s
                policy_cap = cap
                if w >= cap:
                    take = cap
                    reason = FIXED_SIZE if code == 5 else FULL
                elif now >= deadline:
                    take = w
                    reason = DEADLINE
                elif now < deadline and deadline < timers[d]:
                    timers[d] = deadline
                    heapq.heappush(heap, (deadline, d))
            if one >= 0:  # one window: out of the mailboxes, the rest keep their order
                s = waitq[d, one]
                taken_s[d, 0] = s
                taken_a[d, 0] = arrival[s]
                where[s] = -1
                for k in range(one, w - 1):
                    waitq[d, k] = waitq[d, k + 1]
                wn[d] = w - 1
                n = 1
            elif take > 0:
                for k in range(take):
                    s = waitq[d, k]
                    taken_s[d, k] = s
                    taken_a[d, k] = arrival[s]
                    where[s] = -1
                for k in range(take, w):
                    waitq[d, k - take] = waitq[d, k]
                wn[d] = w - take
                n = take
            else:
                continue
            rows = cap if code == 5 and cap > n else n
            tn[d] = n
            busy[d] = True
            start[d] = now
            why[d, 0] = reason
            why[d, 1] = policy_cap
            why[d, 2] = rows - n
            free_at[d] = now + batch_s[d, rows]
            timers[d] = inf
            heapq.heappush(heap, (free_at[d], d))
    return m_f[:nm], m_i[:nm], d_a[:nd], d_s[:nd], opened[:no], i


def _genrand(mt: np.ndarray, mti: np.ndarray) -> int:
    """The next 32-bit word of CPython's Mersenne Twister (``_randommodule.c``)."""
    n, m = 624, 397
    if mti[0] >= n:
        for kk in range(n):
            y = (mt[kk] & 0x80000000) | (mt[(kk + 1) % n] & 0x7FFFFFFF)
            mt[kk] = mt[(kk + m) % n] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        mti[0] = 0
    y = mt[mti[0]]
    mti[0] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y & 0xFFFFFFFF


def _random(mt: np.ndarray, mti: np.ndarray) -> float:
    """``random.Random.random()``: 53 bits from two words, as CPython makes them."""
    a = _genrand(mt, mti) >> 5
    b = _genrand(mt, mti) >> 6
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)


@functools.cache
def compiled() -> bool:
    """Compile the loop (once a process; numba caches it beside this file, or in the
    user's cache, so a later process loads it): False where numba cannot (not installed,
    nowhere to cache it, as in a frozen build, or its compiler fails here): the Python loop
    then plays every run. The loop is compiled by running it once on no frames, so a
    failure shows here, not in a run. Not at import: numba's own import costs ~0.2 s a
    command that never simulates would pay."""
    global _genrand, _random, _loop
    python = _genrand, _random, _loop
    try:
        from numba import njit

        _genrand = njit(cache=True)(_genrand)
        _random = njit(cache=True)(_random)
        _loop = njit(cache=True)(_loop)
        no_frames = np.zeros(0), np.zeros(0, np.int64), 0.0, 1.0, 1, np.zeros((1, 2)), 0, 1
        _loop(*no_frames, 0.0, 0.0, 1.0, 0, np.zeros(1, np.int64), np.zeros(624, np.int64),
              np.full(1, 624, np.int64), 1)  # fmt: skip
    except Exception:
        _genrand, _random, _loop = python
        return False
    return True


def compiled_loop(policies: Sequence[BatchPolicy]) -> bool:
    """Whether the compiled loop plays these policies (built-in kinds, numba present)."""
    return all(kind(p) is not None for p in policies) and compiled()


def play_compiled(
    frames: Schedule,
    policies: Sequence[BatchPolicy],
    curves: Sequence[BatchCurve],
    router: str,
    pins: Sequence[int] | None,
    draws: random.Random,
    t0: float,
    t_end: float,
    n_ids: int,
) -> tuple[Measured, Delivered]:
    """The measured batches and their windows of a plain run on ``len(curves)`` devices
    (:func:`~batchscope.sim.devices.play_devices`' records); ``frames.opened`` and
    ``frames.published`` filled as its loop fills them; ``draws`` left as it leaves them."""
    policy = policies[0]
    code = KINDS[kind(policy) or ""]
    cap = policy._max_batch if code >= 2 else 1  # type: ignore[attr-defined]
    cap = -1 if cap is None else int(cap)
    delay_s = policy._max_delay_ms / 1000.0 if code >= 4 else 0.0  # type: ignore[attr-defined]
    slo_ms = policy._slo_ms if code == 3 else 0.0  # type: ignore[attr-defined]
    grown_from = policy._cap if code == 3 else 1.0  # type: ignore[attr-defined]
    most = 1 if code <= 1 else (cap if code == 5 else n_ids)
    table = np.full((len(curves), most + 1), np.nan)
    seconds: dict[int, list[float]] = {}
    for d, curve in enumerate(curves):  # the loop's ``curve.ms(rows) * 1.0 / 1000.0``
        if id(curve) not in seconds:
            seconds[id(curve)] = [curve.ms(rows) * 1.0 / 1000.0 for rows in range(1, most + 1)]
        table[d, 1:] = seconds[id(curve)]
    version, internal, gauss = draws.getstate()
    mt = np.array(internal[:624], np.int64)
    mti = np.array([internal[624]], np.int64)
    m_f, m_i, d_a, d_s, opened, published = _loop(  # one type each: one compiled version
        frames.times_array.astype(np.float64, copy=False),
        frames.sessions_array.astype(np.int64, copy=False),
        float(t0),
        float(t_end),
        len(curves),
        table,
        code,
        int(cap),
        float(delay_s),
        float(slo_ms),
        float(grown_from),
        ROUTER_CODES[router],
        np.array(pins if pins is not None else [0] * n_ids, np.int64),
        mt,
        mti,
        int(n_ids),
    )
    draws.setstate((version, (*mt.tolist(), int(mti[0])), gauss))
    frames.opened.extend(opened.tolist())
    frames.published = int(published)
    starts, ends = m_f.T.tolist() if len(m_f) else ([], [])
    sizes, devices, reasons, caps, pads = m_i.T.tolist() if len(m_i) else ([], [], [], [], [])
    measured: Measured = list(zip(starts, sizes, ends, devices, reasons, caps, pads, strict=True))
    return measured, (d_a.tolist(), d_s.tolist())
