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
  steps made at once (:class:`Clock`); ``benchmarks/sim_speed.py --check``
  compares every record with the per-frame event loop it replaced;
- the **records** are :data:`ITEM_DTYPE` / :data:`BATCH_DTYPE` /
  :data:`OVERWRITE_DTYPE` rows, the report comes from
  :func:`~batchscope.engine.report.build_report` and the segments are
  :class:`~batchscope.engine.segments.Segment` objects, so every figure has the
  definition it has in ``run``.

There is one event loop, :func:`play`, and it plays an experiment: a plain
``simulate(config)`` is an experiment of one step at 0 s (a run with no step after
it, no fault, no ``drop_after_ms`` and no neighbours plays in the compiled loop of
:mod:`batchscope.sim.fast_loop`, to the same records). A step applies at its
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
themselves ``for_s`` later (:class:`SimulatedFaults`): a stall mutes its session on
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

import random
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from batchscope.config import ConfigError, RunConfig
from batchscope.engine.policies import ARRIVAL, SESSION, make_policy
from batchscope.engine.report.body import SessionInfo, build_report
from batchscope.engine.segments import Segment, presence
from batchscope.engine.stats import BATCH_DTYPE, OVERWRITE_DTYPE, item_records
from batchscope.experiment import Experiment, Step
from batchscope.profiles.profile import BatchCurve, DeviceProfile, load_profile
from batchscope.sim.changes import Changes, CurveFor, need_fps
from batchscope.sim.clock import NEVER, Clock
from batchscope.sim.fast_loop import Delivered, Measured, Stop, make_batch, play_fast, plays_fast
from batchscope.sim.host_jitter import HostJitter

DEFAULT_WARMUP_S = 1.0  # the same default as `batchscope run --warmup`

# What happens at one instant is all applied before the policy is asked: first
# the steps (so what happens at a step's instant happens under the new config),
# then the batch that ends, then the frames, then the timers.
_arrival_of, _session_of = itemgetter(ARRIVAL), itemgetter(SESSION)


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
        return self.profile(config).curve(config.precision, config.resolution, config.runtime)


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


def play(
    experiment: Experiment,
    curve_for: CurveFor,
    warmup_s: float = DEFAULT_WARMUP_S,
    jitter: HostJitter | None = None,
) -> Trace:
    """Play ``experiment`` in virtual time: its 0 s is at ``warmup_s``, its steps at their ``at``.

    Raises ConfigError or ProfileError if its first config cannot run (the
    run would not start); a later step that cannot be made is a segment with
    the error (see the module doc). ``jitter``: a measured host's lateness to replay
    (sim/host_jitter.py; None: threads are never late).
    """
    played = play_records(experiment, curve_for, warmup_s, jitter=jitter)
    assert played is not None, "no stop: the run plays to its end"
    return played.trace()


@dataclass
class Played:
    """A played run's records, before they are a :class:`Trace` (made when asked: the
    planner needs only the figures of most of its runs)."""

    measured: Measured
    delivered: Delivered
    expired: list[tuple[int, float]]
    changes: Changes
    clock: Clock
    t0: float
    t_end: float
    n_ids: int

    def trace(self) -> Trace:
        return _trace(
            self.measured,
            self.delivered,
            self.expired,
            self.changes,
            self.clock,
            self.t0,
            self.t_end,
            self.n_ids,
        )


def play_records(
    experiment: Experiment,
    curve_for: CurveFor,
    warmup_s: float = DEFAULT_WARMUP_S,
    stop: Stop | None = None,
    jitter: HostJitter | None = None,
) -> Played | None:
    """:func:`play`'s records, or None when ``stop`` ended the run early.

    A plain run (one config throughout, no fault, no ``drop_after_ms``, no neighbours,
    a built-in policy) plays in the fast loop (:func:`~batchscope.sim.fast_loop.play_fast`,
    where numba compiles it), where ``stop`` is asked every
    :data:`~batchscope.sim.fast_loop.CHECK_EVERY_S`; any other plays in the general loop
    below (the fast loop's records, to the bit), to its end.
    """
    if not warmup_s >= 0:
        raise ConfigError("warmup", warmup_s, "must be 0 or more seconds")
    several = experiment.most("devices")
    if several > 1:  # never played on one device in silence
        raise ConfigError(
            "devices",
            several,
            "this loop plays one device: several play in the devices' loop "
            "(simulate --devices, simulate --experiment) and live (run --experiment)",
        )
    steps = experiment.steps
    opening = steps[0] if steps and steps[0].at == 0 else None
    config = experiment.base.with_changes(**opening.changes) if opening else experiment.base
    need_fps(config)
    curve = curve_for(config)
    policy = make_policy(config)
    t0 = warmup_s
    t_end = warmup_s + experiment.duration
    n_ids = experiment.most("sessions")
    clock = Clock(config, n_ids, t_end, jitter)
    changes = Changes(experiment, opening, config, policy, curve, curve_for, clock, t0, t_end)
    segments = changes.segments
    batch_s = changes.batch_s  # batch size -> s on the current curve, memoised
    drop_s, neighbours = changes.drop_s, changes.neighbours  # the worker's, the device's
    slowdown = changes.slowdown  # every batch that starts takes this × its curve's time
    curve_k = changes.curve_k  # the current curve's index in curves
    expired: list[tuple[int, float]] = []  # (session, t) of each window dropped
    change_at = changes.next_at()

    frames = clock.schedule(0.0, change_at)
    if (
        change_at == NEVER
        and drop_s is None
        and not neighbours
        and slowdown == 1.0
        and jitter is None
        and plays_fast([policy])
    ):
        records = play_fast(frames, [policy], [curve], "pinned", None, None, t0, t_end, n_ids, stop)
        if records is None:
            return None
        segments.close(t_end)
        return Played(*records, expired, changes, clock, t0, t_end, n_ids)
    ft, fs = frames.times, frames.sessions  # the windows published, in event order
    i = 0  # the next of them
    wake = device_late = None
    if jitter is not None:
        draws = random.Random(config.seed + 7_919)
        wake = lambda: jitter.wake_delay(draws.random())  # noqa: E731
        device_late = lambda: jitter.device_delay(draws.random())  # noqa: E731
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
    batch_k = 0  # the running batch's curve's index in curves
    timer: float | None = None  # the pending wait_until, if any
    looks = clock.looks

    measured: Measured = []
    delivered = Delivered([], [])  # their windows, batch after batch
    add_arrivals, add_sessions = delivered.arrivals.extend, delivered.sessions.extend

    while True:
        # busy: nothing before free_at asks the policy, it only changes state;
        # idle: the next instant anything happens
        now = free_at if busy else min(ft[i], change_at, looks[0][0] if looks else NEVER)
        if now > t_end and not busy:
            break
        if wake is not None and not busy:  # an idle worker wakes late on a busy host
            now += wake()
        while change_at <= now:  # changes come first at their instant
            at = change_at
            i = _publish(ft, fs, i, at, pending, opened, before=True)
            changes.apply(at, pending)
            config, policy, curve = changes.config, changes.policy, changes.curve
            curve_k = changes.curve_k
            batch_s, drop_s, neighbours = changes.batch_s, changes.drop_s, changes.neighbours
            slowdown = changes.slowdown
            select = policy.select
            frames.published = i
            change_at = changes.next_at()
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
                measured.append(make_batch((start, n, now, batch_k, reason, cap, pad)))
                add_arrivals(map(_arrival_of, taken))
                add_sessions(map(_session_of, taken))
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
            if device_late is not None:  # a busy host's timer ends the batch late
                free_at += device_late()
        elif (
            (wait_until := decision[1]) is not None
            and now < wait_until
            and (timer is None or wait_until < timer)
        ):
            timer = wait_until
            clock.add_timer(timer)

    frames.published = i
    segments.close(t_end)
    return Played(measured, delivered, expired, changes, clock, t0, t_end, n_ids)


def _trace(
    measured: Measured,
    delivered: Delivered,
    expired: list[tuple[int, float]],
    changes: Changes,
    clock: Clock,
    t0: float,
    t_end: float,
    n_ids: int,
) -> Trace:
    """The played run's records over its measured interval [t0, t_end]."""
    items, batches = measured_records(measured, delivered)
    used = {(b.device, b.size + b.padded) for b in measured}  # (curve, rows run) measured
    peaks = [
        p.peak_mb
        for k, n in used
        for p in changes.curves[k].points
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
        config=changes.config,
        segments=tuple(changes.segments.all()),
        peak_mb=max(peaks) if peaks else None,
        expiries=np.array(expired, OVERWRITE_DTYPE),
    )


def measured_records(
    measured: Measured, delivered: Delivered, on_devices: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """:data:`ITEM_DTYPE` and :data:`BATCH_DTYPE` rows of the measured batches (filled by
    column: a row per item from a list of tuples cost 1 ms a run). ``on_devices``: each
    row's curve index is the device that ran it (sim/devices.py), its ``device``."""
    batches = np.zeros(len(measured), BATCH_DTYPE)
    arrivals, sessions = delivered
    items = item_records(len(arrivals))
    if not measured:
        return items, batches
    starts, sizes, ends, curves, reasons, caps, pads = zip(*measured, strict=True)
    batches["start"] = starts
    if on_devices:
        batches["device"] = curves
    batches["size"] = sizes
    batches["end"] = ends
    batches["reason"] = reasons
    batches["cap"] = caps
    batches["padded"] = pads
    batches["compute_s"] = batches["end"] - batches["start"]
    items["session"] = np.array(sessions, np.int32)
    items["arrival"] = np.array(arrivals, np.float64)
    items["batch"] = np.repeat(batches["size"], batches["size"])
    items["start"] = items["prep_end"] = np.repeat(batches["start"], batches["size"])
    items["compute_end"] = items["result"] = np.repeat(batches["end"], batches["size"])
    if on_devices:
        items["device"] = np.repeat(batches["device"], batches["size"])
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
        present_s={
            sid: presence(trace.segments, sid, trace.start, trace.end)
            for sid in range(config.sessions)
        },
    )


def simulate(
    config: RunConfig,
    profile: DeviceProfile | None = None,
    warmup_s: float = DEFAULT_WARMUP_S,
    jitter: HostJitter | None = None,
) -> dict[str, Any]:
    """The JSON report (``kind: simulate``) of ``config`` on ``profile``'s batch curve.

    ``profile`` defaults to ``load_profile(config.profile)``; a missing curve
    for the config's precision and resolution raises ProfileError. ``jitter``: a
    measured host's lateness replayed (the report then says which, ``host_jitter_model``).
    """
    curves = ProfileCurves(profile, config)
    report = simulated_report(play(one_step(config), curves, warmup_s, jitter), curves, warmup_s)
    if jitter is not None:
        report["host_jitter_model"] = jitter.to_json()
    return report
