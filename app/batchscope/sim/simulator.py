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
  compares every record with dumps made by the loops this one replaced;
- the **records** are :data:`ITEM_DTYPE` / :data:`BATCH_DTYPE` /
  :data:`OVERWRITE_DTYPE` rows, the report comes from
  :func:`~batchscope.engine.report.build_report` and the segments are
  :class:`~batchscope.engine.segments.Segment` objects, so every figure has the
  definition it has in ``run``.

:func:`play` plays an experiment: a plain ``simulate(config)`` is an experiment of one
step at 0 s. It plays on one device in the simulator's loop for 1…N devices
(:func:`~batchscope.sim.devices.play_until`: compiled, :mod:`batchscope.sim.fast_loop`,
driven from one change to the next). A step applies at its
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

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from batchscope.config import ConfigError, RunConfig
from batchscope.engine.policies import ARRIVAL, SESSION
from batchscope.engine.report.body import SessionInfo, build_report
from batchscope.engine.segments import Segment, presence
from batchscope.engine.stats import OVERWRITE_DTYPE
from batchscope.experiment import Experiment, Step
from batchscope.profiles.profile import BatchCurve, DeviceProfile, load_profile
from batchscope.sim.changes import CurveFor, need_fps
from batchscope.sim.devices import (
    DEFAULT_WARMUP_S,
    DevicesPlayed,
    Steps,
    measured_records,
    play_until,
)
from batchscope.sim.fast_loop import Stop
from batchscope.sim.host_jitter import HostJitter

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
    return trace_of(played)


def play_records(
    experiment: Experiment,
    curve_for: CurveFor,
    warmup_s: float = DEFAULT_WARMUP_S,
    stop: Stop | None = None,
    jitter: HostJitter | None = None,
) -> DevicesPlayed | None:
    """:func:`play`'s records, or None when ``stop`` ended the run early.

    The run plays on one device in the loop for 1…N devices
    (:func:`~batchscope.sim.devices.play_until`: its steps, faults, deadline drop,
    neighbours and host lateness by one set of rules; compiled, in
    :mod:`batchscope.sim.fast_loop`). ``stop`` is asked on a plain run (one config
    throughout, nothing late, dropped or stretched) every
    :data:`~batchscope.sim.fast_loop.CHECK_EVERY_S`; any other run plays to its end.
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
    n_ids = experiment.most("sessions")
    one = Steps(experiment, opening, (), (), n_ids, curve_for=curve_for)
    played = play_until(
        config, one.curves(config), "pinned", warmup_s, jitter=jitter, steps=one, stop=stop
    )
    if played is None:
        return None
    assert played.changes is not None, "an experiment's run has its changes"
    return played


def trace_of(played: DevicesPlayed) -> Trace:
    """A one-device run's records (:func:`play_records`) over its measured interval
    [t0, t_end], as a :class:`Trace` (made when asked: the planner needs only the figures
    of most of its runs)."""
    changes = played.changes
    assert changes is not None, "an experiment's run has its changes"
    items, batches = measured_records(played.measured, played.delivered)
    curve_rows = played.curve_rows
    if curve_rows is None:
        curve_rows = {(0, rows) for rows in np.unique(batches["size"] + batches["padded"]).tolist()}
    peaks = [
        p.peak_mb
        for k, n in curve_rows
        for p in changes.curves[k].points
        if p.batch == n and p.peak_mb is not None
    ]
    overwrites = played.clock.overwrites()
    return Trace(
        items=items,
        batches=batches,
        overwrites=overwrites[overwrites["t"] >= played.t0],
        start=played.t0,
        end=played.t_end,
        sessions=played.n_ids,
        config=changes.config,
        segments=tuple(changes.segments.all()),
        peak_mb=max(peaks) if peaks else None,
        expiries=np.array(played.expired, OVERWRITE_DTYPE),
    )


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
