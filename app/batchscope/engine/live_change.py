"""A live change as one transaction: build what can fail, then swap it in between batches.

Everything that can fail is built first — the new backend on the worker thread
while the old one keeps running, then the sources at a new resolution — and
only when all of it worked is it swapped in, between two batches. On any
failure the config, sources, sessions and backend stay exactly as they were,
one event says why, and the run keeps delivering. A change (or an experiment
step, or a fault from the Faults menu) opens one segment at the instant it took
effect.

This is the engine's other half: :class:`LiveChange` holds the engine's parts it acts on
(the devices, the roster, the segments, the faults, the feeder, the mailboxes) and writes
the :class:`~batchscope.engine.engine.Engine`'s config; of the engine itself it needs only
:class:`LiveEngine` (the config, whether it runs, and what opening and starting a run do
too). The engine's ``apply`` is the way in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from batchscope.config import (
    BACKEND_FIELDS,
    DEVICE_LOAD_FIELDS,
    POLICY_PARAMS,
    SESSION_FIELDS,
    WORKER_FIELDS,
    ConfigError,
    RunConfig,
    format_resolution,
)
from batchscope.engine.backends import Backend, BackendError, EmulatedBackend
from batchscope.engine.fault_actions import RunFaults
from batchscope.engine.faults import fault_changes
from batchscope.engine.feeder import Feeder
from batchscope.engine.neighbours import Neighbours
from batchscope.engine.other_devices import OtherDevicesBuilt
from batchscope.engine.policies import make_policy
from batchscope.engine.report.phrases import changes_phrase, faults_phrase, set_phrase
from batchscope.engine.roster import (
    Roster,
    SourceSlot,
    cache_bytes,
    close_slots,
    default_sources,
)
from batchscope.engine.run_devices import Devices, EngineStopped
from batchscope.engine.segments import SegmentLog
from batchscope.engine.session import Mailboxes
from batchscope.engine.sources import CACHE_BYTES, SourceError
from batchscope.engine.streams import STREAM_FIELDS, StreamSettings
from batchscope.engine.worker import WorkerStopped
from batchscope.experiment import Fault
from batchscope.models.weights import CheckpointError
from batchscope.profiles.profile import ProfileError
from batchscope.urls import is_stream


class LiveEngine(Protocol):
    """What a live change needs of the engine itself
    (:class:`~batchscope.engine.engine.Engine`): the config it writes, whether the run
    runs, and what opening or starting a run does too (the sources opened, installed and
    played under the engine's lifecycle lock; the sessions; the statistics; the neighbour
    load)."""

    config: RunConfig
    running: bool

    def open_sources(self, specs: tuple[str, ...], config: RunConfig) -> list[SourceSlot]: ...
    def install_sources(self, slots: list[SourceSlot]) -> None: ...
    def add_slot(self, slot: SourceSlot) -> None: ...
    def sync_sessions(self) -> None: ...
    def reset_stats(self, announce: bool = True, open_segment: bool = True) -> None: ...
    def sync_load(self, config: RunConfig) -> None: ...


class LiveChange:
    """One live change at a time, on ``engine``: the only writer of ``engine.config``.

    Every writer (the controls, an experiment step, a fault, a source added or
    removed) hands in what it changes, and the change is made under one lock on
    the config of that moment: a writer never computes a whole config from one it
    read earlier, which would undo a change that landed meanwhile (a source just
    added, a precision just set).
    """

    def __init__(
        self,
        engine: LiveEngine,
        devices: Devices,
        roster: Roster,
        segments: SegmentLog,
        faults: RunFaults,
        feeder: Feeder,
        mailboxes: Mailboxes,
        clock: Callable[[], float],
        event: Callable[[str, str], object],
    ) -> None:
        self._engine = engine
        self._devices = devices
        self._roster = roster
        self._segments = segments
        self._faults = faults
        self._feeder = feeder
        self._mailboxes = mailboxes
        self._clock = clock
        self._event = event
        self._lock = threading.Lock()  # one live change at a time

    def apply(
        self,
        change: RunConfig | Mapping[str, Any],
        on_done: Callable[[str | None], None] | None = None,
        caption: str = "",
        step: bool = False,
        faults: Sequence[Fault] = (),
        fresh: bool = False,
    ) -> str | None:
        """Apply a change live, as one transaction; returns the error, or None.

        ``change``: the RunConfig fields it changes (a delta, made on the config
        current when the lock is taken), or a whole RunConfig, which sets every
        field (an experiment's start, a settings file). A delta that is invalid
        on the running config (a step valid in its file's order) is refused like
        a failed change.
        Blocks until the change took effect (a new backend is built and warmed up
        first) or failed. On success one ``config`` event lists the changes and a
        new segment opens, both at the instant they took effect. On failure
        nothing changed and an ``error`` event says why; an experiment ``step``
        that fails still opens a segment (same config, with the error), so its
        report says what was tried there. ``faults`` (a step's, or the Faults
        menu's) start right after the change (or its failure: the run goes on as
        before, with them), and the one segment the step opens lists both the
        change and the faults: one step, one segment. ``on_done(error)`` is called
        either way; the error is the change's, else the first fault's. ``fresh``
        (an experiment's start): once the change took effect, the run starts over
        from it as a fresh run would (:meth:`_afresh`), so nothing of what played
        before carries into the experiment.
        """
        engine = self._engine
        with self._lock:
            old = engine.config
            error = None
            opens: tuple[RunConfig, dict[str, Any], str | None] | None = None
            try:
                new = change if isinstance(change, RunConfig) else old.with_changes(**change)
            except ConfigError as exc:  # only a delta's with_changes raises it
                new, error = old, str(exc)
                tried = dict(change if not isinstance(change, RunConfig) else {})
                label = ", ".join(set_phrase(k, v) for k, v in tried.items())
                self._event("error", f"not applied ({label}): {error}")
                if step:
                    opens = (old, tried, error)
            changes = old.diff(new)
            if changes:
                label = changes_phrase(changes)
                wanted = {k: b for k, (_, b) in changes.items()}
                try:
                    self._transact(new, changes)
                except (EngineStopped, WorkerStopped):
                    error = "the engine was stopped"
                except Exception as exc:
                    error = str(exc) if _is_user_error(exc) else f"{type(exc).__name__}: {exc}"
                    self._event("error", f"not applied ({label}): {error}")
                    if step:
                        opens = (old, wanted, error)
                else:
                    opens = (new, wanted, None)
                    label_event = label
            elif step and caption and opens is None:
                opens = (old, {}, None)
            if fresh and error is None:
                self._afresh(engine.config)
            at = self._clock()  # the step's segment opens here, its faults' clocks start here
            started, fault_error = self._faults.start(faults, at)
            if started:
                config, wanted, seg_error = opens or (engine.config, {}, None)
                wanted = {**wanted, "fault": fault_changes(started)}
                caption = caption or faults_phrase(started)
                opens = (config, wanted, seg_error)
            if opens is not None and engine.running:
                self._segments.open(at, *opens[:2], caption, opens[2], self._faults.on())
            if changes and error is None:
                self._event("config", label_event)
            error = error or fault_error
        if on_done:
            on_done(error)
        return error

    def _afresh(self, config: RunConfig) -> None:
        """Under the lock: what a fresh run on ``config`` starts with and a long run has
        drifted from: a new policy on every device (an adaptive cap, a round-robin
        cursor), the emulated device's neighbours from their seed, every session
        re-phased from the seed (as a fresh run on it spreads them), and statistics from
        zero (the sessions' counts, the whole run's figures), from the instant the
        segment ``apply`` opens next; earlier segments keep their figures."""
        self._engine.reset_stats(announce=False, open_segment=False)
        for each in self._devices.workers():
            each.set_policy(make_policy(config))
        if config.backend == "emulated":
            self._devices.worker.between_batches(lambda: self._set_neighbours(config))
        self._feeder.rephase(config.seed)

    def add_source(self, spec: str) -> SourceSlot:
        """Open one more source and play it, as one live change: the config lists it, the
        sessions re-map over the sources, and a segment opens (a session may now play
        another source)."""
        engine = self._engine
        with self._lock:
            slot = engine.open_sources((spec,), engine.config)[0]
            engine.add_slot(slot)
            self._sources_changed()
        return slot

    def remove_source(self, spec: str) -> None:
        """Close ``spec`` (not the last source), as one live change (see :meth:`add_source`)."""
        with self._lock:
            if self._roster.remove(spec):
                self._sources_changed()

    def _sources_changed(self) -> None:
        """Under the lock: the roster's sources changed; the config says so, the sessions
        re-map, and a segment opens with the change named."""
        engine = self._engine
        old = engine.config
        new = old.with_changes(sources=tuple(s.spec for s in self._roster.slots))
        engine.config = new
        engine.sync_sessions()
        changes = old.diff(new)
        if not changes:
            return
        if engine.running:
            wanted = {k: b for k, (_, b) in changes.items()}
            self._segments.open(self._clock(), new, wanted, faults=self._faults.on())
        self._event("config", changes_phrase(changes))

    def label_segment(
        self, index: int, changes: dict[str, Any], caption: str, faults: Sequence[Fault] = ()
    ) -> str | None:
        """Say what segment ``index`` stands for (an experiment's step 0, in the segment
        the experiment started in) and start that step's faults in it: one step, one
        segment. Returns the first fault's error, if any."""
        with self._lock:
            started, error = self._faults.start(faults, self._clock())
            if started:
                changes = {**changes, "fault": fault_changes(started)}
            self._segments.relabel(index, changes, caption, self._faults.on())
        return error

    def _transact(self, new: RunConfig, changes: dict[str, tuple[Any, Any]]) -> None:
        engine, devices = self._engine, self._devices
        old = engine.config
        # 1. build and check what can fail; the run goes on untouched meanwhile (a switch
        # of engine too: the worker is the new engine's client, or the batcher, after the
        # swap; engine/serving/dispatch.py)
        policy = make_policy(new) if new.policy != old.policy else None
        backend = None
        others = None  # the other devices' (several devices in BatchScope's worker)
        slots = None
        try:
            if set(BACKEND_FIELDS) & changes.keys():
                devices.hold_ray(old, new)  # Ray stays up while either serves on it
                backend = devices.build_backend(new)
                others = devices.build_others(new)
            if {"resolution", "fit", "sources"} & changes.keys():
                slots = self._reopen(new)
            elif set(STREAM_FIELDS) & changes.keys():
                slots = self._reopen_streams(new)
            # 2. swap it in, between two batches
            if backend is not None and others is not None:  # with the new policy at once
                devices.worker.swap_backend(backend, policy)
                backend = None  # the worker owns it now
                devices.swap_others(others, new, policy is not None, engine.running)
                others = policy = None
        except BaseException:
            self._release(backend, slots, others)
            devices.hold_ray(old)
            raise
        # off Ray, the last holder out shuts it down: once its app is gone (closed aside)
        devices.worker.wait_retired()
        devices.hold_ray(new)
        worker = devices.worker
        if policy is not None:  # one policy object per device
            for each in devices.workers():
                each.set_policy(policy if each is worker else make_policy(new))
        elif set(POLICY_PARAMS[new.policy]) & changes.keys():
            for each in devices.workers():
                each.retune(lambda p: p.retune(new))
        if set(WORKER_FIELDS) & changes.keys():
            worker.between_batches(lambda: devices.set_knobs(new))
        if (
            set(DEVICE_LOAD_FIELDS) & changes.keys()
            and set(BACKEND_FIELDS).isdisjoint(changes.keys())
            and new.backend == "emulated"
        ):
            worker.between_batches(lambda: self._set_neighbours(new))
        if {*DEVICE_LOAD_FIELDS, "backend", "device"} & changes.keys():
            engine.sync_load(new)
        if slots is not None:
            engine.install_sources(slots)
        engine.config = new
        if set(SESSION_FIELDS) & changes.keys():
            engine.sync_sessions()

    def _release(
        self,
        backend: Backend | None,
        slots: list[SourceSlot] | None,
        others: OtherDevicesBuilt | None,
    ) -> None:
        """Give back what a failed (or stopped) transaction built and did not swap in."""
        if slots is not None:
            close_slots(slots)
        if others is not None:
            self._devices.others.release(others)
        if backend is not None:
            self._devices.worker.discard(backend)

    def _set_neighbours(self, config: RunConfig) -> None:
        """Worker thread: the emulated device's neighbours change between two batches."""
        backend = self._devices.backend
        assert isinstance(backend, EmulatedBackend), "neighbours are the emulated device's"
        backend.neighbours = Neighbours(config.neighbours, config.neighbour_duty, config.seed)

    def _reopen_streams(self, new: RunConfig) -> list[SourceSlot] | None:
        """The sources, with each network stream whose settings ``new`` changes opened
        again under them (a capture takes its transport and timeouts when it opens), the
        others as they are; None when no stream changes. Refused, every new one closed,
        if a stream that plays now would not open with them."""
        engine = self._engine
        was, will = StreamSettings.of(engine.config), StreamSettings.of(new)
        slots = self._roster.slots
        again = [
            i
            for i, s in enumerate(slots)
            if is_stream(s.spec) and was.on(s.spec) != will.on(s.spec)
        ]
        if not again:
            return None
        opened = iter(
            self._roster.refuse_broken(
                engine.open_sources(tuple(slots[i].spec for i in again), new)
            )
        )
        return [next(opened) if i in again else s for i, s in enumerate(slots)]

    def _release_caches(self) -> None:
        """Give the frame caches back before re-decoding in their place; nothing may hold
        a view of them: paused sessions, their windows (in the mailboxes and the
        sessions), every device's backend's frame pool."""
        self._feeder.set_sessions([], self._engine.config.fps)
        for session in self._roster.sessions():
            self._mailboxes.drop(session.id)
        for worker in self._devices.workers():
            backend = worker.backend
            if backend is not None:
                worker.between_batches(backend.forget_frames)
        self._roster.release_caches()

    def _reopen(self, new: RunConfig) -> list[SourceSlot]:
        """The sources of ``new``; refused if one that works now would fail after the change.

        The new frame caches are decoded while the old ones play, when both fit in
        CACHE_BYTES; otherwise (long files) in their place: the sessions pause, the old
        caches are given back, the files decode again (the status says how far), and a
        failure decodes the old ones back, so memory stays within the budget.
        """
        engine = self._engine
        roster = self._roster
        specs = new.sources or default_sources()
        held = cache_bytes(roster.slots)
        if held + roster.cache_estimate(specs, new.resolution) <= CACHE_BYTES:
            return roster.refuse_broken(engine.open_sources(specs, new))
        old = engine.config
        self._event(
            "info",
            f"re-decoding at {format_resolution(new.resolution)} in place of the "
            f"{held / 2**20:.0f} MB frame cache: the sessions pause meanwhile",
        )
        self._release_caches()
        try:
            return roster.refuse_broken(engine.open_sources(specs, new))
        except EngineStopped:
            raise
        except BaseException:
            engine.install_sources(engine.open_sources(old.sources or default_sources(), old))
            engine.sync_sessions()
            raise


def _is_user_error(exc: BaseException) -> bool:
    """A setting the user can fix (its message is one line naming it), not a bug."""
    return isinstance(
        exc, ConfigError | SourceError | BackendError | ProfileError | CheckpointError
    )
