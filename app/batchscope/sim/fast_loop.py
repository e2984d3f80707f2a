"""The simulator's fast loop: a plain run on 1…N devices, compiled by numba.

Why it exists: the planner simulates hundreds of runs per answer and the issue of several
devices asks for ≥ 3 000× real time per device at 4 devices × 64 sessions, 174 ns a
window; one turn of a Python loop that publishes a window costs more than that
(docs/BENCHMARKS.md has the arithmetic). A *plain* run (one config from start to end: no
experiment step, no change of pace, no measured host, no deadline drop, no neighbours,
one resolution, a built-in policy: what the planner, ``simulate`` and ``simulate
--devices`` mostly play) plays here, on arrays, with the turns and the rules of the
general loop (:func:`~batchscope.sim.devices.play_until`, for 1…N devices), word for
word:

- every window in the schedule's order: one that finds its session's window waiting
  overwrites it where it waits; one that opens a mailbox is placed by the router
  (``pinned``: the session's device; ``least-loaded``: the power of two choices on
  waiting windows with :func:`~batchscope.engine.routing.least_loaded`'s draws, from
  the same ``random.Random`` state, its Mersenne Twister replayed here);
- a device is asked when a window arrives on it while it is idle, when its batch ends
  and when its timer falls due, devices in index order at one instant (the next instant
  is the earliest of the next window, every busy device's batch end and every timer);
- each device's mailboxes are kept in the order they opened, which is the order
  (since, session) the policies take the longest-waiting windows in, and the built-in
  policies' choices are the rules of :mod:`batchscope.engine.rules`, the functions the
  live policies call, compiled into the loop (``oldest``, ``round-robin``, ``all``,
  ``adaptive`` with its AIMD, ``dynamic`` and ``fixed`` with their deadline timers;
  least-loaded's choice too).

The loop is resumable: its state lives in arrays the caller holds (:class:`_State`),
so a run can stop at a batch's end and go on. A :data:`Stop` (the planner's
reject-only rules) is asked that way on one device, at the first batch end at or past
every :data:`CHECK_EVERY_S` of virtual time from the measured start, with the
mailboxes as they are before the device takes its next batch; True ends the run
(``play_fast`` returns None).

The records are the general loop's to the bit: ``tests/test_fast_loop.py`` plays
random plain runs both ways and compares every batch, window and overwrite, and
``benchmarks/sim_speed.py --check`` compares its grid with dumps made before this loop
played one device. The loop is one piece of Python that numba compiles; the same code
runs as Python (:func:`python_form`: the one code object, the rules uncompiled) as the
oracle the compiled form is tested against. Where numba cannot compile it (not
installed, a frozen build), :func:`compiled` is False and the general loop plays every
run: on numpy scalars the Python form runs 2-3x slower than it does
(docs/BENCHMARKS.md).
"""

from __future__ import annotations

import functools
import random
import types
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from batchscope.engine import rules
from batchscope.engine.policies import RULES, BatchPolicy
from batchscope.engine.routing import IDLE
from batchscope.engine.rules import (
    FIXED_SIZE,
    FULL,
    ONE_AT_A_TIME,
    aimd_next,
    capped_take,
    deadline_take,
    less_loaded,
    oldest_pick,
    round_robin_pick,
    two_choices,
)
from batchscope.profiles.profile import BatchCurve
from batchscope.sim.clock import Schedule


class Batch(NamedTuple):
    """One measured batch of a simulated run, as the loops record it."""

    start: float  # s, virtual clock
    size: int  # windows in it
    end: float  # s
    device: int  # the device that ran it; on one device, its curve's index (a step may switch)
    reason: int  # why it left (engine/rules.py's reasons)
    cap: int  # the policy's cap then
    padded: int  # rows the device ran beyond its windows (a fixed shape)


#: The measured batches, in the order they ended.
Measured = list[Batch]
#: A :class:`Batch` from the tuple of its fields, without NamedTuple's Python-level
#: ``__new__`` (a third of its cost: the loops make one a batch, 3 000 in a 30 s run)
make_batch: Callable[[tuple[float, int, float, int, int, int, int]], Batch] = functools.partial(
    tuple.__new__, Batch
)


class Delivered(NamedTuple):
    """The measured batches' windows, batch after batch (two flat lists: keeping each
    window's pending list to the end would hand the garbage collector ~20 000 long-lived
    objects a run to walk, again and again)."""

    arrivals: list[float]  # s
    sessions: list[int]


#: ``stop(now, waiting, measured, delivered)``: True ends the run (see the module doc);
#: ``waiting``: the sessions with a window waiting (no batch runs at ``now``)
Stop = Callable[[float, Collection[int], Measured, Delivered], bool]
CHECK_EVERY_S = 0.5  # virtual seconds between two asks of a Stop

#: The rules (engine/rules.py) the loop calls, compiled with it.
RULE_NAMES = (
    "oldest_pick", "round_robin_pick", "capped_take", "deadline_take", "aimd_next",
    "two_choices", "less_loaded",
)  # fmt: skip
#: The built-in policies the loop plays, by their code in it.
CODES = {"oldest": 0, "round-robin": 1, "all": 2, "adaptive": 3, "dynamic": 4, "fixed": 5}
ROUTER_CODES = {"pinned": 0, "least-loaded": 1}
DONE, CHECK = 0, 1  # what _loop returns: the run ended, or a Stop is to be asked
#: Positions in the loop's counters (``_State.counts``).
N_MEASURED, N_DELIVERED, N_OPENED, NEXT_WINDOW, RESUME, RESUME_DEVICE = range(6)


def code_of(policy: BatchPolicy) -> int | None:
    """The loop's code for ``policy`` (None: a rule it does not play, such as a subclass)."""
    if type(policy) is not RULES.get(policy.name):
        return None
    return CODES.get(policy.name)


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
    router: int,
    pins: np.ndarray,
    mt: np.ndarray,
    mti: np.ndarray,
    where: np.ndarray,
    ids: np.ndarray,
    dev_f: np.ndarray,
    dev_i: np.ndarray,
    waitq: np.ndarray,
    taken_s: np.ndarray,
    taken_a: np.ndarray,
    m_f: np.ndarray,
    m_i: np.ndarray,
    d_a: np.ndarray,
    d_s: np.ndarray,
    opened: np.ndarray,
    counts: np.ndarray,
    check: np.ndarray,
) -> int:
    """Play the run's turns (module doc) from the state in the arrays, until it ends
    (DONE) or a batch ends at or past ``check[0]`` (CHECK: ``check[1]`` is that instant;
    the caller asks its Stop and calls again). ``cap``: the policy's max_batch
    (``fixed``: its batch), -1 for none; ``delay_s``: ``dynamic``/``fixed``'s
    max_delay_ms / 1000; ``mt``/``mti``: least-loaded's Mersenne Twister state.

    The state (:class:`_State`): per session id, ``where`` its window waits (-1: none)
    and ``ids`` its arrival and since; ``dev_f``/``dev_i`` per device (batch end, timer,
    batch start, adaptive's cap; busy, asked, mailboxes open, windows taken, reason,
    the policy's cap, padded rows, round-robin's last id), the mailboxes in opening
    order and the windows taken, the records, ``counts``."""
    inf = np.inf
    nf = ft.size
    arrival, since = ids[0], ids[1]
    free_at, timers, start, grown = dev_f[0], dev_f[1], dev_f[2], dev_f[3]
    busy, touched, wn, tn = dev_i[0], dev_i[1], dev_i[2], dev_i[3]
    why_reason, why_cap, why_pad, cursor = dev_i[4], dev_i[5], dev_i[6], dev_i[7]
    nm, nd, no, i = counts[N_MEASURED], counts[N_DELIVERED], counts[N_OPENED], counts[NEXT_WINDOW]
    resume, resume_d = counts[RESUME], counts[RESUME_DEVICE]
    now = check[1]
    while True:
        if resume == 0:
            now = ft[i] if i < nf else inf
            for d in range(n_dev):
                if free_at[d] < now:
                    now = free_at[d]
                if timers[d] < now:
                    now = timers[d]
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
                            first = _random(mt, mti)
                            a, b = two_choices(n_dev, first, _random(mt, mti))
                        ka = free_at[a] if busy[a] else IDLE
                        kb = free_at[b] if busy[b] else IDLE
                        d = less_loaded(a, b, wn[a], wn[b], ka, kb)
                    where[s] = d
                    since[s] = t
                    waitq[d, wn[d]] = s
                    wn[d] += 1
                    opened[no] = i
                    no += 1
                arrival[s] = t
                if not busy[d]:
                    touched[d] = 1
                i += 1
            if now > t_end:  # what ends after the run is not measured
                break
            for d in range(n_dev):
                if free_at[d] <= now or timers[d] <= now:
                    touched[d] = 1
        for d in range(n_dev):
            if resume == 1:  # back from a check: on at this device's choice
                if d != resume_d:
                    continue
                resume = 0
            else:
                if not touched[d]:
                    continue
                touched[d] = 0
                if busy[d] and free_at[d] <= now:  # its batch ends
                    busy[d] = 0
                    free_at[d] = inf
                    n = tn[d]
                    if now >= t0:
                        m_f[nm, 0] = start[d]
                        m_f[nm, 1] = now
                        m_i[nm, 0] = n
                        m_i[nm, 1] = d
                        m_i[nm, 2] = why_reason[d]
                        m_i[nm, 3] = why_cap[d]
                        m_i[nm, 4] = why_pad[d]
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
                        top = float(cap) if cap >= 0 else inf
                        grown[d] = aimd_next(grown[d], latency_ms, n, slo_ms, top)
                    if now >= check[0]:  # the caller asks its Stop, then calls again
                        counts[N_MEASURED], counts[N_DELIVERED] = nm, nd
                        counts[N_OPENED], counts[NEXT_WINDOW] = no, i
                        counts[RESUME], counts[RESUME_DEVICE] = 1, d
                        check[1] = now
                        return CHECK
            if timers[d] <= now:
                timers[d] = inf
            w = wn[d]
            if busy[d] or w == 0:
                continue
            reason = 0
            take = 0  # the first ``take`` mailboxes (longest waiting), or ``one`` alone
            one = -1
            policy_cap = 0
            if code == 0:  # oldest
                one = oldest_pick(waitq[d], w, arrival)
                reason, policy_cap = ONE_AT_A_TIME, 1
            elif code == 1:  # round-robin
                one = round_robin_pick(waitq[d], w, cursor[d])
                cursor[d] = waitq[d, one]
                reason, policy_cap = ONE_AT_A_TIME, 1
            elif code == 2 or code == 3:  # all, adaptive: longest-waiting first, to the cap
                c = cap if code == 2 else max(1, int(grown[d]))
                take, reason = capped_take(w, c)
                policy_cap = c if c >= 0 else 0
            else:  # dynamic, fixed: full, or the longest-waiting one's deadline passed
                deadline = since[waitq[d, 0]] + delay_s
                policy_cap = cap
                full = FIXED_SIZE if code == 5 else FULL
                take, reason = deadline_take(w, cap, now, deadline, full)
                if take == 0 and deadline < timers[d]:
                    timers[d] = deadline
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
            busy[d] = 1
            start[d] = now
            why_reason[d] = reason
            why_cap[d] = policy_cap
            why_pad[d] = rows - n
            free_at[d] = now + batch_s[d, rows]
            timers[d] = inf
    counts[N_MEASURED], counts[N_DELIVERED], counts[N_OPENED], counts[NEXT_WINDOW] = nm, nd, no, i
    counts[RESUME] = 0
    return DONE


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


class _State:
    """The loop's state between two calls (:func:`_loop`'s doc says what each holds)."""

    def __init__(self, n_frames: int, n_dev: int, n_ids: int, grown: float, last: int) -> None:
        self.where = np.full(n_ids, -1, np.int64)
        self.ids = np.zeros((2, n_ids))
        self.dev_f = np.zeros((4, n_dev))
        self.dev_f[0:2] = np.inf  # no batch end, no timer
        self.dev_f[3] = grown
        self.dev_i = np.zeros((8, n_dev), np.int64)
        self.dev_i[7] = last
        self.waitq = np.zeros((n_dev, n_ids), np.int64)
        self.taken_s = np.zeros((n_dev, n_ids), np.int64)
        self.taken_a = np.zeros((n_dev, n_ids))
        self.m_f = np.empty((n_frames + 1, 2))  # start, end
        self.m_i = np.empty((n_frames + 1, 5), np.int64)  # size, device, reason, cap, padded
        self.d_a = np.empty(n_frames)
        self.d_s = np.empty(n_frames, np.int64)
        self.opened = np.empty(n_frames, np.int64)
        self.counts = np.zeros(6, np.int64)
        self.check = np.array([np.inf, 0.0])  # ask a Stop at a batch end from [0]; when [1]

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self.where, self.ids, self.dev_f, self.dev_i, self.waitq, self.taken_s,
            self.taken_a, self.m_f, self.m_i, self.d_a, self.d_s, self.opened, self.counts,
            self.check,
        )  # fmt: skip

    def waiting(self) -> list[int]:
        """The sessions with a window waiting."""
        return np.flatnonzero(self.where >= 0).tolist()


class _Records:
    """The measured batches and their windows as lists, extended from the loop's arrays."""

    def __init__(self) -> None:
        self.measured: Measured = []
        self.delivered = Delivered([], [])

    def catch_up(self, state: _State) -> None:
        done, nm = len(self.measured), int(state.counts[N_MEASURED])
        if nm > done:
            starts, ends = state.m_f[done:nm].T.tolist()
            sizes, devices, reasons, caps, pads = state.m_i[done:nm].T.tolist()
            rows = zip(starts, sizes, ends, devices, reasons, caps, pads, strict=True)
            self.measured.extend(map(make_batch, rows))
        have, nd = len(self.delivered.arrivals), int(state.counts[N_DELIVERED])
        if nd > have:
            self.delivered.arrivals.extend(state.d_a[have:nd].tolist())
            self.delivered.sessions.extend(state.d_s[have:nd].tolist())


def _call(
    loop: Callable[..., int],
    frames: tuple[np.ndarray, np.ndarray],
    params: tuple[Any, ...],
    draws: tuple[np.ndarray, np.ndarray],
    state: _State,
) -> int:
    """One call of the loop, its arguments in order (one type each: one compiled version)."""
    return int(loop(*frames, *params, *draws, *state.arrays()))


@functools.cache
def compiled() -> bool:
    """Compile the loop (once a process; numba caches it beside this file, or in the
    user's cache, so a later process loads it): False where numba cannot (not installed,
    nowhere to cache it, as in a frozen build, or its compiler fails here): the general
    loops then play every run. The loop is compiled by running it once on no frames, so a
    failure shows here, not in a run. Not at import: numba's own import costs ~0.2 s a
    command that never simulates would pay."""
    python = {name: globals()[name] for name in (*RULE_NAMES, *_PYTHON)}
    try:
        from numba import njit

        # the rules (engine/rules.py) first, under the names the loop calls them by, then
        # the loop's own functions: numba reads the module's names when it compiles
        for name in RULE_NAMES:
            globals()[name] = njit(cache=True)(getattr(rules, name))
        for name in _PYTHON:
            globals()[name] = njit(cache=True)(python[name])
        params = (0.0, 1.0, 1, np.zeros((1, 2)), 0, 1, 0.0, 0.0, 0, np.zeros(1, np.int64))
        draws = np.zeros(624, np.int64), np.full(1, 624, np.int64)
        frames = np.zeros(0), np.zeros(0, np.int64)
        _call(globals()["_loop"], frames, params, draws, _State(0, 1, 1, 1.0, -1))
    except Exception:
        globals().update(python)
        return False
    return True


def plays_fast(policies: Sequence[BatchPolicy]) -> bool:
    """Whether the fast loop plays these policies here (built-in rules, numba present)."""
    return all(code_of(p) is not None for p in policies) and compiled()


@functools.cache
def python_form() -> Callable[..., int]:
    """The loop as Python: :func:`_loop`'s own code object over a namespace in which the
    rules and the Mersenne Twister are the uncompiled functions (numba, once it compiled
    the loop, left its dispatchers under those names in this module)."""
    space = dict(globals())
    space.update({name: getattr(rules, name) for name in RULE_NAMES})
    for name, function in _PYTHON.items():
        space[name] = types.FunctionType(function.__code__, space, name)
    return cast("Callable[..., int]", space["_loop"])


def play_fast(
    frames: Schedule,
    policies: Sequence[BatchPolicy],
    curves: Sequence[BatchCurve],
    router: str,
    pins: Sequence[int] | None,
    draws: random.Random | None,
    t0: float,
    t_end: float,
    n_ids: int,
    stop: Stop | None = None,
    python: bool = False,
) -> tuple[Measured, Delivered] | None:
    """The measured batches and their windows of a plain run on ``len(curves)`` devices
    (the general loop's records), or None when ``stop`` ended it (one device only), played
    by the compiled loop (``python``: by its Python form, the tests' oracle);
    ``frames.opened`` and ``frames.published`` filled as the loops fill them; ``draws``
    (least-loaded's; None where nothing is drawn: pinned, or fewer than three devices)
    left as they leave them; one device's policy left as it would be (adaptive's cap,
    round-robin's last id)."""
    policy = policies[0]
    code = code_of(policy)
    assert code is not None, "plays_fast() said which policies play here"
    assert stop is None or len(curves) == 1, "a Stop is asked on one device"
    assert draws is not None or router == "pinned" or len(curves) < 3, "least-loaded draws"
    cap = policy._max_batch if code >= 2 else 1  # type: ignore[attr-defined]
    cap = -1 if cap is None else int(cap)
    delay_s = policy._max_delay_ms / 1000.0 if code >= 4 else 0.0  # type: ignore[attr-defined]
    slo_ms = policy._slo_ms if code == 3 else 0.0  # type: ignore[attr-defined]
    grown = policy._cap if code == 3 else 1.0  # type: ignore[attr-defined]
    last = getattr(policy, "_last", None)
    most = 1 if code <= 1 else (cap if code == 5 else n_ids)
    table = np.full((len(curves), most + 1), np.nan)
    seconds: dict[int, list[float]] = {}
    for d, curve in enumerate(curves):  # the general loop's ``curve.ms(rows) * 1.0 / 1000.0``
        if id(curve) not in seconds:
            seconds[id(curve)] = [curve.ms(rows) * 1.0 / 1000.0 for rows in range(1, most + 1)]
        table[d, 1:] = seconds[id(curve)]
    if draws is None:  # no router draws (one device): a state never drawn from
        mt, mti = np.zeros(624, np.int64), np.full(1, 624, np.int64)
    else:
        version, internal, gauss = draws.getstate()
        mt = np.array(internal[:624], np.int64)
        mti = np.array([internal[624]], np.int64)
    times = frames.times_array.astype(np.float64, copy=False)
    sessions = frames.sessions_array.astype(np.int64, copy=False)
    n_dev = len(curves)
    pinned = np.array(pins if pins is not None else [0] * n_ids, np.int64)
    params = (float(t0), float(t_end), n_dev, table, code, int(cap), float(delay_s),
              float(slo_ms), ROUTER_CODES[router], pinned)  # fmt: skip
    state = _State(times.size, n_dev, n_ids, float(grown), -1 if last is None else int(last))
    records = _Records()
    if stop is not None:
        state.check[0] = t0
    loop = python_form() if python else globals()["_loop"]
    while _call(loop, (times, sessions), params, (mt, mti), state) == CHECK:
        assert stop is not None
        records.catch_up(state)
        now = float(state.check[1])
        if stop(now, state.waiting(), records.measured, records.delivered):
            return None
        state.check[0] = now + CHECK_EVERY_S
    records.catch_up(state)
    if draws is not None:
        draws.setstate((version, (*mt.tolist(), int(mti[0])), gauss))
    frames.opened.extend(state.opened[: state.counts[N_OPENED]].tolist())
    frames.published = int(state.counts[NEXT_WINDOW])
    if n_dev == 1:
        if code == 3:
            policy._cap = float(state.dev_f[3, 0])  # type: ignore[attr-defined]
        if code == 1:
            cursor = int(state.dev_i[7, 0])
            policy._last = None if cursor < 0 else cursor  # type: ignore[attr-defined]
    return records.measured, records.delivered


#: The loop's own functions as Python, before :func:`compiled` puts numba's in their place.
_PYTHON = {"_genrand": _genrand, "_random": _random, "_loop": _loop}
