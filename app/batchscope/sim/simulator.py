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
  into the live worker's :class:`~batchscope.engine.session.Mailboxes` (frameless
  windows on the virtual clock), where replacing an untaken window counts one
  *overwritten* frame;
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

The device is one batch at a time whose duration is the profile's
``BatchCurve.ms(n)``; prep and post take no time (the emulated backend's prep
is the real copying of the new frames, ≈ 0.1 ms per window at 512×288, which the
simulator leaves out). Like ``run``, statistics cover the experiment's duration
after a ``warmup_s`` warm-up (played under the first config): the windows and
batches delivered, and the windows overwritten, in that interval.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchscope.config import POLICY_PARAMS, ConfigError, RunConfig
from batchscope.engine.policies import BatchPolicy, make_policy
from batchscope.engine.report import SessionInfo, build_report
from batchscope.engine.segments import Segment, SegmentLog
from batchscope.engine.session import WINDOW, Mailboxes, Window, first_frame_delay
from batchscope.engine.stats import BATCH_DTYPE, ITEM_DTYPE, OVERWRITE_DTYPE
from batchscope.experiment import Experiment, Step
from batchscope.profiles.profile import BatchCurve, DeviceProfile, ProfileError, load_profile

DEFAULT_WARMUP_S = 1.0  # the same default as `batchscope run --warmup`

# Event kinds. Events at the same instant are all applied before the policy is
# asked, so their order only matters for determinism; a step comes first, so
# what happens at its instant happens under the new config.
_STEP, _DEVICE_FREE, _FRAME, _TIMER = -1, 0, 1, 2

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


def session_phases(sessions: int, fps: float, seed: int) -> list[float]:
    """First-frame time of each session in s, inside one frame interval.

    Drawn as the live feeder draws them (:func:`first_frame_delay`, one draw per
    session in id order from ``random.Random(seed)``).
    """
    rng = random.Random(seed)
    return [first_frame_delay(rng, fps) for _ in range(sessions)]


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
    period = 1.0 / config.fps
    t0 = warmup_s
    t_end = warmup_s + experiment.duration
    segments = SegmentLog()
    segments.open(
        t0,
        config,
        _wanted(experiment.base, config),
        (opening.caption if opening else "") or experiment.caption,
    )
    curves = [curve]  # every curve used; in-flight batches name theirs by index
    curve_k = 0
    batch_s: dict[int, float] = {}  # batch size -> s on the current curve, memoised
    used: set[tuple[int, int]] = set()  # (curve index, batch size) run in the interval

    # Session schedule: session sid's k-th frame after its anchor is due at
    # anchor[sid] + k * period (the anchor moves when the fps changes).
    rng = random.Random(config.seed)
    n_ids = max(c.sessions for c in (experiment.base, *experiment.configs))
    anchor = [0.0] * n_ids
    ticks = [0] * n_ids  # frames since the anchor
    frames = [0] * n_ids  # frames in the session's current window run (3 make a window)
    heap: list[tuple[float, int, int]] = []
    for sid in range(config.sessions):
        anchor[sid] = first_frame_delay(rng, config.fps)
        heap.append((anchor[sid], _FRAME, sid))
    heap += [(t0 + s.at, _STEP, s.index) for s in steps if s is not opening]
    heapq.heapify(heap)

    overwritten_sid: list[int] = []  # session and time (s) of each replaced window
    overwritten_t: list[float] = []
    mailboxes = Mailboxes()
    publish = mailboxes.publish
    # (start s, windows, the policy that chose them, curve index)
    in_flight: tuple[float, list[Window], BatchPolicy, int] | None = None
    timer: float | None = None  # the pending wait_until, if any
    items: list[tuple] = []
    batches: list[tuple] = []

    while heap:
        now, kind, sid = heapq.heappop(heap)
        if now > t_end:
            break
        if kind == _FRAME:
            ticks[sid] += 1
            frames[sid] += 1
            heapq.heappush(heap, (anchor[sid] + ticks[sid] * period, _FRAME, sid))
            # a session needs 3 frames for its first window; publish says if it replaced one
            if frames[sid] >= WINDOW and publish(
                Window(sid, frames[sid], frames[sid] - 1, (), now)
            ):
                overwritten_sid.append(sid)
                overwritten_t.append(now)
        elif kind == _DEVICE_FREE:
            start, taken, chooser, k = in_flight
            in_flight = None
            n = len(taken)
            if now >= t0:  # delivered in the measured interval
                compute_s = now - start
                batches.append((start, n, 0.0, compute_s, 0.0, now))
                items.extend((w.session, n, w.arrival, start, start, now, now) for w in taken)
                used.add((k, n))
            chooser.observe(n, (now - min(w.arrival for w in taken)) * 1000.0)
        elif kind == _STEP:
            step = steps[sid]
            try:
                new, new_curve, new_policy = _prepare(config, step, curve_for, policy)
            except (ConfigError, ProfileError) as exc:
                segments.open(now, config, _tried(config, step), step.caption, str(exc))
            else:
                changes = config.diff(new)
                if changes or step.caption:
                    segments.open(now, new, _wanted(config, new), step.caption)
                if new.sessions < config.sessions:
                    retired = set(range(new.sessions, config.sessions))
                    heap = [e for e in heap if e[1] != _FRAME or e[2] not in retired]
                    heapq.heapify(heap)
                    for gone in sorted(retired):
                        mailboxes.drop(gone)
                if new.fps != config.fps:  # kept sessions keep their next frame, then re-pace
                    for kept in range(min(new.sessions, config.sessions)):
                        anchor[kept] = anchor[kept] + ticks[kept] * period
                        ticks[kept] = 0
                    period = 1.0 / new.fps
                if {"resolution", "sources"} & changes.keys():
                    for kept in range(min(new.sessions, config.sessions)):
                        frames[kept] = 0
                for joined in range(config.sessions, new.sessions):
                    anchor[joined] = now + first_frame_delay(rng, new.fps)
                    ticks[joined] = frames[joined] = 0
                    heapq.heappush(heap, (anchor[joined], _FRAME, joined))
                if new_curve is not curve:
                    curve, batch_s = new_curve, {}
                    curves.append(curve)
                    curve_k = len(curves) - 1
                config, policy = new, new_policy
        elif now == timer:
            timer = None
        if in_flight is not None or (heap and heap[0][0] == now):
            continue
        waiting = mailboxes.waiting()
        if not waiting:
            continue
        decision = policy.select(waiting, now)
        taken = mailboxes.take(decision.take)
        if taken:
            n = len(taken)
            if n not in batch_s:
                batch_s[n] = curve.ms(n) / 1000.0
            in_flight = (now, taken, policy, curve_k)
            heapq.heappush(heap, (now + batch_s[n], _DEVICE_FREE, -1))
        elif (
            decision.wait_until is not None
            and now < decision.wait_until
            and (timer is None or decision.wait_until < timer)
        ):
            timer = decision.wait_until
            heapq.heappush(heap, (timer, _TIMER, -1))

    segments.close(t_end)
    peaks = [
        p.peak_mb
        for k, n in used
        for p in curves[k].points
        if p.batch == n and p.peak_mb is not None
    ]
    overwrites = np.empty(len(overwritten_t), OVERWRITE_DTYPE)
    overwrites["session"] = overwritten_sid
    overwrites["t"] = overwritten_t
    return Trace(
        items=np.array(items, dtype=ITEM_DTYPE),
        batches=np.array(batches, dtype=BATCH_DTYPE),
        overwrites=overwrites[overwrites["t"] >= t0],
        start=t0,
        end=t_end,
        sessions=n_ids,
        config=config,
        segments=tuple(segments.all()),
        peak_mb=max(peaks) if peaks else None,
    )


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


def simulate_trace(
    config: RunConfig, curve: BatchCurve, warmup_s: float = DEFAULT_WARMUP_S
) -> Trace:
    """Run ``config`` on ``curve`` in virtual time; the policy comes from ``make_policy``."""
    return play(one_step(config), lambda _config: curve, warmup_s)


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
