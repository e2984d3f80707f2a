"""What changes a simulated run, applied as live: the steps, and the faults that start and end.

A step changes the config as ``Engine.apply`` does and starts its faults as the
experiment player does (one step, one segment); faults compose by the live rule
(``engine/faults.py``). :class:`Changes` is the agenda the simulator's loop asks
at each change's instant; the loop itself is :func:`batchscope.sim.simulator.play`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any, Protocol

from batchscope.config import POLICY_PARAMS, ConfigError, RunConfig
from batchscope.engine.faults import ActiveFaults, fault_changes
from batchscope.engine.neighbours import Neighbours
from batchscope.engine.policies import BatchPolicy, make_policy
from batchscope.engine.report.phrases import fault_phrase, faults_phrase
from batchscope.engine.segments import SegmentLog
from batchscope.experiment import Experiment, Fault, Step
from batchscope.profiles.profile import BatchCurve, ProfileError
from batchscope.sim.clock import NEVER, Clock

#: The batch curve a config runs on; raises ProfileError when there is none.
CurveFor = Callable[[RunConfig], BatchCurve]
ENDS, STEP = 0, 1  # kinds of the changes at one instant, in the order they apply


class Pending(Protocol):
    """The waiting windows by session, as a step that retires sessions drops theirs (a
    dict; sim/devices.py's windows wait on their devices)."""

    def pop(self, session: int, default: None, /) -> list[Any] | None: ...


def need_fps(config: RunConfig) -> None:
    if config.fps is None:
        raise ConfigError("fps", None, "the simulator needs a frame rate (it has no sources)")


class SimulatedFaults:
    """The faults playing, by ``Engine.inject`` and ``engine/faults.py``: what each does.

    A stall or a burst scales its session's pace on the clock (the live feeder's
    ``scale``), a source error fails and later recovers its session (the
    roster's rules, on the clock too), and a slow device multiplies every batch
    that starts meanwhile on the device it names, or on every device when it names
    none (:meth:`slowdown`, as each live worker sets its own between two batches: the
    batch on the device finishes at the pace it started with).
    Overlapping faults compose by the live rule (:class:`ActiveFaults`): each
    end undoes only its own share. A fault's end opens a segment; its start is
    part of its step's segment (the caller opens that one).
    """

    def __init__(self, clock: Clock, segments: SegmentLog) -> None:
        self._clock = clock
        self._segments = segments
        self.active = ActiveFaults()
        self.slowing: tuple[Fault, ...] = ()  # the slow devices on (what slowdown reads)

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
        self._segments.open(now, config, {}, f"after: {fault_phrase(fault)}", faults=self.on())

    def on(self) -> list[dict[str, Any]]:
        """The faults in effect, as a segment lists them."""
        return [f.as_json() for f in self.active.faults()]

    def slowdown(self, device: int) -> float:
        """Device ``device``'s batches take this × their curve's time (the slow devices on
        that name it or none)."""
        return self.active.slowdown(device)

    def _act(self, fault: Fault, now: float, was_failed: bool) -> None:
        """Set the effect of every fault on, after ``fault`` started or ended."""
        sid, clock, active = fault.session, self._clock, self.active
        if fault.kind in ("stall", "burst"):
            assert sid is not None, f"a {fault.kind} fault names its session (FAULT_FIELDS)"
            clock.set_scale(sid, active.pace(sid), now)
        elif fault.kind == "slow_device":
            self.slowing = tuple(f for f in active.faults() if f.kind == "slow_device")
        elif fault.kind == "source_error":
            assert sid is not None, "a source_error fault names its session (FAULT_FIELDS)"
            failed = active.failed(sid)
            if failed and not was_failed:
                clock.fail(sid, now)
            elif was_failed and not failed:
                clock.recover(sid, now)
        else:
            raise ValueError(f"unknown fault {fault.kind!r}")


class Changes:
    """What changes a simulated run, in time order, applied as live: the agenda.

    The agenda holds (s, ENDS or STEP, order, what): each step at its time (the
    opening one only to start its faults) and each fault's end once it started; at
    one instant the faults that end go first, then the steps. A step changes the
    config as ``Engine.apply`` does (:func:`_step`), then starts its faults as the
    player does, and opens one segment listing both. After :meth:`apply` the loop
    reads the run's state here: the config, policy and curve (and the curve's index
    in ``curves``), the worker's and the device's knobs, the slow devices on and device
    0's slowdown (the one-device simulator's), and the memo of batch times on the
    current curve (a new one when the curve or the slow devices change).
    """

    def __init__(
        self,
        experiment: Experiment,
        opening: Step | None,
        config: RunConfig,
        policy: BatchPolicy,
        curve: BatchCurve,
        curve_for: CurveFor,
        clock: Clock,
        t0: float,
        t_end: float,
    ) -> None:
        self.config, self.policy, self.curve = config, policy, curve
        self._curve_for, self._clock, self._t_end = curve_for, clock, t_end
        self._opening = opening
        self.segments = SegmentLog()
        self._first_changes = _wanted(experiment.base, config)
        self._first_caption = (opening.caption if opening else "") or experiment.caption
        self.segments.open(t0, config, self._first_changes, self._first_caption)
        self.faults = SimulatedFaults(clock, self.segments)
        self.curves = [curve]
        self.curve_k = 0
        self.batch_s: dict[int, float] = {}
        self.drop_s, self.neighbours = worker_knobs(config)
        self.slowing = self.faults.slowing
        self.slowdown = 1.0  # device 0's
        steps = experiment.steps
        self._agenda: list[tuple[float, int, int, Any]] = [
            (t0 + s.at, STEP, s.index, s)
            for s in steps
            if (s is not opening or s.faults) and t0 + s.at <= t_end
        ]
        heapq.heapify(self._agenda)
        self._seq = itertools.count(len(steps))  # the order of the fault ends in the agenda

    def worker_knobs(self) -> tuple[float | None, Neighbours]:
        """The deadline drop (s) and the neighbours, of the config now."""
        return self.drop_s, self.neighbours

    def next_at(self) -> float:
        """When the next change is due (s), or never."""
        return self._agenda[0][0] if self._agenda else NEVER

    def apply(self, at: float, pending: Pending) -> None:
        """Everything due at ``at``, in the agenda's order."""
        agenda, faults = self._agenda, self.faults
        while agenda and agenda[0][0] == at:
            _, kind, _, what = heapq.heappop(agenda)
            if kind == ENDS:
                fault, token = what
                faults.end(fault, token, at, self.config)
                continue
            self._step(what, at, pending)
            if self.curve is not self.curves[-1]:
                self.curves.append(self.curve)
                self.curve_k, self.batch_s = len(self.curves) - 1, {}
            if (self.drop_s, self.neighbours.count, self.neighbours.duty) != knob_key(self.config):
                self.drop_s, self.neighbours = worker_knobs(self.config)
        if faults.slowing != self.slowing:
            self.slowing, self.batch_s = faults.slowing, {}
            self.slowdown = faults.slowdown(0)

    def _step(self, step: Step, at: float, pending: Pending) -> None:
        """One step: its change, then its faults; one segment listing both."""
        faults, opens = self.faults, None
        if step is not self._opening:
            self.config, self.policy, self.curve, opens = _step(
                step,
                at,
                self.config,
                self.policy,
                self.curve,
                self._curve_for,
                self._clock,
                pending,
            )
        started = []
        for fault in step.faults:  # as the player starts them: after the change
            token = faults.start(fault, at, self.config)
            if token is None:
                continue
            started.append(fault)
            if at + fault.for_s <= self._t_end:
                heapq.heappush(
                    self._agenda, (at + fault.for_s, ENDS, next(self._seq), (fault, token))
                )
        if step is self._opening:
            if started:
                both = {**self._first_changes, "fault": fault_changes(started)}
                self.segments.relabel(0, both, self._first_caption, faults.on())
        elif started or opens:
            cfg, wanted, error = opens or (self.config, {}, None)
            if started:
                wanted = {**wanted, "fault": fault_changes(started)}
            caption = step.caption or faults_phrase(started)
            self.segments.open(at, cfg, wanted, caption, error, faults.on())


def worker_knobs(config: RunConfig) -> tuple[float | None, Neighbours]:
    """The knobs the live worker and the emulated device apply to every policy."""
    drop = None if config.drop_after_ms is None else config.drop_after_ms / 1000.0
    return drop, Neighbours(config.neighbours, config.neighbour_duty, config.seed)


def knob_key(config: RunConfig) -> tuple[float | None, int, float]:
    drop = None if config.drop_after_ms is None else config.drop_after_ms / 1000.0
    return drop, config.neighbours, config.neighbour_duty


def _step(
    step: Step,
    now: float,
    config: RunConfig,
    policy: BatchPolicy,
    curve: BatchCurve,
    curve_for: CurveFor,
    clock: Clock,
    pending: Pending,
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
    need_fps(new)
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
