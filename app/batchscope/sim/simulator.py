"""A discrete-event simulator of the batching worker over a measured batch curve.

Why it exists: the live worker needs wall-clock time (a 30 s scenario takes
30 s), while the question "which policy, how many sessions, on which GPU"
needs dozens of scenarios. The simulator replays the same scenario in
virtual time and in a fraction of a second, and stays comparable with the
live run because it shares everything except the device:

- the **policies** are the very objects the live worker uses
  (:func:`~batchscope.engine.policies.make_policy`), asked on the same
  occasions (a window arrives, the device frees, a policy's ``wait_until``
  falls due) and fed back the same way (``observe`` after each batch);
- the **sessions** follow ``engine/session.py``: each publishes a window from
  its 3rd frame on, at its own phase inside the frame interval (drawn by
  :func:`~batchscope.engine.session.first_frame_delay`, as the feeder draws it),
  into a latest-only mailbox by the rule of the live worker's
  :class:`~batchscope.engine.session.Mailboxes` (replacing an untaken window
  counts one *overwritten* frame; ``since`` survives overwrites). For speed the
  simulator keeps that rule inline: one ``[arrival, session, since]`` list per
  pending window, updated in place, and the frame times of a stretch between
  steps made at once (:class:`_Clock`); ``benchmarks/sim_speed.py --check``
  compares every record with the per-frame event loop it replaced;
- the **records** are :data:`ITEM_DTYPE` / :data:`BATCH_DTYPE` /
  :data:`OVERWRITE_DTYPE` rows, the report comes from
  :func:`~batchscope.engine.report.build_report` and the segments are
  :class:`~batchscope.engine.segments.Segment` objects, so every figure has the
  definition it has in ``run``.

There is one event loop, :func:`play`, and it plays an experiment: a plain
``simulate(config)`` is an experiment of one step at 0 s. A step applies at its
time as ``Engine.apply(..., step=True)`` applies it live: a new policy kind is a
new policy, a knob change retunes the running one, more sessions join with a
phase drawn from the run's generator (as the feeder draws it), fewer retire
(their pending windows dropped), a new fps re-paces from each session's next
frame, a new resolution (or sources) restarts every session's 3-frame window
(the live roster re-makes the sessions), and a new precision, resolution or
profile switches the batch curve; the batch on the device finishes on the
curve it started on and reports to the policy that chose it. A step the
simulator cannot make (no curve for it, a config that does not validate)
changes nothing and opens a segment with the config as it was and the error.

A step's faults start as the experiment player starts them live
(``Engine.apply(faults=…)``, ``engine/faults.py``), after the step's changes, and end by
themselves ``for_s`` later (:class:`_Faults`): a stall mutes its session on
the clock (it keeps its schedule and sends nothing; its frames stand still), a
burst paces it at ``factor`` × fps from that instant (its latest-only mailbox
overwrites what the device cannot take), a source error mutes it until it
recovers on a fresh phase drawn from the run's generator (its pending window
may still be taken), and a slow device multiplies every batch that starts
meanwhile by ``factor`` (beside the neighbours' stretch; the batch on the device
finishes at its pace). Overlapping faults compose (``ActiveFaults``: two
stalls hold until the later end, two slow devices multiply). One step opens
one segment, listing its changes and the faults it started; each fault's end
opens another, listing the faults still on. A fault's end is a change like a
step (at one instant the ends come first), so each stretch between changes
keeps one bulk schedule.

The device is one batch at a time whose duration is the profile's
``BatchCurve.ms(n)``; a policy with a batch shape (``fixed``) pads a short batch
to it, as the live backends run it, so the batch costs ``ms(shape)`` and records
its padding. Prep and post take no time (the emulated backend's prep is the real
copying of the new frames, ≈ 0.1 ms per window at 512×288, which the simulator
leaves out). Like ``run``, statistics cover the experiment's duration
after a ``warmup_s`` warm-up (played under the first config): the windows and
batches delivered, and the windows overwritten, in that interval.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from batchscope.config import POLICY_PARAMS, ConfigError, RunConfig
from batchscope.engine.faults import ActiveFaults, fault_changes
from batchscope.engine.neighbours import Neighbours
from batchscope.engine.policies import ARRIVAL, SESSION, BatchPolicy, make_policy
from batchscope.engine.report.body import SessionInfo, build_report
from batchscope.engine.segments import Segment, SegmentLog
from batchscope.engine.session import WINDOW, first_frame_delay
from batchscope.engine.stats import BATCH_DTYPE, OVERWRITE_DTYPE, item_records
from batchscope.experiment import Experiment, Fault, Step
from batchscope.profiles.profile import BatchCurve, DeviceProfile, ProfileError, load_profile

DEFAULT_WARMUP_S = 1.0  # the same default as `batchscope run --warmup`

# What happens at one instant is all applied before the policy is asked: first
# the steps (so what happens at a step's instant happens under the new config),
# then the batch that ends, then the frames, then the timers.
_FRAME, _TIMER = 1, 2  # kinds of the events that only give the policy a look
_ENDS, _STEP = 0, 1  # kinds of the changes at one instant, in the order they apply
_NEVER = float("inf")
_arrival_of, _session_of = itemgetter(ARRIVAL), itemgetter(SESSION)

#: The batch curve a config runs on; raises ProfileError when there is none.
CurveFor = Callable[[RunConfig], BatchCurve]


@dataclass(frozen=True)
class Trace:
    """What a simulated run recorded over its measured interval (times in s, virtual clock)."""

    items: np.ndarray  # ITEM_DTYPE
    batches: np.ndarray  # BATCH_DTYPE
    overwrites: np.ndarray  # OVERWRITE_DTYPE
    start: float  # s, end of the warm-up: the experiment's 0 s
    end: float  # s, end of the run
    sessions: int  # session ids used: 0 .. sessions - 1
    config: RunConfig  # the config at the end
    segments: tuple[Segment, ...]
    peak_mb: float | None  # the profile's peak memory of the largest batch that ran
    expiries: np.ndarray = field(  # OVERWRITE_DTYPE: windows dropped by drop_after_ms
        default_factory=lambda: np.zeros(0, OVERWRITE_DTYPE)
    )

    @property
    def expired(self) -> dict[int, int]:
        """session -> windows discarded for waiting past ``drop_after_ms``."""
        counts = np.bincount(self.expiries["session"], minlength=self.sessions)
        return {sid: int(counts[sid]) for sid in range(self.sessions)}

    @property
    def overwritten(self) -> dict[int, int]:
        """session -> windows replaced while untaken."""
        counts = np.bincount(self.overwrites["session"], minlength=self.sessions)
        return {sid: int(counts[sid]) for sid in range(self.sessions)}


class ProfileCurves:
    """The batch curve of each config (a :data:`CurveFor`), profiles loaded once.

    ``profile``, if given, stands for the profile ``base`` names; a config that
    names another profile gets that one from :func:`load_profile`.
    """

    def __init__(self, profile: DeviceProfile | None, base: RunConfig) -> None:
        self._profiles: dict[str | None, DeviceProfile] = {}
        if profile is not None:
            self._profiles[base.profile] = profile

    def profile(self, config: RunConfig) -> DeviceProfile:
        if config.profile not in self._profiles:
            self._profiles[config.profile] = load_profile(config.profile or "")
        return self._profiles[config.profile]

    def __call__(self, config: RunConfig) -> BatchCurve:
        return self.profile(config).curve(config.precision, config.resolution)


@dataclass
class _Schedule:
    """The windows the sessions publish from one instant to the next change, in event order.

    ``times``/``sessions`` are lists (fast to index one by one) ending in a
    sentinel; ``times_array``/``sessions_array`` the same as arrays, for the
    overwrite records. ``opened`` collects the indices of the windows published
    into an empty mailbox and ``published`` counts those published before the
    next schedule took over: the others replaced an untaken window (recording the
    openings, about one per batch, is cheaper than recording every overwrite).
    """

    times: list[float]
    sessions: list[int]
    times_array: np.ndarray
    sessions_array: np.ndarray
    opened: list[int]
    published: int = 0


class _Clock:
    """Every session's frame times, and the events that only give the policy a look.

    Session ``sid``'s k-th frame after its anchor is due at ``anchor[sid] + k *
    period`` (the live feeder's pacing; the anchor moves when the pace changes),
    and publishes a window from the 3rd frame of its run on (``run_start[sid]``:
    the k that opened the run; a new resolution or sources open a new run, as
    the live roster re-makes its sessions). Frames are computed in bulk for the
    stretch up to the next change (:meth:`schedule`) instead of one heap event
    per frame; the times are the same floats the per-frame loop computed.

    Faults change a session's pace here, by the live feeder's and roster's rules
    (``engine/faults.py``): ``scale`` is :meth:`Feeder.scale`'s factor (K > 1: a
    burst at K × fps; 0: a stall, which keeps the session's schedule and sends
    nothing), ``failed`` the sessions whose source failed (no schedule at all
    until :meth:`recover` gives a fresh phase). A *muted* session (stalled or
    failed) is left out of the schedule, and its frames do not advance: its
    window keeps the frames it held (``held``) and goes on from there.
    """

    def __init__(self, config: RunConfig, n_ids: int, t_end: float) -> None:
        fps = config.fps
        assert fps is not None, "play() checks the frame rate first (_need_fps)"
        self.rng = random.Random(config.seed)
        self.fps = fps
        self.period = 1.0 / fps
        self.sessions = config.sessions
        self.t_end = t_end
        self.anchor = [0.0] * n_ids
        self.run_start = [0] * n_ids
        for sid in range(config.sessions):
            self.anchor[sid] = first_frame_delay(self.rng, fps)
        self.scale: dict[int, float] = {}  # session -> pace factor while a stall or burst lasts
        self.failed: set[int] = set()  # sessions whose source failed (a source_error fault)
        self.held: dict[int, int] = {}  # muted session -> frames in its window when muted
        # (s, kind): timers (superseded ones too) and a run's first two frames
        self.looks: list[tuple[float, int]] = []
        self.schedules: list[_Schedule] = []

    def _period(self, sid: int) -> float:
        """s between ``sid``'s frames: a stalled session keeps the normal pace (as live)."""
        return self.period / (self.scale.get(sid, 1.0) or 1.0)

    def muted(self, sid: int) -> bool:
        return sid in self.failed or self.scale.get(sid) == 0.0

    def _due_before(self, sid: int, t: float) -> int:
        """How many of ``sid``'s frames (k = 0, 1, …) are due before ``t``."""
        anchor, period = self.anchor[sid], self._period(sid)
        k = max(0, math.ceil((t - anchor) / period))
        while k > 0 and anchor + (k - 1) * period >= t:
            k -= 1
        while anchor + k * period < t:
            k += 1
        return k

    def schedule(self, now: float, until: float) -> _Schedule:
        """The windows published from ``now`` (inclusive) to the next change; looks re-made.

        ``until`` is that change's instant: every change makes a new schedule there,
        so frames from then on come from the next one (and none after the run's end).
        """
        until = min(until, self.t_end)
        ids = [sid for sid in range(self.sessions) if not self.muted(sid)]
        periods = np.array([self._period(sid) for sid in ids])[:, None]
        first = np.array([self._due_before(sid, now) for sid in ids], dtype=np.int64)
        span = int((until - now) / periods.min()) + 3 if ids else 0
        ks = first[:, None] + np.arange(span, dtype=np.int64)[None, :]
        times = np.array([self.anchor[sid] for sid in ids])[:, None] + ks * periods
        keep = times <= until
        sids = np.broadcast_to(np.array(ids, dtype=np.int64)[:, None], ks.shape)[keep]
        times, ks = times[keep], ks[keep]
        order = np.lexsort((sids, times))
        times, sids, ks = times[order], sids[order], ks[order]
        publishes = ks >= np.array(self.run_start, dtype=np.int64)[sids] + (WINDOW - 1)
        self.looks[:] = [look for look in self.looks if look[1] == _TIMER or look[0] < now]
        self.looks.extend((t, _FRAME) for t in times[~publishes].tolist())
        heapq.heapify(self.looks)
        times, sids = times[publishes], sids[publishes]
        frames = _Schedule([*times.tolist(), _NEVER], sids.tolist(), times, sids, [])
        self.schedules.append(frames)
        return frames

    def _repace(self, sid: int, now: float, at_once: bool = False) -> None:
        """Re-anchor ``sid`` at its next frame (``at_once``: at ``now``), before a new pace.

        The live feeder's rule for a new fps or scale: the frame already due keeps its
        time and the next ones follow at the new period; a burst's first frame is now.
        """
        k = self._due_before(sid, now)
        self.anchor[sid] = now if at_once else self.anchor[sid] + k * self._period(sid)
        self.run_start[sid] -= k

    def _muting(self, sid: int, was_muted: bool, now: float) -> None:
        """Keep a session's window across a mute: it holds its frames, then goes on."""
        if self.muted(sid) and not was_muted:
            self.held[sid] = self._due_before(sid, now) - self.run_start[sid]
        elif was_muted and not self.muted(sid):
            self.run_start[sid] = self._due_before(sid, now) - self.held.pop(sid)

    def change(self, old: RunConfig, new: RunConfig, now: float, restart: bool) -> None:
        """Sessions after a step at ``now``: re-paced, runs restarted, joined (in that order)."""
        fps = new.fps
        assert fps is not None, "a step's config has its frame rate checked (_need_fps)"
        kept = range(min(new.sessions, old.sessions))
        if fps != old.fps:  # kept sessions keep their next frame, then re-pace
            for sid in kept:
                self._repace(sid, now)
            self.fps, self.period = fps, 1.0 / fps
        if restart:
            for sid in kept:
                self.run_start[sid] = self._due_before(sid, now)
                if self.muted(sid):
                    self.held[sid] = 0
        for sid in range(old.sessions, new.sessions):
            self.anchor[sid] = now + first_frame_delay(self.rng, fps)
            self.run_start[sid] = 0
            self.failed.discard(sid)  # a new session: its source plays (a stall still holds)
            if self.muted(sid):
                self.held[sid] = 0
            else:
                self.held.pop(sid, None)
        self.sessions = new.sessions

    def set_scale(self, sid: int, factor: float, now: float) -> None:
        """``Feeder.scale``: pace ``sid`` at ``factor`` × fps (0 stalls it, 1 is normal)."""
        was_muted = self.muted(sid)
        if sid < self.sessions:
            self._repace(sid, now, at_once=factor > 1.0)
        if factor == 1.0:
            self.scale.pop(sid, None)
        else:
            self.scale[sid] = factor
        self._muting(sid, was_muted, now)

    def fail(self, sid: int, now: float) -> None:
        """The session's source failed: it publishes nothing (its pending window stays)."""
        was_muted = self.muted(sid)
        self.failed.add(sid)
        self._muting(sid, was_muted, now)

    def recover(self, sid: int, now: float) -> None:
        """``Roster.recover``: a failed session plays again from a fresh phase drawn now."""
        if sid not in self.failed or sid >= self.sessions:
            return
        self.anchor[sid] = now + first_frame_delay(self.rng, self.fps)
        self.failed.discard(sid)
        self._muting(sid, True, now)

    def look(self, now: float, timer: float | None) -> float | None:
        """Pass the looks due by ``now``; the timer, or None if it fell due."""
        looks = self.looks
        while looks and looks[0][0] <= now:
            at, kind = heapq.heappop(looks)
            if kind == _TIMER and at == timer:
                timer = None
        return timer

    def add_timer(self, at: float) -> None:
        heapq.heappush(self.looks, (at, _TIMER))

    def overwrites(self) -> np.ndarray:
        """:data:`OVERWRITE_DTYPE` rows of every window replaced while untaken, in time order."""
        index = []
        for f in self.schedules:
            over = np.ones(f.published, dtype=bool)
            over[f.opened] = False
            index.append(np.flatnonzero(over))
        out = np.empty(sum(len(x) for x in index), OVERWRITE_DTYPE)
        out["session"] = np.concatenate(
            [f.sessions_array[x] for f, x in zip(self.schedules, index, strict=True)]
        )
        out["t"] = np.concatenate(
            [f.times_array[x] for f, x in zip(self.schedules, index, strict=True)]
        )
        return out


class _Faults:
    """The faults playing, by ``Engine.inject`` and ``engine/faults.py``: what each does.

    A stall or a burst scales its session's pace on the clock (the live feeder's
    ``scale``), a source error fails and later recovers its session (the
    roster's rules, on the clock too), and a slow device multiplies every batch
    that starts meanwhile (``slowdown``, as the live worker sets it between two
    batches: the batch on the device finishes at the pace it started with).
    Overlapping faults compose by the live rule (:class:`ActiveFaults`): each
    end undoes only its own share. A fault's end opens a segment; its start is
    part of its step's segment (the caller opens that one).
    """

    def __init__(self, clock: _Clock, segments: SegmentLog) -> None:
        self._clock = clock
        self._segments = segments
        self.active = ActiveFaults()
        self.slowdown = 1.0

    def start(self, fault: Fault, now: float, config: RunConfig) -> int | None:
        """Start ``fault`` at ``now``: its token for :meth:`end`, or None if refused.

        Refused (nothing done), as live, when its session does not exist in ``config``.
        """
        if fault.session is not None and fault.session >= config.sessions:
            return None
        was_failed = self.active.failed(fault.session)
        token = self.active.add(fault)
        self._act(fault, now, was_failed)
        return token

    def end(self, fault: Fault, token: int, now: float, config: RunConfig) -> None:
        """``fault`` ends by itself at ``now``: the run back to normal (or to the faults
        still on), in a segment of its own."""
        was_failed = self.active.failed(fault.session)
        self.active.remove(token)
        self._act(fault, now, was_failed)
        self._segments.open(now, config, {}, f"after: {fault.describe()}", faults=self.on())

    def on(self) -> list[dict[str, Any]]:
        """The faults in effect, as a segment lists them."""
        return [f.as_json() for f in self.active.faults()]

    def _act(self, fault: Fault, now: float, was_failed: bool) -> None:
        """Set the effect of every fault on, after ``fault`` started or ended."""
        sid, clock, active = fault.session, self._clock, self.active
        if fault.kind in ("stall", "burst"):
            assert sid is not None, f"a {fault.kind} fault names its session (FAULT_FIELDS)"
            clock.set_scale(sid, active.pace(sid), now)
        elif fault.kind == "slow_device":
            self.slowdown = active.slowdown()
        elif fault.kind == "source_error":
            assert sid is not None, "a source_error fault names its session (FAULT_FIELDS)"
            failed = active.failed(sid)
            if failed and not was_failed:
                clock.fail(sid, now)
            elif was_failed and not failed:
                clock.recover(sid, now)
        else:
            raise ValueError(f"unknown fault {fault.kind!r}")


def one_step(config: RunConfig) -> Experiment:
    """``config`` as an experiment: one step at 0 s that changes nothing."""
    return Experiment(
        name="",
        caption="",
        duration=config.duration_s,
        base=config,
        steps=(Step(0.0, {}),),
        configs=(config,),
    )


def _need_fps(config: RunConfig) -> None:
    if config.fps is None:
        raise ConfigError("fps", None, "the simulator needs a frame rate (it has no sources)")


def play(experiment: Experiment, curve_for: CurveFor, warmup_s: float = DEFAULT_WARMUP_S) -> Trace:
    """Play ``experiment`` in virtual time: its 0 s is at ``warmup_s``, its steps at their ``at``.

    Raises ConfigError or ProfileError if its first config cannot run (the
    run would not start); a later step that cannot be made is a segment with
    the error (see the module doc).
    """
    if not warmup_s >= 0:
        raise ConfigError("warmup", warmup_s, "must be 0 or more seconds")
    steps = experiment.steps
    opening = steps[0] if steps and steps[0].at == 0 else None
    config = experiment.base.with_changes(**opening.changes) if opening else experiment.base
    _need_fps(config)
    curve = curve_for(config)
    policy = make_policy(config)
    t0 = warmup_s
    t_end = warmup_s + experiment.duration
    segments = SegmentLog()
    first_changes = _wanted(experiment.base, config)
    first_caption = (opening.caption if opening else "") or experiment.caption
    segments.open(t0, config, first_changes, first_caption)
    curves = [curve]  # every curve used; in-flight batches name theirs by index
    batch_s: dict[int, float] = {}  # batch size -> s on the current curve, memoised
    drop_s, neighbours = _worker_knobs(config)  # as the live worker and emulated device
    expired: list[tuple[int, float]] = []  # (session, t) of each window dropped
    n_ids = max(c.sessions for c in (experiment.base, *experiment.configs))
    clock = _Clock(config, n_ids, t_end)
    faults = _Faults(clock, segments)
    slowdown = faults.slowdown  # every batch that starts takes this × its curve's time
    # What changes the run, in time order: (s, _ENDS or _STEP, order, the fault or step).
    # Each step at its time (the opening one only to start its faults), each fault's
    # end once it started; at one instant the faults that end go first, then the steps.
    agenda: list[tuple[float, int, int, Any]] = [
        (t0 + s.at, _STEP, s.index, s)
        for s in steps
        if (s is not opening or s.faults) and t0 + s.at <= t_end
    ]
    heapq.heapify(agenda)
    seq = itertools.count(len(steps))  # the order of the fault ends in the agenda
    change_at = agenda[0][0] if agenda else _NEVER

    frames = clock.schedule(0.0, change_at)
    ft, fs = frames.times, frames.sessions  # the windows published, in event order
    i = 0  # the next of them
    opened = frames.opened  # indices into ft of windows published into an empty mailbox
    # The latest-only mailboxes, by the rule of engine/session.py's Mailboxes: each
    # session's pending window as an [arrival, session, since] list (the layout of
    # policies.Waiting) whose arrival a newer window overwrites in place.
    pending: dict[int, list[Any]] = {}
    waiting = pending.values()  # what the policy sees: a live view
    select = policy.select
    busy = False  # a batch on the device: started at start, taken by chooser, ends at free_at
    start = free_at = 0.0
    reason = cap = pad = 0  # why the batch on the device left, the policy's cap, its padding
    taken: list[list[Any]] = []
    chooser = policy
    curve_k = batch_k = 0  # the current curve's index in curves, and the running batch's
    timer: float | None = None  # the pending wait_until, if any
    looks = clock.looks

    # (start, size, end, curve index, why it left, the policy's cap then, padded rows)
    measured: list[tuple[float, int, float, int, int, int, int]] = []
    delivered: list[list[Any]] = []  # their windows, batch after batch

    while True:
        # busy: nothing before free_at asks the policy, it only changes state;
        # idle: the next instant anything happens
        now = free_at if busy else min(ft[i], change_at, looks[0][0] if looks else _NEVER)
        if now > t_end and not busy:
            break
        while change_at <= now:  # changes come first at their instant
            at = change_at
            i = _publish(ft, fs, i, at, pending, opened, before=True)
            while agenda and agenda[0][0] == at:
                _, kind, _, what = heapq.heappop(agenda)
                if kind == _ENDS:
                    fault, token = what
                    faults.end(fault, token, at, config)
                    continue
                opens = None
                if what is not opening:
                    config, policy, curve, opens = _step(
                        what, at, config, policy, curve, curve_for, clock, pending
                    )
                started = []
                for fault in what.faults:  # as the player starts them: after the change
                    token = faults.start(fault, at, config)
                    if token is None:
                        continue
                    started.append(fault)
                    if at + fault.for_s <= t_end:
                        heapq.heappush(agenda, (at + fault.for_s, _ENDS, next(seq), (fault, token)))
                # one step, one segment: the change and the faults it started
                if what is opening:
                    if started:
                        both = {**first_changes, "fault": fault_changes(started)}
                        segments.relabel(0, both, first_caption, faults.on())
                elif started or opens:
                    cfg, wanted, error = opens or (config, {}, None)
                    if started:
                        wanted = {**wanted, "fault": fault_changes(started)}
                    caption = what.caption or "; ".join(f.describe() for f in started)
                    segments.open(at, cfg, wanted, caption, error, faults.on())
                if curve is not curves[-1]:
                    curves.append(curve)
                    curve_k, batch_s = len(curves) - 1, {}
                if (drop_s, neighbours.count, neighbours.duty) != _knob_key(config):
                    drop_s, neighbours = _worker_knobs(config)
            if faults.slowdown != slowdown:
                slowdown, batch_s = faults.slowdown, {}
            select = policy.select
            frames.published = i
            change_at = agenda[0][0] if agenda else _NEVER
            frames = clock.schedule(at, change_at)
            ft, fs, i, opened = frames.times, frames.sessions, 0, frames.opened
        # _publish inlined: the hot path (every window that arrives during a batch)
        t = ft[i]
        while t <= now:
            s = fs[i]
            r = pending.get(s)
            if r is None:
                pending[s] = [t, s, t]
                opened.append(i)
            else:
                r[0] = t
            i += 1
            t = ft[i]
        if now > t_end:  # the batch on the device ends after the run
            break
        if looks and looks[0][0] <= now:
            timer = clock.look(now, timer)
        if busy:
            busy = False
            n = len(taken)
            if now >= t0:  # delivered in the measured interval
                measured.append((start, n, now, batch_k, reason, cap, pad))
                delivered.extend(taken)
            if chooser.learns:
                chooser.observe(n, (now - min(map(_arrival_of, taken))) * 1000.0)
        if drop_s is not None and pending:  # Mailboxes.expire's rule
            for s in [s for s, r in pending.items() if now - r[0] > drop_s]:
                del pending[s]
                if now >= t0:
                    expired.append((s, now))
        if not pending:
            continue
        decision = select(waiting, now)
        taken = list(map(pending.pop, decision[0]))  # a policy takes only waiting sessions
        if taken:
            n = len(taken)
            shape = policy.shape  # the device runs that many rows: the rest is padding
            rows = n if shape is None or shape <= n else shape
            pad = rows - n
            duration = batch_s.get(rows)
            if neighbours:  # each batch draws its own stretch from the time slices
                duration = neighbours.stretch(curve.ms(rows)) * slowdown / 1000.0
            elif duration is None:
                duration = batch_s[rows] = curve.ms(rows) * slowdown / 1000.0
            busy, start, chooser, batch_k = True, now, policy, curve_k
            reason, cap = decision[2], policy.cap or 0
            free_at = now + duration
        elif (
            (wait_until := decision[1]) is not None
            and now < wait_until
            and (timer is None or wait_until < timer)
        ):
            timer = wait_until
            clock.add_timer(timer)

    frames.published = i
    segments.close(t_end)
    items, batches = _records(measured, delivered)
    used = {
        (k, n + pad) for _, n, _, k, _, _, pad in measured
    }  # (curve index, rows the device ran) in the interval
    peaks = [
        p.peak_mb
        for k, n in used
        for p in curves[k].points
        if p.batch == n and p.peak_mb is not None
    ]
    overwrites = clock.overwrites()
    return Trace(
        items=items,
        batches=batches,
        overwrites=overwrites[overwrites["t"] >= t0],
        start=t0,
        end=t_end,
        sessions=n_ids,
        config=config,
        segments=tuple(segments.all()),
        peak_mb=max(peaks) if peaks else None,
        expiries=np.array(expired, OVERWRITE_DTYPE),
    )


def _worker_knobs(config: RunConfig) -> tuple[float | None, Neighbours]:
    """The knobs the live worker and the emulated device apply to every policy."""
    drop = None if config.drop_after_ms is None else config.drop_after_ms / 1000.0
    return drop, Neighbours(config.neighbours, config.neighbour_duty, config.seed)


def _knob_key(config: RunConfig) -> tuple[float | None, int, float]:
    drop = None if config.drop_after_ms is None else config.drop_after_ms / 1000.0
    return drop, config.neighbours, config.neighbour_duty


def _records(
    measured: list[tuple[float, int, float, int, int, int, int]], delivered: list[list[Any]]
) -> tuple[np.ndarray, np.ndarray]:
    """:data:`ITEM_DTYPE` and :data:`BATCH_DTYPE` rows of the measured batches (filled by
    column: a row per item from a list of tuples cost 1 ms a run)."""
    batches = np.zeros(len(measured), BATCH_DTYPE)
    items = item_records(len(delivered))
    if not measured:
        return items, batches
    starts, sizes, ends, _, reasons, caps, pads = zip(*measured, strict=True)
    batches["start"] = starts
    batches["size"] = sizes
    batches["end"] = ends
    batches["reason"] = reasons
    batches["cap"] = caps
    batches["padded"] = pads
    batches["compute_s"] = batches["end"] - batches["start"]
    items["session"] = np.fromiter(map(_session_of, delivered), np.int32, len(delivered))
    items["arrival"] = np.fromiter(map(_arrival_of, delivered), np.float64, len(delivered))
    items["batch"] = np.repeat(batches["size"], batches["size"])
    items["start"] = items["prep_end"] = np.repeat(batches["start"], batches["size"])
    items["compute_end"] = items["result"] = np.repeat(batches["end"], batches["size"])
    return items, batches


def _publish(
    ft: list[float],
    fs: list[int],
    i: int,
    now: float,
    pending: dict[int, list[Any]],
    opened: list[int],
    before: bool,
) -> int:
    """Publish the windows from ``ft[i]`` on that arrive by ``now`` (``before``: strictly);
    returns the index of the first one left."""
    t = ft[i]
    while t < now or (t == now and not before):
        s = fs[i]
        r = pending.get(s)
        if r is None:
            pending[s] = [t, s, t]
            opened.append(i)
        else:
            r[0] = t
        i += 1
        t = ft[i]
    return i


def _step(
    step: Step,
    now: float,
    config: RunConfig,
    policy: BatchPolicy,
    curve: BatchCurve,
    curve_for: CurveFor,
    clock: _Clock,
    pending: dict[int, list[Any]],
) -> tuple[RunConfig, BatchPolicy, BatchCurve, tuple[RunConfig, dict[str, Any], str | None] | None]:
    """Apply ``step`` at ``now`` as ``Engine.apply(step=True)`` would: the config, policy
    and curve after it (unchanged if it cannot be made), and the segment it opens as
    (config, changes, error), or None (nothing changed, no caption)."""
    if not step.changes:
        return config, policy, curve, ((config, {}, None) if step.caption else None)
    try:
        new, new_curve, new_policy = _prepare(config, step, curve_for, policy)
    except (ConfigError, ProfileError) as exc:
        return config, policy, curve, (config, _tried(config, step), str(exc))
    changes = config.diff(new)
    opens = (new, _wanted(config, new), None) if changes or step.caption else None
    for gone in range(new.sessions, config.sessions):  # retired: pending window dropped
        pending.pop(gone, None)
    clock.change(config, new, now, bool({"resolution", "sources"} & changes.keys()))
    return new, new_policy, new_curve, opens


def _prepare(
    config: RunConfig, step: Step, curve_for: CurveFor, policy: BatchPolicy
) -> tuple[RunConfig, BatchCurve, BatchPolicy]:
    """The config, curve and policy after ``step``; raises (changing nothing) if it cannot be.

    As in ``Engine.apply``: everything that can fail is built first; a knob
    change retunes the running policy last, all or nothing.
    """
    new = config.with_changes(**step.changes)
    _need_fps(new)
    curve = curve_for(new)
    if new.policy != config.policy:
        return new, curve, make_policy(new)
    if set(POLICY_PARAMS[new.policy]) & config.diff(new).keys():
        policy.retune(new)
    return new, curve, policy


def _wanted(old: RunConfig, new: RunConfig) -> dict[str, Any]:
    """field -> new value, for the fields that differ (a segment's ``changes``)."""
    return {k: b for k, (_, b) in old.diff(new).items()}


def _tried(config: RunConfig, step: Step) -> dict[str, Any]:
    """What a failed step asked for: the fields it would have changed."""
    return {k: v for k, v in step.changes.items() if getattr(config, k) != v}


def simulated_report(
    trace: Trace, curves: ProfileCurves, warmup_s: float, kind: str = "simulate"
) -> dict[str, Any]:
    """The JSON report over the whole of ``trace``, for the config it ended with."""
    config = trace.config
    profile = curves.profile(config)
    memory: dict[str, float] = {}
    if profile.memory_total_mb:
        memory["device_total_mb"] = float(profile.memory_total_mb)
    if trace.peak_mb is not None:
        memory["profile_peak_mb"] = float(trace.peak_mb)
    return build_report(
        kind,
        config.with_changes(extra={**config.extra, "warmup_s": warmup_s}),
        [SessionInfo(sid, "simulated") for sid in range(config.sessions)],
        trace.items,
        trace.batches,
        trace.overwritten,
        trace.end - trace.start,
        memory,
        extra={
            "device_label": f"simulated: {profile.name} ({profile.device})",
            "weights": "simulated device: no model runs",
        },
        expired=trace.expired,
    )


def simulate(
    config: RunConfig, profile: DeviceProfile | None = None, warmup_s: float = DEFAULT_WARMUP_S
) -> dict[str, Any]:
    """The JSON report (``kind: simulate``) of ``config`` on ``profile``'s batch curve.

    ``profile`` defaults to ``load_profile(config.profile)``; a missing curve
    for the config's precision and resolution raises ProfileError.
    """
    curves = ProfileCurves(profile, config)
    return simulated_report(play(one_step(config), curves, warmup_s), curves, warmup_s)
