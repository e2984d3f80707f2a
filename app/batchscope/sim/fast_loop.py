"""The simulator's loop for 1…N devices: compiled by numba, driven stretch by stretch.

Why it exists: the planner simulates hundreds of runs per answer and the issue of several
devices asks for ≥ 3 000× real time per device at 4 devices × 64 sessions, 174 ns a
window; one turn of a Python loop that publishes a window costs more than that
(docs/BENCHMARKS.md has the arithmetic). Every simulated run plays here (``simulate``,
``simulate --devices``, ``simulate --experiment``, the planner, a live segment's
prediction, the findings' runs at several resolutions), on arrays, driven by
:func:`~batchscope.sim.devices.play_until`, with these turns and rules:

- every window in the schedule's order: one that finds its session's window waiting
  overwrites it where it waits; one that opens a mailbox is placed by the router
  (``pinned``: the session's device; ``least-loaded``: the power of two choices on
  waiting windows with :func:`~batchscope.engine.routing.least_loaded`'s draws, from
  the same ``random.Random`` state, its Mersenne Twister replayed here);
- a device is asked when a window arrives on it while it is idle, when its batch ends,
  when its timer falls due and when its late worker wakes, devices in index order at
  one instant (the next instant is the earliest of those);
- each device's mailboxes are kept in the order they opened, which is the order
  (since, session) the policies take the longest-waiting windows in, and the built-in
  policies' choices are the rules of :mod:`batchscope.engine.rules`, the functions the
  live policies call, compiled into the loop (``oldest``, ``round-robin``, ``all``,
  ``adaptive`` with its AIMD, ``dynamic`` and ``fixed`` with their deadline timers;
  least-loaded's choice too); sessions at several resolutions (``Shapes``): a device
  takes the shape of its longest-waiting window, its policy chooses among that shape's
  windows, and the batch takes that shape's time;
- the worker's deadline drop on each device (``Mailboxes.expire``'s rule), a measured
  host's lateness (each idle device's worker waking late, each batch ending late: draws
  of a ``random.Random(seed + 7919)``, replayed, on the measured quantiles) and the
  emulated neighbours' stretch of each batch (their own draws, replayed).

The loop is resumable: its state lives in arrays the caller holds (:class:`Run`), so a
run can stop and go on. It stops at each change the driver makes between two stretches
(:func:`~batchscope.sim.devices.play_until`: an experiment's step, a fault's start or
end, a session's pace): the windows before the change are published, the driver applies
it (the config, the policies, the devices and the router, the curves, the knobs, the
next schedule) and the loop goes on at the change's instant. A :data:`Stop` (the
planner's reject-only rules) is asked on a plain run on one device, at the first batch
end at or past every :data:`CHECK_EVERY_S` of virtual time from the measured start, with
the mailboxes as they are before the device takes its next batch; True ends the run.

The loop is one piece of Python that numba compiles; the same code runs as Python
(:func:`python_form`: the one code object, the rules uncompiled, on lists) as the
oracle the compiled form is tested against, and as the fallback: where numba cannot
compile it (not installed, a frozen build), :func:`compiled` is False and the Python
form plays every run (7-19x slower than compiled; 0.62-1.22x the time of the general
Python loop it replaced: docs/BENCHMARKS.md). The records are that general loop's to the bit:
``tests/data/loop_records.json`` holds its records of 244 random runs (plain runs,
experiments of every step and fault, the devices and the router too, paces, drops, late
hosts, neighbours, several resolutions), which the compiled loop gives, and
``benchmarks/sim_speed.py --check`` compares its grid with dumps made before this loop
played one device. A policy has a code here (:data:`CODES`) or is refused.
"""

from __future__ import annotations

import functools
import math
import random
import types
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from batchscope.engine import rules
from batchscope.engine.neighbours import SLICE_MS, SWITCH_MS, Neighbours
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
from batchscope.sim.host_jitter import HostJitter


class Batch(NamedTuple):
    """One measured batch of a simulated run, as the loops record it."""

    start: float  # s, virtual clock
    size: int  # windows in it
    end: float  # s
    device: int  # the device that ran it; on one device, its curve's index (a step may switch)
    reason: int  # why it left (engine/rules.py's reasons)
    cap: int  # the policy's cap then
    padded: int  # rows the device ran beyond its windows (a fixed shape)


#: A :class:`Batch` from the tuple of its fields, without NamedTuple's Python-level
#: ``__new__`` (a third of its cost)
make_batch: Callable[[tuple[float, int, float, int, int, int, int]], Batch] = functools.partial(
    tuple.__new__, Batch
)


class Measured(Sequence[Batch]):
    """The measured batches, in the order they ended: the loop's records as columns (one
    array per :class:`Batch` field, added a stretch at a time), read as :class:`Batch`
    rows only when asked. Why: the report and the planner read columns; making a Batch a
    row (12 000 in a 30 s run at 4 x 64) and taking the columns back out of them cost 40 %
    of such a run's simulation."""

    def __init__(self) -> None:
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self._n = 0
        self._joined: tuple[np.ndarray, ...] | None = None
        self._rows: list[Batch] | None = None

    def add(self, columns: Sequence[np.ndarray]) -> None:
        """Batches ended after those held: one array per field, in :class:`Batch` order."""
        n = len(columns[0])
        if n:
            self._chunks.append(tuple(columns))
            self._n += n
            self._joined = self._rows = None

    def columns(self, since: int = 0) -> tuple[np.ndarray, ...]:
        """The fields' arrays, rows ``since`` on (start, size, end, device, reason, cap,
        padded)."""
        if self._joined is None:
            if len(self._chunks) > 1:
                self._chunks = [tuple(np.concatenate(c) for c in zip(*self._chunks, strict=True))]
            self._joined = self._chunks[0] if self._chunks else _NO_BATCHES
        return self._joined if since == 0 else tuple(c[since:] for c in self._joined)

    def _list(self) -> list[Batch]:
        if self._rows is None:
            fields = (c.tolist() for c in self.columns())
            self._rows = list(map(make_batch, zip(*fields, strict=True)))
        return self._rows

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k: Any) -> Any:
        return self._list()[k]

    def __iter__(self) -> Iterator[Batch]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._list() == list(other)

    def __repr__(self) -> str:
        return f"Measured({self._list()!r})"


_INTS = np.zeros(0, np.int64)
_NO_BATCHES = (np.zeros(0), _INTS, np.zeros(0), _INTS, _INTS, _INTS, _INTS)


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
#: What _loop returns: the run ended, a Stop is to be asked, a change is due.
DONE, CHECK, CHANGE = 0, 1, 2
#: Positions in the loop's counters (``_State.counts``).
N_MEASURED, N_DELIVERED, N_OPENED, NEXT_WINDOW, RESUME, RESUME_DEVICE, N_EXPIRED = range(7)
#: Positions in ``pol`` (int64): the policy's code and cap, the router, the devices that
#: take windows, the device slots (those that left too), device 0's curve index, the
#: policy's generation (a new policy object: +1), deadline drop on, host jitter on, the
#: neighbours' count (0: none), the shapes (K: sessions at K resolutions).
(P_CODE, P_CAP, P_ROUTER, P_DEVICES, P_SLOTS, P_CURVE, P_GEN, P_DROP, P_JITTER, P_NB,
 P_SHAPES) = range(11)  # fmt: skip
#: Positions in ``polf`` (float64): dynamic/fixed's max delay (s), adaptive's objective
#: (ms), the drop's limit (s), the neighbours' duty, the chance a neighbour is busy when a
#: batch arrives, the next change's instant (inf: none).
F_DELAY, F_SLO, F_DROP, F_DUTY, F_BUSY_NOW, F_CHANGE = range(6)
#: Rows of ``dev_f`` and ``dev_i``, per device.
D_FREE, D_TIMER, D_START, D_GROWN, D_WOKEN, D_SLOW = range(6)
(I_BUSY, I_TOUCHED, I_WAITING, I_TAKEN, I_REASON, I_CAP, I_PAD, I_CURSOR, I_CURVE, I_GEN,
 I_WOKE) = range(11)  # fmt: skip


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
    batch_s: np.ndarray,
    ms_table: np.ndarray,
    pins: np.ndarray,
    shape_of: np.ndarray,
    seen: np.ndarray,
    pol: np.ndarray,
    polf: np.ndarray,
    mt: np.ndarray,
    mti: np.ndarray,
    wake_g: np.ndarray,
    wake_q: np.ndarray,
    late_g: np.ndarray,
    late_q: np.ndarray,
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
    e_s: np.ndarray,
    e_t: np.ndarray,
    opened: np.ndarray,
    picked: np.ndarray,
    counts: np.ndarray,
    check: np.ndarray,
) -> int:
    """Play the run's turns (module doc) from the state in the arrays, until it ends
    (DONE), a batch ends at or past ``check[0]`` (CHECK: ``check[1]`` is that instant; the
    caller asks its Stop and calls again) or the next change is due (CHANGE, at
    ``check[1]``: the caller applies it, gives the next schedule and calls again).

    ``batch_s[d * K + k][rows]``: device ``d``'s batch time at shape ``k`` of ``K``
    (s; its slowdown in it), ``ms_table[d * K + k][rows]`` its curve's ms (what the
    neighbours stretch), ``seen`` 1 there once a batch ran it; ``pins``: ``pinned``'s
    device per session; ``shape_of``: each session's shape (K > 1: a device takes the
    shape of its longest-waiting window, its policy chooses among that shape's windows,
    ``picked`` holds them); ``pol``/``polf``: the policy, router and knobs now
    (``P_*``/``F_*``); ``mt``/``mti``: three Mersenne Twister states: least-loaded's
    draws, the host's lateness (``wake_*``/``late_*``: its quantiles, on their grids) and
    the neighbours' time slices.

    The state (:class:`_State`): per session id, ``where`` its window waits (-1: none)
    and ``ids`` its arrival and since; ``dev_f``/``dev_i`` per device (``D_*``/``I_*``),
    the mailboxes in opening order and the windows taken, the records (measured batches,
    their windows, the windows dropped, the windows that opened a mailbox), ``counts``."""
    inf = np.inf
    code, cap, n_dev, slots = pol[P_CODE], pol[P_CAP], pol[P_DEVICES], pol[P_SLOTS]
    curve_k, gen = pol[P_CURVE], pol[P_GEN]
    drop_on, jitter_on, nb, n_shapes = pol[P_DROP], pol[P_JITTER], pol[P_NB], pol[P_SHAPES]
    delay_s, slo_ms, drop_s = polf[F_DELAY], polf[F_SLO], polf[F_DROP]
    duty, busy_now, change_at = polf[F_DUTY], polf[F_BUSY_NOW], polf[F_CHANGE]
    arrival, since = ids[0], ids[1]
    free_at, timers, start = dev_f[D_FREE], dev_f[D_TIMER], dev_f[D_START]
    grown, woken, slow = dev_f[D_GROWN], dev_f[D_WOKEN], dev_f[D_SLOW]
    busy, touched, wn, tn = dev_i[I_BUSY], dev_i[I_TOUCHED], dev_i[I_WAITING], dev_i[I_TAKEN]
    why_reason, why_cap, why_pad = dev_i[I_REASON], dev_i[I_CAP], dev_i[I_PAD]
    cursor, b_curve, b_gen = dev_i[I_CURSOR], dev_i[I_CURVE], dev_i[I_GEN]
    woke = dev_i[I_WOKE]  # a device that left while its late wake was due: due since
    router, route_mt, route_mti = pol[P_ROUTER], mt[0], mti[0]
    late_mt, late_mti, nb_mt, nb_mti = mt[1], mti[1], mt[2], mti[2]
    nm, nd, ne = counts[N_MEASURED], counts[N_DELIVERED], counts[N_EXPIRED]
    no, i, nf = counts[N_OPENED], counts[NEXT_WINDOW], len(ft)
    resume, resume_d = counts[RESUME], counts[RESUME_DEVICE]
    now = check[1]
    while True:
        before = False  # publish the windows before a change, not at it
        on = False  # publish on past ``now`` while the windows ask no device anything
        dev_next = inf  # the first batch end, timer or late wake
        if resume == 0:
            for d in range(slots):
                if free_at[d] < dev_next:
                    dev_next = free_at[d]
                if timers[d] < dev_next:
                    dev_next = timers[d]
            if jitter_on:
                for d in range(slots):
                    if woken[d] < dev_next:
                        dev_next = woken[d]
            now = ft[i] if i < nf and ft[i] < dev_next else dev_next
            if now == inf and change_at == inf:
                break
            before = change_at <= now
            on = not before
        if resume != 1:  # a turn at ``now`` (resume 2: a change's, on the new schedule)
            resume = 0
            hit = False  # a window reached an idle device: it is asked at this instant
            limit = (
                np.nextafter(change_at, -inf) if before else now
            )  # before it: up to the float below
            while i < nf and ft[i] <= limit:
                s = fs[i]  # publish it: a window overwrites its session's, or opens a mailbox
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
                            first = _random(route_mt, route_mti)
                            a, b = two_choices(n_dev, first, _random(route_mt, route_mti))
                        ka = free_at[a] if busy[a] else IDLE
                        kb = free_at[b] if busy[b] else IDLE
                        d = less_loaded(a, b, wn[a], wn[b], ka, kb)
                    where[s] = d
                    since[s] = t
                    waitq[d][wn[d]] = s
                    wn[d] += 1
                    opened[no] = i
                    no += 1
                arrival[s] = t
                if not busy[d]:
                    touched[d] = 1
                    hit = True
                i += 1
                # this instant's windows are published and asked no device anything (each
                # overwrote, or waits on a busy device): that was the turn; the next
                # instant is the next window's, if before every device's event
                if (
                    on and not hit and i < nf and limit < ft[i] < dev_next
                    and ft[i] < change_at and now <= t_end
                ):  # fmt: skip
                    now = limit = ft[i]
            if before:  # the change first: the caller applies it, then calls again
                counts[N_MEASURED], counts[N_DELIVERED], counts[N_EXPIRED] = nm, nd, ne
                counts[N_OPENED], counts[NEXT_WINDOW], counts[RESUME] = no, i, 2
                check[1] = change_at
                return CHANGE
            if now > t_end:  # what ends after the run is not measured
                break
            for d in range(slots):
                if free_at[d] <= now or timers[d] <= now:
                    touched[d] = 1
            if jitter_on:
                for d in range(slots):
                    if woken[d] <= now:
                        touched[d] = 1
        for d in range(slots):
            ended = False
            if resume == 1:  # back from a check: on at this device's choice
                if d != resume_d:
                    continue
                resume = 0
                ended = True
            else:
                if not touched[d]:
                    continue
                touched[d] = 0
                if busy[d] and free_at[d] <= now:  # its batch ends
                    ended = True
                    busy[d] = 0
                    free_at[d] = inf
                    n = tn[d]
                    if now >= t0:
                        m_f[2 * nm] = start[d]
                        m_f[2 * nm + 1] = now
                        r = 6 * nm
                        m_i[r] = n
                        m_i[r + 1] = d
                        m_i[r + 2] = why_reason[d]
                        m_i[r + 3] = why_cap[d]
                        m_i[r + 4] = why_pad[d]
                        m_i[r + 5] = b_curve[d]
                        nm += 1
                        for k in range(n):
                            d_a[nd] = taken_a[d][k]
                            d_s[nd] = taken_s[d][k]
                            nd += 1
                    if b_gen[d] == gen:  # AdaptiveAIMD.observe (its policy chose it)
                        oldest = taken_a[d][0]
                        for k in range(1, n):
                            if taken_a[d][k] < oldest:
                                oldest = taken_a[d][k]
                        latency_ms = (now - oldest) * 1000.0
                        top = float(cap) if cap >= 0 else inf
                        grown[d] = aimd_next(grown[d], latency_ms, n, slo_ms, top)
                    if now >= check[0]:  # the caller asks its Stop, then calls again
                        counts[N_MEASURED], counts[N_DELIVERED], counts[N_EXPIRED] = nm, nd, ne
                        counts[N_OPENED], counts[NEXT_WINDOW] = no, i
                        counts[RESUME], counts[RESUME_DEVICE] = 1, d
                        check[1] = now
                        return CHECK
            if timers[d] <= now:
                timers[d] = inf
            if d >= n_dev:  # it left the run: its last batch ended, it takes no more
                if woken[d] <= now:  # its wake came: held for a return, asked no more
                    woken[d], woke[d] = inf, 1
                continue
            if jitter_on:
                if not busy[d] and not ended and not woke[d]:  # an idle worker wakes late
                    if woken[d] == inf:
                        woken[d] = now + _delay(_random(late_mt, late_mti), wake_g, wake_q)
                    if woken[d] > now:
                        continue  # it decides then (what arrives meanwhile waits for it)
                woken[d], woke[d] = inf, 0
            w = wn[d]
            if drop_on and not busy[d]:  # Mailboxes.expire's rule, on its device
                kept = 0
                for k in range(w):
                    s = waitq[d][k]
                    if now - arrival[s] > drop_s:
                        where[s] = -1
                        if now >= t0:
                            e_s[ne] = s
                            e_t[ne] = now
                            ne += 1
                    else:
                        waitq[d][kept] = s
                        kept += 1
                wn[d] = w = kept
            if busy[d] or w == 0:
                continue
            k = 0  # the shape the batch runs at
            queue = waitq[d]  # what the policy chooses among: the device's mailboxes
            m = w
            if n_shapes > 1:  # the longest-waiting window's shape, its windows only
                k = shape_of[queue[0]]
                queue = picked
                m = 0
                for j in range(w):
                    s = waitq[d][j]
                    if shape_of[s] == k:
                        picked[m] = s
                        m += 1
            reason = 0
            take = 0  # the first ``take`` mailboxes (longest waiting), or ``one`` alone
            one = -1
            policy_cap = 0
            if code == 0:  # oldest
                one = oldest_pick(queue, m, arrival)
                reason, policy_cap = ONE_AT_A_TIME, 1
            elif code == 1:  # round-robin
                one = round_robin_pick(queue, m, cursor[d])
                cursor[d] = queue[one]
                reason, policy_cap = ONE_AT_A_TIME, 1
            elif code == 2 or code == 3:  # all, adaptive: longest-waiting first, to the cap
                c = cap if code == 2 else max(1, int(grown[d]))
                take, reason = capped_take(m, c)
                policy_cap = c if c >= 0 else 0
            else:  # dynamic, fixed: full, or the longest-waiting one's deadline passed
                deadline = since[queue[0]] + delay_s
                policy_cap = cap
                full = FIXED_SIZE if code == 5 else FULL
                take, reason = deadline_take(m, cap, now, deadline, full)
                if take == 0 and deadline < timers[d]:
                    timers[d] = deadline
            if one >= 0:  # one window
                n = 1
                taken_s[d][0] = queue[one]
            elif take > 0:
                n = take
                for j in range(take):
                    taken_s[d][j] = queue[j]
            else:
                continue
            for j in range(n):  # out of the mailboxes, the rest keep their order
                s = taken_s[d][j]
                taken_a[d][j] = arrival[s]
                where[s] = -1
            if n_shapes > 1:  # those of its shape left
                kept = 0
                for j in range(w):
                    s = waitq[d][j]
                    if where[s] >= 0:
                        waitq[d][kept] = s
                        kept += 1
            elif one >= 0:  # the one left
                for j in range(one, w - 1):
                    waitq[d][j] = waitq[d][j + 1]
            else:  # the first n left
                for j in range(n, w):
                    waitq[d][j - n] = waitq[d][j]
            wn[d] = w - n
            rows = cap if code == 5 and cap > n else n
            tn[d] = n
            busy[d] = 1
            start[d] = now
            why_reason[d] = reason
            why_cap[d] = policy_cap
            why_pad[d] = rows - n
            b_curve[d] = curve_k
            b_gen[d] = gen if code == 3 else -1  # the adaptive policy that chose it, if any
            row = d * n_shapes + k
            seen[row][rows] = 1
            if nb > 0:  # each batch draws its own stretch from the time slices
                ms = _stretch(ms_table[row][rows], nb, duty, busy_now, nb_mt, nb_mti)
                free_at[d] = now + ms * slow[d] / 1000.0
            else:
                free_at[d] = now + batch_s[row][rows]
            if jitter_on:  # a busy host's timer ends the batch late
                free_at[d] += _delay(_random(late_mt, late_mti), late_g, late_q)
            timers[d] = inf
    counts[N_MEASURED], counts[N_DELIVERED], counts[N_EXPIRED] = nm, nd, ne
    counts[N_OPENED], counts[NEXT_WINDOW], counts[RESUME] = no, i, 0
    return DONE


def _delay(u: float, grid: np.ndarray, quantiles: np.ndarray) -> float:
    """``HostJitter``'s draw: the measured lateness (s) at the uniform number ``u``."""
    if len(quantiles) == 0:
        return 0.0
    return np.interp(u, grid, quantiles) / 1000.0


def _stretch(
    ms: float, count: int, duty: float, busy_now: float, mt: np.ndarray, mti: np.ndarray
) -> float:
    """``Neighbours.stretch``: the wall-clock ms of a batch that needs ``ms`` alone, its
    draws from the neighbours' own Mersenne Twister."""
    if ms <= 0:
        return ms
    total = ms
    if _random(mt, mti) < busy_now:
        total += _random(mt, mti) * SLICE_MS  # the rest of the slice running when we arrived
    for _ in range(math.ceil(ms / SLICE_MS) - 1):  # between our slices
        for _ in range(count):
            if _random(mt, mti) < duty:
                total += SLICE_MS + SWITCH_MS
    return total


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
    """The loop's state between two calls (:func:`_loop`'s doc says what each holds), for
    ``slots`` devices (every device the run ever has) and ``n_ids`` session ids."""

    def __init__(self, slots: int, n_ids: int) -> None:
        self.slots, self.n_ids = slots, n_ids
        self.where = np.full(n_ids, -1, np.int64)
        self.ids = np.zeros((2, n_ids))
        self.dev_f = np.zeros((6, slots))
        self.dev_f[[D_FREE, D_TIMER, D_WOKEN]] = np.inf  # no batch end, no timer, no wake
        self.dev_f[[D_GROWN, D_SLOW]] = 1.0
        self.dev_i = np.zeros((11, slots), np.int64)
        self.dev_i[I_CURSOR] = -1
        self.waitq = np.zeros((slots, n_ids), np.int64)
        self.taken_s = np.zeros((slots, n_ids), np.int64)
        self.taken_a = np.zeros((slots, n_ids))
        self.picked = np.zeros(n_ids, np.int64)  # a device's windows of one shape
        self.counts = np.zeros(7, np.int64)
        self.check = np.array([np.inf, 0.0])  # ask a Stop at a batch end from [0]; when [1]
        self._records(0)

    def _records(self, size: int) -> None:
        self.m_f = np.empty(size * 2)  # start, end: a row each, flat
        self.m_i = np.empty(size * 6, np.int64)  # size, device, reason, cap, padded, curve
        self.d_a = np.empty(size)
        self.d_s = np.empty(size, np.int64)
        self.e_s = np.empty(size, np.int64)
        self.e_t = np.empty(size)
        self.opened = np.empty(size, np.int64)

    def fit(self, n_frames: int) -> None:
        """Room for the records of a stretch of ``n_frames`` windows (every window
        delivered, dropped or opening a mailby in it was published in it, waited at its
        start, one a session, or was on a device, one a session a device)."""
        size = n_frames + self.n_ids * (self.slots + 1) + 1
        if self.d_a.size < size:
            self._records(size)

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self.where, self.ids, self.dev_f, self.dev_i, self.waitq, self.taken_s,
            self.taken_a, self.m_f, self.m_i, self.d_a, self.d_s, self.e_s, self.e_t,
            self.opened, self.picked, self.counts, self.check,
        )  # fmt: skip

    def waiting(self) -> list[int]:
        """The sessions with a window waiting."""
        return np.flatnonzero(self.where >= 0).tolist()


class _Records:
    """The measured batches, their windows and the windows dropped, as lists, extended
    from the loop's arrays after each call (whose counts then start again at 0)."""

    def __init__(self) -> None:
        self.measured = Measured()
        self.delivered = Delivered([], [])
        self.expired: list[tuple[int, float]] = []
        self.curve_rows: set[tuple[int, int]] = set()  # device 0's (curve, rows), if tracked
        self.track = False

    def catch_up(self, state: _State) -> None:
        counts = state.counts
        nm, nd, ne = int(counts[N_MEASURED]), int(counts[N_DELIVERED]), int(counts[N_EXPIRED])
        if nm:
            m_f, m_i = state.m_f[: 2 * nm].reshape(nm, 2), state.m_i[: 6 * nm].reshape(nm, 6)
            f, i = m_f.T.copy(), m_i.T.copy()  # the loop writes over its arrays next call
            self.measured.add((f[0], i[0], f[1], i[1], i[2], i[3], i[4]))
            if self.track:
                on_0 = m_i[:, 1] == 0
                rows = (m_i[:, 0] + m_i[:, 4])[on_0]
                pairs = np.unique(m_i[:, 5][on_0] * (1 << 32) + rows)
                self.curve_rows.update((int(u) >> 32, int(u) & 0xFFFFFFFF) for u in pairs)
        if nd:
            self.delivered.arrivals.extend(state.d_a[:nd].tolist())
            self.delivered.sessions.extend(state.d_s[:nd].tolist())
        if ne:
            self.expired.extend(zip(state.e_s[:ne].tolist(), state.e_t[:ne].tolist(), strict=True))
        counts[N_MEASURED] = counts[N_DELIVERED] = counts[N_EXPIRED] = 0


def _state_of(draws: random.Random, mt: np.ndarray, mti: np.ndarray) -> None:
    """Put ``draws``' Mersenne Twister state into ``mt``/``mti``, where the loop replays it."""
    _, internal, _ = draws.getstate()
    mt[:] = internal[:624]
    mti[0] = internal[624]


@functools.cache
def compiled() -> bool:
    """Compile the loop (once a process; numba caches it beside this file, or in the
    user's cache, so a later process loads it): False where numba cannot (not installed,
    nowhere to cache it, as in a frozen build, or its compiler fails here): the loop's
    Python form then plays every run. The loop is compiled by running it once on no frames, so a
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
        run = Run(1, 1, 0.0, 1.0, [])
        run.play(Schedule(np.zeros(0), np.zeros(0, np.int64), []), np.inf, None)
    except Exception:
        globals().update(python)
        return False
    return True


@functools.cache
def python_form() -> Callable[..., int]:
    """The loop as Python: :func:`_loop`'s own code object over a namespace in which the
    rules and the loop's helpers are the uncompiled functions (numba, once it compiled the
    loop, left its dispatchers under those names in this module), and the draws CPython's
    own Mersenne Twister (:func:`_draw`), the one :func:`_random` replays. Called on lists
    (:func:`_on_lists`)."""
    space = dict(globals())
    space.update({name: getattr(rules, name) for name in RULE_NAMES})
    for name, function in _PYTHON.items():
        space[name] = types.FunctionType(function.__code__, space, name)
    space["_random"] = _draw
    return cast("Callable[..., int]", space["_loop"])


def _draw(generator: random.Random, _position: object) -> float:
    """The Python form's :func:`_random`: ``generator``'s next float (a draw in C; the
    compiled loop replays the same generator's state, tested to the bit)."""
    return generator.random()


def _on_lists(
    loop: Callable[..., int], inputs: Sequence[Any], seen: np.ndarray, mt: np.ndarray,
    mti: np.ndarray, host: Sequence[np.ndarray], state: _State,
) -> int:  # fmt: skip
    """:func:`_loop`'s Python form ``loop`` called on lists (an item of a list is a Python
    number, several times quicker to read and to compute with than a numpy scalar): the
    arrays as lists, the draws' states (``mt``, ``mti``) as ``random.Random`` generators,
    the host's quantiles as they are (``np.interp`` reads arrays), and what it changed
    written back (``seen``, the draws' states, the state; the records: what it wrote)."""
    generators = []
    for words, position in zip(mt.tolist(), mti.tolist(), strict=True):
        generators.append(random.Random())
        generators[-1].setstate((3, (*words, *position), None))
    args = [
        generators if a is mt
        else a if any(a is h for h in host) or not isinstance(a, np.ndarray)
        else a.tolist()
        for a in inputs
    ]  # fmt: skip
    records = (state.m_f, state.m_i, state.d_a, state.d_s, state.e_s, state.e_t, state.opened)
    kept = [a for a in state.arrays() if not any(a is r for r in records)]
    lists = {id(a): a.tolist() for a in kept}
    lists.update({id(r): [0] * r.size for r in records})  # written from the counts on
    opened_from = int(state.counts[N_OPENED])
    done = loop(*args, *(lists[id(a)] for a in state.arrays()))
    for array, items in zip(inputs, args, strict=True):
        if array is seen:
            seen[...] = items
    for k, generator in enumerate(generators):
        _, internal, _ = generator.getstate()
        mt[k] = internal[:624]
        mti[k] = internal[624]
    for array in kept:
        array[...] = lists[id(array)]
    counts = state.counts
    wrote = {id(state.m_f): 2 * counts[N_MEASURED], id(state.m_i): 6 * counts[N_MEASURED],
             id(state.d_a): counts[N_DELIVERED], id(state.d_s): counts[N_DELIVERED],
             id(state.e_s): counts[N_EXPIRED], id(state.e_t): counts[N_EXPIRED]}  # fmt: skip
    for r in records[:-1]:
        r[: wrote[id(r)]] = lists[id(r)][: wrote[id(r)]]
    opened_to = int(counts[N_OPENED])
    state.opened[opened_from:opened_to] = lists[id(state.opened)][opened_from:opened_to]
    return int(done)


class Run:
    """One run in the loop, stretch by stretch: its state, and what the driver
    (:func:`~batchscope.sim.devices.play_until`) sets between two stretches: the
    policies, the devices' curves, the router, the worker's knobs, the host.

    ``slots``: every device the run has at any time; ``python``: play the loop's Python
    form (the tests' oracle) instead of its compiled one."""

    def __init__(
        self, slots: int, n_ids: int, t0: float, t_end: float, policies: Sequence[BatchPolicy],
        python: bool = False,
    ) -> None:  # fmt: skip
        self.state = _State(slots, n_ids)
        self.t0, self.t_end = t0, t_end
        self.pol = np.zeros(11, np.int64)
        self.pol[P_SLOTS] = slots
        self.pol[P_SHAPES] = 1
        self.polf = np.zeros(6)
        self.polf[F_CHANGE] = np.inf
        self.mt = np.zeros((3, 624), np.int64)
        self.mti = np.full((3, 1), 624, np.int64)
        empty = np.zeros(0)
        self.host = (empty, empty, empty, empty)  # wake grid, wake ms, late grid, late ms
        self.pins = np.zeros(n_ids, np.int64)
        self.shape_of = np.zeros(n_ids, np.int64)
        self.batch_s = self.ms_table = np.zeros((slots, 2))
        self.seen = np.zeros((slots, 2), np.uint8)
        self.records = _Records()
        self._neighbours: object = None
        self._python = python
        if policies:
            self.set_policies(policies)

    # -- what the driver sets -------------------------------------------------------------

    def set_policies(self, policies: Sequence[BatchPolicy], new: bool = True) -> None:
        """The devices' policies (one each, one kind, the same knobs): their rule and knobs,
        and each one's state (adaptive's cap, round-robin's last id); ``new``: new objects
        (the batches on the devices report to none of them)."""
        policy = policies[0]
        code = code_of(policy)
        assert code is not None, "play_until refused a policy the loop has no rule for"
        cap = policy._max_batch if code >= 2 else 1  # type: ignore[attr-defined]
        self.pol[P_CODE] = code
        self.pol[P_CAP] = -1 if cap is None else int(cap)
        self.polf[F_DELAY] = policy._max_delay_ms / 1000.0 if code >= 4 else 0.0  # type: ignore[attr-defined]
        self.polf[F_SLO] = policy._slo_ms if code == 3 else 0.0  # type: ignore[attr-defined]
        if new:
            self.pol[P_GEN] += 1
        dev_f, dev_i = self.state.dev_f, self.state.dev_i
        for d, p in enumerate(policies):
            dev_f[D_GROWN, d] = p._cap if code == 3 else 1.0  # type: ignore[attr-defined]
            last = getattr(p, "_last", None)
            dev_i[I_CURSOR, d] = -1 if last is None else int(last)

    def leave_policies(self, policies: Sequence[BatchPolicy]) -> None:
        """Each policy's state as the loop left it (adaptive's cap, round-robin's last id)."""
        code = self.pol[P_CODE]
        for d, p in enumerate(policies):
            if code == 3:
                p._cap = float(self.state.dev_f[D_GROWN, d])  # type: ignore[attr-defined]
            if code == 1:
                cursor = int(self.state.dev_i[I_CURSOR, d])
                p._last = None if cursor < 0 else cursor  # type: ignore[attr-defined]

    def set_curves(
        self, curves: Sequence[Sequence[BatchCurve]], slowdowns: Sequence[float]
    ) -> None:
        """Each device's batch curves (one a shape, :meth:`set_shapes`) and slowdown (a
        slow device fault): its batch times, ``curve.ms(rows) * slowdown / 1000.0``."""
        code, cap, n_ids = self.pol[P_CODE], int(self.pol[P_CAP]), self.state.n_ids
        most = 1 if code <= 1 else (cap if code == 5 else n_ids)  # the most rows it runs
        n_shapes = int(self.pol[P_SHAPES])
        size = (self.state.slots * n_shapes, most + 1)
        self.batch_s = np.full(size, np.nan)
        self.ms_table = np.full(size, np.nan)
        if self.seen.shape != size:
            self.seen = np.zeros(size, np.uint8)
        memo: dict[int, list[float]] = {}
        for d, (shaped, slow) in enumerate(zip(curves, slowdowns, strict=True)):
            for k, curve in enumerate(shaped):
                if id(curve) not in memo:
                    memo[id(curve)] = [curve.ms(rows) for rows in range(1, most + 1)]
                self.ms_table[d * n_shapes + k, 1:] = memo[id(curve)]
                self.batch_s[d * n_shapes + k, 1:] = [ms * slow / 1000.0 for ms in memo[id(curve)]]
            self.state.dev_f[D_SLOW, d] = slow

    def set_shapes(self, of_session: Sequence[int], n_shapes: int) -> None:
        """Sessions at ``n_shapes`` resolutions, ``of_session[s]`` session ``s``'s (before
        :meth:`set_curves`, which then takes ``n_shapes`` curves a device)."""
        self.pol[P_SHAPES] = n_shapes
        self.shape_of[: len(of_session)] = of_session

    def shapes_run(self) -> set[tuple[int, int, int]]:
        """(device, shape, rows) of every batch that ran."""
        n_shapes = int(self.pol[P_SHAPES])
        return {(int(r) // n_shapes, int(r) % n_shapes, int(n)) for r, n in np.argwhere(self.seen)}

    def set_devices(self, n_dev: int, curve_k: int) -> None:
        """The devices that take windows now (those past ``n_dev`` left); device 0's
        curve's index (the batches record it)."""
        self.pol[P_DEVICES] = n_dev
        self.pol[P_CURVE] = curve_k

    def set_router(self, router: str, pins: Sequence[int] | None, draws: random.Random) -> None:
        self.pol[P_ROUTER] = ROUTER_CODES[router]
        if pins is not None:
            self.pins[: len(pins)] = pins
        _state_of(draws, self.mt[0], self.mti[0])

    def set_knobs(self, drop_s: float | None, neighbours: Neighbours) -> None:
        """The worker's deadline drop and the device's neighbours (their draws from where
        they are: a new ``neighbours`` starts from its seed)."""
        self.pol[P_DROP] = drop_s is not None
        self.polf[F_DROP] = 0.0 if drop_s is None else drop_s
        self.pol[P_NB] = neighbours.count if neighbours else 0
        self.polf[F_DUTY] = neighbours.duty
        self.polf[F_BUSY_NOW] = 1.0 - (1.0 - neighbours.duty) ** neighbours.count
        if neighbours is not self._neighbours:
            self._neighbours = neighbours
            _state_of(neighbours._rng, self.mt[2], self.mti[2])

    def set_host(self, jitter: HostJitter, draws: random.Random) -> None:
        """A measured host's lateness, replayed from ``draws``."""
        self.pol[P_JITTER] = 1

        def table(quantiles: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
            return np.linspace(0.0, 1.0, len(quantiles)), np.asarray(quantiles, np.float64)

        self.host = (*table(jitter.wake_ms), *table(jitter.device_ms))
        _state_of(draws, self.mt[1], self.mti[1])

    def track_curves(self) -> None:
        """Keep device 0's (curve, rows) of its measured batches (a step may switch it)."""
        self.records.track = True

    # -- the windows waiting, as a step changes them --------------------------------------

    def pop(self, session: int, default: None, /) -> list[Any] | None:
        """A retired session's waiting window dropped (``changes.Pending``)."""
        state = self.state
        d = int(state.where[session])
        if d < 0:
            return default
        row, w = state.waitq[d], int(state.dev_i[I_WAITING, d])
        k = int(np.flatnonzero(row[:w] == session)[0])
        row[k : w - 1] = row[k + 1 : w].copy()
        state.dev_i[I_WAITING, d] = w - 1
        state.where[session] = -1
        return [float(state.ids[0, session]), session, float(state.ids[1, session])]

    def place_again(self, route: Callable[[int, Callable[[int], tuple[int, float]]], int]) -> None:
        """Live's ``Mailboxes.route`` after a change of devices or router: every waiting
        window placed again by ``route(session, load)``, in session order, each counted
        where it lands; each device's windows then in the order their mailboxes opened
        (since, session)."""
        state = self.state
        waiting = state.waiting()
        wn, busy, free_at = state.dev_i[I_WAITING], state.dev_i[I_BUSY], state.dev_f[D_FREE]
        wn[:] = 0
        state.where[:] = -1

        def load(d: int) -> tuple[int, float]:
            return int(wn[d]), float(free_at[d]) if busy[d] else IDLE

        placed: list[list[int]] = [[] for _ in range(state.slots)]
        for s in waiting:
            d = route(s, load)
            state.where[s] = d
            placed[d].append(s)
            wn[d] += 1
        since = state.ids[1]
        for d, mine in enumerate(placed):
            mine.sort(key=lambda s: (since[s], s))
            state.waitq[d, : len(mine)] = mine

    def touch_all(self) -> None:
        """Every device asked at the next turn (after a step: under the new config)."""
        self.state.dev_i[I_TOUCHED] = 1

    # -- playing ---------------------------------------------------------------------------

    def play(self, frames: Schedule, change_at: float, stop: Stop | None) -> int | None:
        """Play ``frames`` (the stretch's schedule) until the run ends (DONE), the change
        due at ``change_at`` (CHANGE: at ``self.now``) or ``stop`` ends it (None; asked
        at the first batch end at or past every :data:`CHECK_EVERY_S` of virtual time from
        the run's start). ``frames.opened`` (the windows that opened a mailbox) and
        ``frames.published`` (the windows published) filled."""
        state, records = self.state, self.records
        times = frames.times_array.astype(np.float64, copy=False)
        sessions = frames.sessions_array.astype(np.int64, copy=False)
        state.fit(times.size)
        state.counts[NEXT_WINDOW] = state.counts[N_OPENED] = 0
        self.polf[F_CHANGE] = change_at
        if stop is not None and state.check[0] == np.inf:
            state.check[0] = self.t0
        inputs = (
            times, sessions, self.t0, self.t_end, self.batch_s, self.ms_table, self.pins,
            self.shape_of, self.seen, self.pol, self.polf, self.mt, self.mti, *self.host,
        )  # fmt: skip
        if self._python:  # on lists
            loop = functools.partial(
                _on_lists, python_form(), inputs, self.seen, self.mt, self.mti, self.host, state
            )
        else:
            loop = functools.partial(globals()["_loop"], *inputs, *state.arrays())
        while (done := int(loop())) == CHECK:
            assert stop is not None
            records.catch_up(state)
            now = float(state.check[1])
            if stop(now, state.waiting(), records.measured, records.delivered):
                return None
            state.check[0] = now + CHECK_EVERY_S
        records.catch_up(state)
        frames.opened.extend(state.opened[: state.counts[N_OPENED]].tolist())
        frames.published = int(state.counts[NEXT_WINDOW])
        return done

    @property
    def now(self) -> float:
        """The instant the loop stopped at (a change's)."""
        return float(self.state.check[1])


#: The loop's own functions as Python, before :func:`compiled` puts numba's in their place.
_PYTHON = {
    "_genrand": _genrand, "_random": _random, "_delay": _delay, "_stretch": _stretch,
    "_loop": _loop,
}  # fmt: skip
