"""The simulator: one run on 1…N devices, one batching worker per device, one roster, a
router.

Why it exists: past one GPU the deployment question is "how many devices for N
sessions, and how should sessions be spread over them"; on one GPU, "which policy, how
many sessions". This module plays one run on N devices in virtual time (N = 1: the
one-device simulator's runs, :func:`~batchscope.sim.simulator.play`, play here too):

- the **sessions** publish their windows on one clock (:class:`~batchscope.sim.clock.Clock`),
  and a session has at most one window waiting anywhere (latest-only holds per session: a
  newer window overwrites the waiting one where it waits, and counts one *overwritten*
  frame), by the rule of the live worker's :class:`~batchscope.engine.session.Mailboxes`;
- each **device** has its own policy object (:func:`~batchscope.engine.policies.make_policy`
  of the config: one policy per device, the same knobs, the objects the live worker
  uses), its own batch curve (its profile's curve at the config's precision and
  resolution: devices may differ), and runs one batch at a time, asked when a window
  arrives on it while it is idle, when its batch ends and when its policy's
  ``wait_until`` falls due, and fed back the same way (``observe`` after each batch);
- the **router** (:data:`~batchscope.config.ROUTERS`, the rules in
  :mod:`batchscope.engine.routing` and :mod:`batchscope.engine.rules`, which the live
  worker's router calls too) places a window when
  it opens a session's mailbox (a window with no window of its session waiting anywhere):
  ``pinned`` deals the sessions over the devices by id (session ``s`` on device
  ``s mod N``: a partition, each device plays its sessions as a one-device run would);
  ``least-loaded`` is the power of two choices on waiting windows, a tie to the device
  that is free first (idle, or its batch ends sooner), then to the lower index.

A window waits on the device it was routed to until that device's policy takes it: a
router places, it does not move windows later (nor does Ray's).

The records are ``Measured`` rows whose curve index is the device's index, so the report
is :func:`~batchscope.engine.report.body.build_report`'s over all devices (every figure by
its definition in ``run``), with ``overall.busy`` the mean of the devices' busy shares,
and a ``devices`` list: ``device``, ``sessions`` (pinned: the sessions on it;
least-loaded: those it served in the measured interval), ``busy`` and ``batch_sizes``.

A session's pace may change during the run (:class:`Pace`: a burst at K × fps, a stall at
0, back to 1), by the live feeder's rule (``Clock.set_scale``), as the burst and stall
faults set it. ``drop_after_ms`` drops a window that waited past it on its device, by
the mailboxes' rule (checked when the device could take a batch). A measured host's
lateness (``jitter``, :mod:`batchscope.sim.host_jitter`) is replayed on each device:
every frame published late by a draw, a device's worker that was idle deciding late by a
draw of its own (each device's thread wakes by itself), and every batch ending late by a
draw. The emulated neighbours (one device) stretch each batch by draws of their own time
slices (:class:`~batchscope.engine.neighbours.Neighbours`, the emulated device's). Sessions
may run the model at several resolutions (:class:`Shapes`, a batch of one: simulated
only, for the findings on mixed cameras). An experiment's steps and faults play by
:class:`~batchscope.sim.changes.Changes` (:func:`play_devices_experiment`; one device:
``simulator.play``): the config changes, segments and faults as live; one policy per
device, retuned or remade together. A step may change the devices (their number or
profiles) or the router, as a live change does (``Devices.route``,
engine/run_devices.py): a device that joins gets a worker and a policy of its own, one
that leaves finishes its batch and takes no more, and the windows waiting are placed
again, in session order, by the router of the new config with fresh draws (live, every
change of a backend field builds the devices' workers and router anew). Real devices,
and neighbours on several devices, are refused with one clear error.

The turns play in one loop (:mod:`batchscope.sim.fast_loop`: compiled by numba, or its
Python form where numba is not there), driven stretch by stretch by :class:`_Driver`:
between two stretches the paces, steps and faults apply here, and the loop goes on.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchscope.config import (
    BACKEND_FIELDS,
    EMULATED,
    POLICY_PARAMS,
    ROUTERS,
    ConfigError,
    RunConfig,
)
from batchscope.engine.policies import BatchPolicy, make_policy
from batchscope.engine.report.body import SessionInfo, build_report
from batchscope.engine.routing import (
    devices_label,
    least_loaded,
    pin,
    pinned_counts,
    router_draws,
)
from batchscope.engine.segments import presence
from batchscope.engine.stats import BATCH_DTYPE, device_entries, item_records
from batchscope.experiment import Experiment, Step
from batchscope.profiles.profile import BatchCurve, DeviceProfile, load_profile
from batchscope.sim.changes import Changes, CurveFor, need_fps, worker_knobs
from batchscope.sim.clock import NEVER, Clock, Schedule
from batchscope.sim.fast_loop import DONE, Delivered, Measured, Run, Stop, code_of, compiled
from batchscope.sim.host_jitter import HostJitter

DEFAULT_WARMUP_S = 1.0  # the same default as `batchscope run --warmup`


@dataclass(frozen=True)
class Pace:
    """A session's pace from ``at`` (s after the warm-up) on: ``factor`` × fps (0 stalls it,
    1 is normal again), as a burst or a stall fault paces it live."""

    at: float
    session: int
    factor: float


@dataclass(frozen=True)
class Shapes:
    """Sessions at several model resolutions (a far camera at 512x288 beside near ones at
    256x144): ``of_session[s]`` is session ``s``'s shape, ``curves[d][k]`` device ``d``'s
    batch curve at shape ``k``. A batch holds one shape, as Triton's dynamic batcher batches
    only requests of one shape: a device takes the shape of its oldest waiting window (by
    ``since``) and its policy chooses among that shape's windows. Simulated only:
    BatchScope's worker runs one resolution (sources are fitted to it)."""

    of_session: tuple[int, ...]
    curves: tuple[tuple[BatchCurve, ...], ...]


def mixed_shapes(
    config: RunConfig, devices: Sequence[Device], resolutions: Sequence[tuple[int, int]]
) -> Shapes:
    """:class:`Shapes` of ``resolutions`` (one per session) on ``devices`` (ProfileError
    names what a profile lacks)."""
    if len(resolutions) != config.sessions:
        raise ConfigError(
            "resolutions", len(resolutions), f"give one per session ({config.sessions})"
        )
    kinds = list(dict.fromkeys(resolutions))
    curves = tuple(
        tuple(d.profile.curve(config.precision, r, config.runtime) for r in kinds) for d in devices
    )
    return Shapes(tuple(kinds.index(r) for r in resolutions), curves)


@dataclass(frozen=True)
class Device:
    """One simulated device: its label (``emulated:NAME``) and its profile."""

    label: str
    profile: DeviceProfile

    def curve(self, config: RunConfig) -> BatchCurve:
        return self.profile.curve(config.precision, config.resolution, config.runtime)


def load_devices(names: Sequence[str], known: DeviceProfile | None = None) -> list[Device]:
    """The devices of ``names`` (profiles loaded once each; ``known`` stands for its name)."""
    loaded: dict[str, DeviceProfile] = {}
    if known is not None:
        loaded[known.name] = known
    devices = []
    for name in names:
        if name not in loaded:
            loaded[name] = load_profile(name)
        devices.append(Device(f"{EMULATED}{loaded[name].name}", loaded[name]))
    return devices


def check_router(router: str) -> str:
    if router not in ROUTERS:
        raise ConfigError("router", router, f"unknown router; choose from {', '.join(ROUTERS)}")
    return router


@dataclass
class DevicesPlayed:
    """A played run on 1…N devices: the measured batches (curve index = device index),
    their windows, the clock (for the overwrites), and the sessions pinned to each device
    (one device's, a one-device simulator's run: ``simulator.trace_of`` makes its trace)."""

    measured: Measured
    delivered: Delivered
    clock: Clock
    t0: float
    t_end: float
    pinned: list[int] | None  # sessions per device (pinned), None (least-loaded)
    expired: list[tuple[int, float]] = field(default_factory=list)  # (session, t) dropped
    shape_rows: set[tuple[int, int, int]] = field(default_factory=set)  # (device, shape, rows)
    changes: Changes | None = None  # an experiment's: its config at the end, its segments
    router: str = ""  # the router at the end (an experiment's step may change it)
    devices: tuple[Device, ...] = ()  # an experiment's: each index's device (the latest)
    #: (curve, rows) of device 0's measured batches: the index of the curve it ran on in
    #: ``changes.curves`` (a step may switch it) and the rows it ran (the one-device trace's
    #: memory peak); None: every batch ran on the first curve (made when asked)
    curve_rows: set[tuple[int, int]] | None = None
    n_ids: int = 0  # the session ids the run used (an experiment's: any step's)


def emulated_names(config: RunConfig) -> list[str]:
    """The profile of each of ``config``'s devices; ConfigError for a real device (the
    simulator replays a profile's batch curve)."""
    names = []
    for name in config.device_names():
        if not name.startswith(EMULATED):
            raise ConfigError(
                "devices",
                name,
                "a real device: the simulator replays a profile's batch curve; list "
                f"emulated devices ({EMULATED}NAME)",
            )
        names.append(name[len(EMULATED) :])
    return names


@dataclass(frozen=True)
class Steps:
    """An experiment's steps and faults for :func:`play_devices`: ``devices`` run the
    opening config; a step that names other devices runs on those (:meth:`devices_for`)."""

    experiment: Experiment
    opening: Step | None
    devices: tuple[Device, ...]
    names: tuple[str, ...]  # the opening config's profiles, one per device
    n_ids: int  # session ids any step uses: 0 .. n_ids - 1
    loaded: dict[str, Device] = field(default_factory=dict)  # by profile name
    #: one device whose curve is ``curve_for(config)`` (the one-device simulator's: any
    #: backend's config, a profile's curve), instead of ``devices``
    curve_for: CurveFor | None = None

    def devices_for(self, config: RunConfig) -> tuple[Device, ...]:
        """``config``'s devices: the opening ones while it names as many of the same
        profiles, else each loaded by its profile's name (once; ProfileError if none)."""
        names = emulated_names(config)
        if tuple(names) == self.names:
            return self.devices
        for name, device in zip(self.names, self.devices, strict=False):
            self.loaded.setdefault(name, device)
        for name in names:
            if name not in self.loaded:
                self.loaded[name] = load_devices([name])[0]
        return tuple(self.loaded[name] for name in names)

    def curves(self, config: RunConfig) -> list[BatchCurve]:
        """Each device's curve for ``config`` (ProfileError: a device that has none)."""
        if self.curve_for is not None:
            return [self.curve_for(config)]
        return [d.curve(config) for d in self.devices_for(config)]

    def changes(
        self, config: RunConfig, policy: BatchPolicy, clock: Clock, t0: float, t_end: float
    ) -> Changes:
        """The one-device agenda (:class:`~batchscope.sim.changes.Changes`) of the steps:
        the config, segments and faults as there, device 0's policy; a step whose config
        some device has no curve for is a segment with the error, as there."""
        curves = self.curves(config)
        return Changes(
            self.experiment,
            self.opening,
            config,
            policy,
            curves[0],
            lambda c: self.curves(c)[0],
            clock,
            t0,
            t_end,
        )


def play_devices_experiment(
    experiment: Experiment,
    devices: Sequence[Device],
    router: str,
    warmup_s: float = 0.0,
    jitter: HostJitter | None = None,
) -> DevicesPlayed:
    """Play ``experiment`` on ``devices``, windows placed by ``router``: its steps and
    faults at their times as the one-device simulator plays them (each step a segment;
    a step may change the policy, its knobs, the sessions, their frame rate, the
    precision, the resolution and the deadline drop; a slow device slows the device it
    names, or every device, as live), and the devices and the router (module doc; ``devices``
    and ``router`` are the opening config's). Raises ConfigError for a config that lists
    a real device or has neighbours."""
    steps = experiment.steps
    opening = steps[0] if steps and steps[0].at == 0 else None
    config = experiment.base.with_changes(**opening.changes) if opening else experiment.base
    for other in experiment.configs:
        _refuse_unplayed(other, len(emulated_names(other)))
    names = tuple(emulated_names(config))
    played = Steps(experiment, opening, tuple(devices), names, experiment.most("sessions"))
    need_fps(config)
    curves = played.curves(config)
    return play_devices(config, curves, router, warmup_s, jitter=jitter, steps=played)


def play_devices(
    config: RunConfig,
    curves: Sequence[BatchCurve],
    router: str,
    warmup_s: float = DEFAULT_WARMUP_S,
    paces: Sequence[Pace] = (),
    jitter: HostJitter | None = None,
    shapes: Shapes | None = None,
    steps: Steps | None = None,
    python: bool = False,
) -> DevicesPlayed:
    """Play ``config`` on one device per curve, windows placed by ``router`` (module doc).

    ``paces``: sessions that change pace during the run (a burst, a stall), each from its
    ``at`` (s after the warm-up) on, by the live feeder's rules (``Clock.set_scale``).
    ``jitter``: a measured host's lateness, replayed (module doc; None: never late).
    ``shapes``: sessions at several model resolutions, a batch of one (:class:`Shapes`;
    None: every session at the config's). ``steps``: an experiment's steps and faults
    (:func:`play_devices_experiment`; ``config`` is then its opening config).
    ``python``: the loop's Python form plays it (the tests' oracle; where numba cannot
    compile the loop, it plays every run)."""
    played = play_until(
        config, curves, router, warmup_s, paces, jitter, shapes, steps, python=python
    )
    assert played is not None, "no stop: the run plays to its end"
    return played


def play_until(
    config: RunConfig,
    curves: Sequence[BatchCurve],
    router: str,
    warmup_s: float = DEFAULT_WARMUP_S,
    paces: Sequence[Pace] = (),
    jitter: HostJitter | None = None,
    shapes: Shapes | None = None,
    steps: Steps | None = None,
    stop: Stop | None = None,
    python: bool = False,
) -> DevicesPlayed | None:
    """:func:`play_devices`, or None when ``stop`` ended the run (a plain run on one
    device asks it, :data:`~batchscope.sim.fast_loop.Stop`; every other run plays to its
    end)."""
    check_router(router)
    need_fps(config)
    if not warmup_s >= 0:
        raise ConfigError("warmup", warmup_s, "must be 0 or more seconds")
    _refuse_unplayed(config, len(curves))
    if steps is not None and shapes is not None:
        raise ConfigError("shapes", len(shapes.of_session), "not with an experiment's steps")
    curves = list(curves)
    n_dev = len(curves)  # the run's devices now: the router places on these
    if n_dev < 1:
        raise ConfigError("devices", n_dev, "give at least one device")
    t0 = warmup_s
    t_end = warmup_s + (config.duration_s if steps is None else steps.experiment.duration)
    n_ids = config.sessions if steps is None else steps.n_ids
    clock = Clock(config, n_ids, t_end, jitter)
    agenda = sorted((t0 + p.at, p.session, p.factor) for p in paces)
    for _, sid, _ in agenda:
        if not 0 <= sid < config.sessions:
            raise ConfigError("session", sid, f"no such session (0 to {config.sessions - 1})")
    change_at = agenda[0][0] if agenda else NEVER
    policies = [make_policy(config) for _ in curves]
    changes = None
    on: tuple[Device, ...] = ()  # an experiment's devices, each index's latest
    if steps is not None:  # the one-device agenda (config, segments, faults); device 0's policy
        changes = steps.changes(config, policies[0], clock, t0, t_end)
        on = steps.devices
    if shapes is not None and (
        len(shapes.of_session) != config.sessions or len(shapes.curves) != n_dev
    ):
        raise ConfigError("shapes", len(shapes.of_session), "one per session, curves per device")
    unplayed = [p.name for p in policies if code_of(p) is None]
    if unplayed:  # a rule added to RULES without its code in the loop
        raise ConfigError("policy", unplayed[0], "the simulator's loop has no rule for it")
    driver = _Driver(config, curves, router, t0, t_end, n_ids, clock, policies, changes,
                     steps, on, jitter, shapes, python or not compiled())  # fmt: skip
    step_at = NEVER if changes is None else changes.next_at()
    frames = clock.schedule(0.0, min(change_at, step_at))
    return driver.play(frames, agenda, stop)


class _Driver:
    """:func:`play_until`'s run in the loop (:class:`~batchscope.sim.fast_loop.Run`), driven
    stretch by stretch: between two stretches the paces, steps and faults apply here (a
    step as live applies it: ``Changes.apply``, the policies made anew or retuned, the
    devices and the router built anew, the waiting windows placed again), and the loop
    goes on from where it stopped."""

    def __init__(
        self, config: RunConfig, curves: list[BatchCurve], router: str, t0: float,
        t_end: float, n_ids: int, clock: Clock, policies: list[BatchPolicy],
        changes: Changes | None, steps: Steps | None, on: tuple[Device, ...],
        jitter: HostJitter | None, shapes: Shapes | None, python: bool,
    ) -> None:  # fmt: skip
        self.curves, self.router, self.t0, self.t_end, self.n_ids = curves, router, t0, t_end, n_ids
        self.clock, self.policies, self.changes, self.steps, self.on = (
            clock, policies, changes, steps, on,
        )  # fmt: skip
        self.n_dev = self.used = len(curves)  # devices now; slots the run has had
        slots = max(self.n_dev, steps.experiment.most("devices") if steps is not None else 0)
        self.run = run = Run(slots, n_ids, t0, t_end, policies, python)
        self.pins, draws = self._pinned(), router_draws(config.seed)
        run.set_router(router, self.pins, draws)
        self.shapes = shapes
        if shapes is not None:
            run.set_shapes(shapes.of_session, len(shapes.curves[0]))
        run.set_curves(self._tables(), self._slowdowns())
        run.set_devices(self.n_dev, 0 if changes is None else changes.curve_k)
        drop_s, neighbours = worker_knobs(config) if changes is None else changes.worker_knobs()
        run.set_knobs(drop_s, neighbours)
        if jitter is not None:  # the host's draws, shared by the devices in turn
            run.set_host(jitter, random.Random(config.seed + 7_919))
        self.step_at = NEVER if changes is None else changes.next_at()
        self.tracked = self.step_at != NEVER  # a step may switch device 0's curve
        if self.tracked:
            run.track_curves()
        #: one config throughout, nothing late, dropped or stretched: a Stop is asked
        self.plain = (
            not self.tracked and jitter is None and drop_s is None and not neighbours
            and not (changes and changes.slowing) and shapes is None
        )  # fmt: skip

    def play(
        self, frames: Schedule, agenda: list[tuple[float, int, float]], stop: Stop | None
    ) -> DevicesPlayed | None:
        """Play from ``frames`` (the first stretch's schedule), the paces of ``agenda`` at
        their times; None when ``stop`` ended the run (a plain run on one device)."""
        change_at = agenda[0][0] if agenda else NEVER
        if not (self.plain and not agenda and self.n_dev == 1):
            stop = None
        while True:
            done = self.run.play(frames, min(change_at, self.step_at), stop)
            if done is None:
                return None
            if done == DONE:
                break
            now = self.run.now
            while agenda and agenda[0][0] == now:
                _, sid, factor = agenda.pop(0)
                self.clock.set_scale(sid, factor, now)
            change_at = agenda[0][0] if agenda else NEVER
            if self.changes is not None and self.step_at == now:
                self._step(self.changes, now)
                self.step_at = self.changes.next_at()
            frames = self.clock.schedule(now, min(change_at, self.step_at))
        return self._played()

    def _step(self, changes: Changes, now: float) -> None:
        """The steps and faults due at ``now``, applied."""
        run, policies = self.run, self.policies
        run.leave_policies(policies)
        was = changes.config
        changes.apply(now, run)
        config = changes.config
        changed = was.diff(config).keys()
        new = changes.policy is not policies[0]
        if new:  # a new policy, one on each device
            policies = self.policies = [
                changes.policy, *(make_policy(config) for _ in policies[1:])
            ]  # fmt: skip
        elif set(POLICY_PARAMS[config.policy]) & changed:
            for policy in policies[1:]:  # device 0's was retuned: the others too
                policy.retune(config)
        if set(BACKEND_FIELDS) & changed:  # live: each device's worker built anew
            assert self.steps is not None
            now_curves = self.steps.curves(config)
            self.n_dev = len(now_curves)
            if self.steps.curve_for is None:  # one that left keeps its index, its label
                self.on = (*self.steps.devices_for(config), *self.on[self.n_dev :])
            self.curves = now_curves + self.curves[self.n_dev :]
            while len(policies) < len(self.curves):  # a device joins: a worker, a policy
                policies.append(make_policy(config))
            self.used = max(self.used, len(self.curves))
        run.set_policies(policies, new)
        if set(BACKEND_FIELDS) & changed or "router" in changed:
            self.router = config.router if "router" in changed else self.router
            self.pins, draws = self._pinned(), router_draws(config.seed)
            run.set_router(self.router, self.pins, draws)
            run.place_again(_router(self.router, self.pins, draws, self.n_dev))
            run.set_router(self.router, self.pins, draws)  # the draws placing took
        run.set_curves(self._tables(), self._slowdowns())
        run.set_devices(self.n_dev, changes.curve_k)
        run.set_knobs(*changes.worker_knobs())
        run.touch_all()

    def _pinned(self) -> list[int] | None:
        """Each session id's device (``pinned``), or None."""
        if self.router != "pinned":
            return None
        dealt = pin(range(self.n_ids), self.n_dev)
        return [dealt[s] for s in range(self.n_ids)]

    def _tables(self) -> Sequence[Sequence[BatchCurve]]:
        """Each device's curves, one a shape."""
        return self.shapes.curves if self.shapes is not None else [[c] for c in self.curves]

    def _slowdowns(self) -> list[float]:
        changes = self.changes
        if changes is None or not changes.slowing:
            return [1.0] * len(self.curves)
        return [changes.faults.slowdown(d) for d in range(len(self.curves))]

    def _played(self) -> DevicesPlayed:
        self.run.leave_policies(self.policies)
        records, changes, pins = self.run.records, self.changes, self.pins
        if changes is not None:
            changes.segments.close(self.t_end)
            pins = None if pins is None else pins[: changes.config.sessions]
        return DevicesPlayed(
            records.measured, records.delivered, self.clock, self.t0, self.t_end,
            pinned_counts(pins, self.used), records.expired,
            set() if self.shapes is None else self.run.shapes_run(), changes, self.router,
            self.on, records.curve_rows if self.tracked else None, self.n_ids,
        )  # fmt: skip


def _router(
    router: str, pins: list[int] | None, draws: random.Random, n_dev: int
) -> Callable[[int, Callable[[int], tuple[int, float]]], int]:
    """``route(session, load)``: the device ``router`` places a window on."""
    if pins is not None:
        return lambda s, load: pins[s]
    return lambda s, load: least_loaded(draws, n_dev, load)


def _refuse_unplayed(config: RunConfig, n_dev: int) -> None:
    """One clear error for what the devices' loop does not play (module doc)."""
    if config.neighbours and n_dev > 1:
        raise ConfigError(
            "neighbours", config.neighbours, "is not simulated on several devices yet"
        )


def measured_records(
    measured: Measured, delivered: Delivered, on_devices: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """:data:`ITEM_DTYPE` and :data:`BATCH_DTYPE` rows of the measured batches (filled by
    column, from the batches' columns). ``on_devices``: each
    row's curve index is the device that ran it (sim/devices.py), its ``device``."""
    batches = np.zeros(len(measured), BATCH_DTYPE)
    arrivals, sessions = delivered
    items = item_records(len(arrivals))
    if not measured:
        return items, batches
    starts, sizes, ends, curves, reasons, caps, pads = measured.columns()
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


def simulate_devices(
    config: RunConfig,
    devices: Sequence[Device],
    router: str,
    warmup_s: float = DEFAULT_WARMUP_S,
    jitter: HostJitter | None = None,
) -> dict[str, Any]:
    """The JSON report (``kind: simulate``) of ``config`` on ``devices``, routed by ``router``
    (``jitter``: a measured host's lateness, replayed, as ``simulate``'s)."""
    curves = [d.curve(config) for d in devices]  # ProfileError names what a profile has
    played = play_devices(config, curves, router, warmup_s, jitter=jitter)
    report = devices_report(played, config, devices, router, warmup_s)
    if jitter is not None:
        report["host_jitter_model"] = jitter.to_json()
    return report


def devices_report(
    played: DevicesPlayed,
    config: RunConfig,
    devices: Sequence[Device],
    router: str,
    warmup_s: float,
    shapes: Shapes | None = None,
) -> dict[str, Any]:
    """The report over all devices, with ``router`` and the ``devices`` list (module doc);
    ``shapes``: what :func:`play_devices` played with."""
    items, batches = measured_records(played.measured, played.delivered, on_devices=True)
    overwrites = played.clock.overwrites()
    over = overwrites[overwrites["t"] >= played.t0]
    counts = np.bincount(over["session"], minlength=config.sessions)
    counted = {sid: int(counts[sid]) for sid in range(config.sessions)}
    duration = played.t_end - played.t0
    segments = played.changes.segments.all() if played.changes is not None else []
    rows = (batches["size"] + batches["padded"]).tolist()
    ran = set(zip(batches["device"].tolist(), rows, strict=True))  # (device, rows it ran)
    peaks = [
        p.peak_mb
        for d, device in enumerate(devices)
        for p in device.curve(config).points
        if p.peak_mb is not None and (d, p.batch) in ran
    ]
    if shapes is not None:  # each batch's own shape's peak
        peaks = [
            p.peak_mb
            for d, k, rows in played.shape_rows
            for p in shapes.curves[d][k].points
            if p.peak_mb is not None and p.batch == rows
        ]
    memory: dict[str, float] = {}
    if peaks:
        memory["profile_peak_mb"] = float(max(peaks))
    labels = [d.label for d in devices]
    report = build_report(
        "simulate",
        config.with_changes(
            devices=len(devices), router=router, extra={**config.extra, "warmup_s": warmup_s}
        ),
        [SessionInfo(sid, "simulated") for sid in range(config.sessions)],
        items,
        batches,
        counted,
        duration,
        memory,
        extra={
            "device_label": f"simulated: {devices_label(labels, router)}",
            "weights": "simulated device: no model runs",
        },
        expired=dict(Counter(s for s, _ in played.expired)),
        present_s={
            sid: presence(segments, sid, played.t0, played.t_end) for sid in range(config.sessions)
        },
    )
    report["router"] = router
    report["devices"] = device_entries(items, batches, labels, duration, played.pinned)
    return report
