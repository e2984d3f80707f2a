"""The engine facade: open/start/stop, apply(config) live, snapshot(), report().

The UI and the CLI talk to this object only. It owns the roster (sources and
sessions), the feeder, the worker, the monitor and, while recording, the
recorder. Every thread it starts stops within ``stop(timeout)`` from any
state: opening (decoding a file), building a backend, running, paused,
recording.

A live change is a transaction (:meth:`Engine.apply`): everything that can
fail is built first — the new backend on the worker thread while the old one
keeps running, then the sources at a new resolution — and only when all of it
worked is it swapped in, between two batches. On any failure the config,
sources, sessions and backend stay exactly as they were, one event says why,
and the run keeps delivering.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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
from batchscope.device.load import NeighbourLoad, neighbour_load
from batchscope.engine.accuracy import UNSCORED, score
from batchscope.engine.backends import (
    Backend,
    BackendError,
    BuildCancelled,
    EmulatedBackend,
    make_backend,
)
from batchscope.engine.fault_actions import RunFaults
from batchscope.engine.faults import fault_changes
from batchscope.engine.feeder import Feeder
from batchscope.engine.metrics import Event, MetricsStore, TimelineSample
from batchscope.engine.monitor import Monitor, sample_timeline
from batchscope.engine.neighbours import Neighbours
from batchscope.engine.policies import make_policy
from batchscope.engine.recorder import Recorder
from batchscope.engine.report.body import SessionInfo
from batchscope.engine.report.run_report import run_report
from batchscope.engine.roster import (
    Roster,
    SourceSlot,
    cache_bytes,
    close_slots,
    default_sources,
    open_slots,
)
from batchscope.engine.segments import SegmentLog
from batchscope.engine.session import Mailboxes, Session, Window, shown_state
from batchscope.engine.snapshot import (
    BusRecords,
    DeviceView,
    SegmentView,
    Snapshot,
    SnapshotInputs,
    keep_buses,
    scope_start,
    take_snapshot,
)
from batchscope.engine.sources import (
    CACHE_BYTES,
    OpenCancelled,
    SourceError,
)
from batchscope.engine.worker import Worker, WorkerStopped
from batchscope.experiment import Fault
from batchscope.models.weights import CheckpointError
from batchscope.profiles.profile import ProfileError


class EngineStopped(RuntimeError):
    """The engine was stopped while this was being done (e.g. the window closed)."""

    def __init__(self) -> None:
        super().__init__("the engine was stopped")


class Engine:
    def __init__(
        self,
        config: RunConfig,
        clock: Callable[[], float] = time.perf_counter,
        oom_above: int | None = None,
        run_s: float = math.inf,
    ) -> None:
        self.config = config
        self._clock = clock
        self._oom_above = oom_above
        self.run_s = run_s  # seconds its sessions play (inf: until stopped), for loop notes
        self.store = MetricsStore()
        self.mailboxes = Mailboxes(on_overwrite=self.store.record_overwrite)
        self.segments = SegmentLog()
        self._t0 = clock()
        self._stats_t0 = self._t0
        self._listeners: list[Callable[[Event], None]] = []
        self._lifecycle = threading.Lock()  # open/stop: who owns the sources and threads
        self._changes = threading.Lock()  # one live change at a time
        self._stopping = threading.Event()
        self._worker: Worker | None = None
        self._feeder = Feeder(
            self.mailboxes, lambda m: self.event("error", m), clock, seed=config.seed
        )
        self.roster = Roster(self.mailboxes, self._feeder)
        self._monitor = Monitor(self.store, self._sample, lambda m: self.event("error", m))
        self.faults = RunFaults(  # faults on cue (engine/fault_actions.py)
            self._feeder,
            self.roster,
            self.segments,
            lambda: self._opened,
            lambda: self.config,
            lambda: self.running,
            self.event,
            clock,
        )
        self.running = False
        self.recorder: Recorder | None = None
        self._load: NeighbourLoad | None = None  # real neighbours (torch backend)
        self.progress: str | None = None  # what is being decoded, and how far (or None)

    # -- lifecycle --------------------------------------------------------------

    def open(self) -> None:
        """Open sources and build the backend; raises on bad input before batching starts.

        A bad source raises SourceError unless ``skip_bad_sources`` is set, in
        which case its sessions show the error and the others run. A ``stop()``
        meanwhile makes this raise EngineStopped, with nothing left open.
        """
        config = self.config
        with self._lifecycle:
            if self._stopping.is_set():
                raise EngineStopped()
            self._worker = Worker(
                self.mailboxes, self.store, make_policy(config), self.event, self._clock
            )
            self._set_worker_knobs(config)
            self._worker.scorer = self._score
        try:
            slots = self._open_slots(config.sources or default_sources(), config)
        except BaseException:
            self._worker.stop()
            raise
        try:
            if not config.skip_bad_sources:
                for slot in slots:
                    if slot.error:
                        raise SourceError(slot.spec, slot.error)
            self._worker.swap_backend(self._build(config))
        except WorkerStopped:
            close_slots(slots)
            raise EngineStopped() from None
        except BaseException:
            close_slots(slots)
            self._worker.stop()
            raise
        with self._lifecycle:
            if self._stopping.is_set():
                close_slots(slots)
                raise EngineStopped()
            self.roster.replace_sources(slots)
        self._report_bad(slots)
        for slot in slots:
            if slot.source is not None and slot.source.note:
                self.event("info", f"{slot.spec}: {slot.source.note}")

    def start(self) -> None:
        if self._worker is None or self._worker.backend is None:
            self.open()
        self._sync_load(self.config)
        started = self._clock()
        self.store.shift_events(started - self._t0)  # what opening said is before t = 0
        self._t0 = self._stats_t0 = started
        self.segments.open(self._t0, self.config)
        self._sync_sessions()
        self._opened.start()
        self._feeder.start()
        self._monitor.start()
        self.running = True
        self.event(
            "config",
            f"start: {self.config.policy_phrase()}, {self.config.sessions} "
            f"sessions on {self.backend.label}",
        )

    def stop(self, timeout: float = 2.0) -> list[str]:
        """Stop every thread and close every source; returns within about ``timeout`` s.

        Returns the threads still alive then (:meth:`threads_alive`; empty when all
        ended), so a caller can say which did not stop rather than hang or lie.
        """
        deadline = time.monotonic() + timeout
        with self._lifecycle:
            self._stopping.set()
        was_running, self.running = self.running, False
        if was_running:
            self.segments.close(self._clock())
        self.stop_recording()
        self._feeder.stop(max(0.1, deadline - time.monotonic()))
        self._monitor.stop(max(0.1, deadline - time.monotonic()))
        if self._worker is not None:
            self._worker.stop(max(0.1, deadline - time.monotonic()))
        if self._load is not None:
            self._load.stop(max(0.1, deadline - time.monotonic()))
        with self._lifecycle:
            self.roster.close()
        return self.threads_alive()

    def threads_alive(self) -> list[str]:
        out = []
        if self._feeder.alive:
            out.append("feeder")
        if self._monitor.alive:
            out.append("monitor")
        if self._worker is not None and self._worker.alive:
            out.append("worker")
        if self.recorder is not None and self.recorder.alive:
            out.append("recorder")
        out.extend(f"camera {s.spec}" for s in self.roster.slots if s.source and s.source.alive)
        if self._load is not None and self._load.alive():
            out.append(f"{self._load.alive()} neighbour processes")
        return out

    def set_paused(self, paused: bool) -> None:
        """Pause or resume feeding and batching; paused stays paused through every live
        change and recovery (the feeder's own flag, which re-making sessions keeps)."""
        self._opened.paused = paused
        self._feeder.set_paused(paused)
        self.event("config", "paused" if paused else "resumed")

    @property
    def paused(self) -> bool:
        return bool(self._worker and self._worker.paused)

    def reset_stats(self, announce: bool = True) -> None:
        """Forget statistics; reports and histograms restart from now (e.g. after warm-up).

        A reset also opens a new segment (same config), so the live views, which
        read the current segment, restart with it; earlier segments keep their figures.
        """
        self.store.reset()
        self.mailboxes.reset_counts()
        self._stats_t0 = self._clock()
        if self.running:
            self.segments.open(self._stats_t0, self.config, caption="statistics reset")
        if announce:
            self.event("config", "statistics reset")

    # -- events and recording ---------------------------------------------------------

    def now(self) -> float:
        """Seconds since start (the time axis of every plot)."""
        return self._clock() - self._t0

    def event(self, kind: str, message: str) -> Event:
        ev = self.store.add_event(self.now(), kind, message)
        for listener in list(self._listeners):
            listener(ev)
        return ev

    def events(self) -> list[Event]:
        """The events kept so far (the newest 2000), oldest first."""
        with self.store.lock:
            return list(self.store.events)

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener(event)`` for every new event (from the thread that raised it)."""
        self._listeners.append(listener)

    def start_recording(self, folder: str | Path) -> Path:
        """Record config, events, per-item timings and timeline to ``folder`` (see recorder)."""
        if self.recorder is not None:
            raise ValueError(f"already recording to {self.recorder.folder}")
        self.recorder = Recorder(
            folder,
            self.store,
            self._t0,
            self.config.to_json(),
            lambda message: self.event("error", message),
        )
        self.event("config", f"recording to {self.recorder.folder}")
        return self.recorder.folder

    def stop_recording(self) -> Path | None:
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return None
        self.event("config", f"recording stopped: {recorder.folder}")
        return recorder.stop(self.report())

    # -- sources and sessions -----------------------------------------------------------

    def _open_slots(self, specs: tuple[str, ...], config: RunConfig) -> list[SourceSlot]:
        """Open sources; EngineStopped (with nothing left open) if ``stop()`` came meanwhile.

        Meanwhile :attr:`progress` says which file decodes and how far.
        """
        size = format_resolution(config.resolution)

        def progress(spec: str, done: int, total: int) -> None:
            self.progress = f"decoding {Path(spec).name} at {size}: {100 * done // total}%"

        try:
            return open_slots(
                specs,
                config.resolution,
                self._stopping,
                config.fit,
                progress=progress,
                run_s=self.run_s,
                paced_fps=config.fps,
            )
        except OpenCancelled:
            raise EngineStopped() from None
        finally:
            self.progress = None

    def _report_bad(self, slots: list[SourceSlot]) -> None:
        for slot in slots:
            if slot.error:
                self.event("error", f"{slot.spec}: {slot.error}")

    def _sync_sessions(self) -> None:
        self.roster.sync(self.config.sessions, self.config.fps)

    def add_source(self, spec: str) -> SourceSlot:
        """Open one more source (UI); a bad one shows its error on its sessions' rows."""
        slot = self._open_slots((spec,), self.config)[0]
        with self._lifecycle:
            if self._stopping.is_set():
                close_slots([slot])
                raise EngineStopped()
            self.roster.add(slot)
        self._report_bad([slot])
        self.config = self.config.with_changes(sources=tuple(s.spec for s in self.roster.slots))
        self._sync_sessions()
        return slot

    def remove_source(self, spec: str) -> None:
        if self.roster.remove(spec):
            self.config = self.config.with_changes(sources=tuple(s.spec for s in self.roster.slots))
            self._sync_sessions()

    @property
    def sources(self) -> list[SourceSlot]:
        return self.roster.slots

    # -- live configuration -----------------------------------------------------------

    def apply(
        self,
        new: RunConfig,
        on_done: Callable[[str | None], None] | None = None,
        caption: str = "",
        step: bool = False,
        faults: Sequence[Fault] = (),
    ) -> str | None:
        """Apply a changed config live, as one transaction; returns the error, or None.

        Blocks until the change took effect (a new backend is built and warmed up
        first) or failed. On success one ``config`` event lists the changes and a
        new segment opens, both at the instant they took effect. On failure
        nothing changed and an ``error`` event says why; an experiment ``step``
        that fails still opens a segment (same config, with the error), so its
        report says what was tried there. ``faults`` (a step's, or the Faults
        menu's) start right after the change (or its failure: the run goes on as
        before, with them), and the one segment the step opens lists both the
        change and the faults: one step, one segment. ``on_done(error)`` is called
        either way; the error is the change's, else the first fault's.
        """
        with self._changes:
            old = self.config
            changes = old.diff(new)
            error = None
            opens: tuple[RunConfig, dict[str, Any], str | None] | None = None
            if changes:
                label = ", ".join(f"{k}: {_fmt(a)} → {_fmt(b)}" for k, (a, b) in changes.items())
                wanted = {k: b for k, (_, b) in changes.items()}
                try:
                    self._transact(new, changes)
                except (EngineStopped, WorkerStopped):
                    error = "the engine was stopped"
                except Exception as exc:
                    error = str(exc) if _is_user_error(exc) else f"{type(exc).__name__}: {exc}"
                    self.event("error", f"not applied ({label}): {error}")
                    if step:
                        opens = (old, wanted, error)
                else:
                    opens = (new, wanted, None)
                    label_event = label
            elif step and caption:
                opens = (old, {}, None)
            at = self._clock()  # the step's segment opens here, its faults' clocks start here
            started, fault_error = self.faults.start(faults, at)
            if started:
                config, wanted, seg_error = opens or (self.config, {}, None)
                wanted = {**wanted, "fault": fault_changes(started)}
                caption = caption or "; ".join(f.describe() for f in started)
                opens = (config, wanted, seg_error)
            if opens is not None and self.running:
                self.segments.open(at, *opens[:2], caption, opens[2], self.faults.on())
            if changes and error is None:
                self.event("config", label_event)
            error = error or fault_error
        if on_done:
            on_done(error)
        return error

    def _transact(self, new: RunConfig, changes: dict[str, tuple[Any, Any]]) -> None:
        old = self.config
        # 1. build and check what can fail; the run goes on untouched meanwhile
        policy = make_policy(new) if new.policy != old.policy else None
        backend = self._build(new) if set(BACKEND_FIELDS) & changes.keys() else None
        slots = None
        try:
            if {"resolution", "fit", "sources"} & changes.keys():
                slots = self._reopen(new)
            # 2. swap it in, between two batches
            if backend is not None:
                self._opened.swap_backend(backend)
                backend = None  # the worker owns it now
        except BaseException:
            self._release(backend, slots)
            raise
        worker = self._opened
        if policy is not None:
            worker.set_policy(policy)
        elif set(POLICY_PARAMS[new.policy]) & changes.keys():
            worker.retune(lambda p: p.retune(new))
        if set(WORKER_FIELDS) & changes.keys():
            worker.between_batches(lambda: self._set_worker_knobs(new))
        if (
            set(DEVICE_LOAD_FIELDS) & changes.keys()
            and set(BACKEND_FIELDS).isdisjoint(changes.keys())
            and new.backend == "emulated"
        ):
            worker.between_batches(lambda: self._set_neighbours(new))
        if {*DEVICE_LOAD_FIELDS, "backend", "device"} & changes.keys():
            self._sync_load(new)
        if slots is not None:
            self._install(slots)
            self._report_bad(slots)
        self.config = new
        if set(SESSION_FIELDS) & changes.keys():
            self._sync_sessions()

    def _install(self, slots: list[SourceSlot]) -> None:
        """Swap in newly opened sources, unless a stop came meanwhile: then close them
        (the stop closed the roster already; nothing opened may outlive it)."""
        with self._lifecycle:
            if self._stopping.is_set():
                close_slots(slots)
                raise EngineStopped()
            self.roster.replace_sources(slots)

    def _release(self, backend: Backend | None, slots: list[SourceSlot] | None) -> None:
        """Give back what a failed (or stopped) transaction built and did not swap in."""
        if slots is not None:
            close_slots(slots)
        if backend is not None:
            future = self._opened.discard(backend)
            if future.done() and future.exception() is not None:  # the worker is gone
                backend.close()

    def _score(self, window: Window, detection: Any, positions: bool) -> tuple:
        """Worker thread: one delivered result against its source's ground truth."""
        session = self.roster.session(window.session)
        if session is None or not session.source.has_truth:
            return UNSCORED
        source = session.source
        truth_now = source.truth(session.current_index())
        return score(detection, source.truth(window.frame_index), truth_now, positions)

    def _set_worker_knobs(self, config: RunConfig) -> None:
        """Worker thread: the knobs it applies to every policy."""
        ms = config.drop_after_ms
        self._opened.drop_after_s = None if ms is None else ms / 1000.0

    def _sync_load(self, config: RunConfig) -> None:
        """Real neighbour processes on a real device, as many as ``config`` asks for."""
        self._load = neighbour_load(self._load, config)

    def _set_neighbours(self, config: RunConfig) -> None:
        """Worker thread: the emulated device's neighbours change between two batches."""
        backend = self.backend
        assert isinstance(backend, EmulatedBackend), "neighbours are the emulated device's"
        backend.neighbours = Neighbours(config.neighbours, config.neighbour_duty, config.seed)

    def _reopen(self, new: RunConfig) -> list[SourceSlot]:
        """The sources of ``new``; refused if one that works now would fail after the change.

        The new frame caches are decoded while the old ones play, when both fit in
        CACHE_BYTES; otherwise (long files) in their place: the sessions pause, the old
        caches are given back, the files decode again (the status says how far), and a
        failure decodes the old ones back, so memory stays within the budget.
        """
        specs = new.sources or default_sources()
        held = cache_bytes(self.roster.slots)
        if held + self.roster.cache_estimate(specs, new.resolution) <= CACHE_BYTES:
            return self.roster.refuse_broken(self._open_slots(specs, new))
        old = self.config
        self.event(
            "info",
            f"re-decoding at {format_resolution(new.resolution)} in place of the "
            f"{held / 2**20:.0f} MB frame cache: the sessions pause meanwhile",
        )
        # nothing may hold a view of the old caches: paused sessions, their windows (in
        # the mailboxes and the sessions), the backend's frame pool
        self._feeder.set_sessions([], old.fps)
        for session in self.roster.sessions():
            self.mailboxes.drop(session.id)
        self._opened.between_batches(self.backend.forget_frames)
        self.roster.release_caches()
        try:
            return self.roster.refuse_broken(self._open_slots(specs, new))
        except EngineStopped:
            raise
        except BaseException:
            self._install(self._open_slots(old.sources or default_sources(), old))
            self._sync_sessions()
            raise

    def _build(self, config: RunConfig) -> Backend:
        oom_above = self._oom_above
        try:
            return self._opened.build_backend(
                lambda cancelled: make_backend(config, oom_above, cancelled)
            )
        except BuildCancelled:
            raise EngineStopped() from None

    def inject(self, fault: Fault, caption: str = "") -> str | None:
        """Start ``fault`` now (the Faults menu); it ends by itself after ``fault.for_s``.

        Returns the error, or None. Each fault opens a segment when it starts and
        another when it ends (the run back to normal, or to the faults still on),
        and both are ``fault`` events on the time plots. Overlapping faults
        compose (:class:`~batchscope.engine.faults.ActiveFaults`).
        """
        return self.apply(self.config, caption=caption, faults=(fault,))

    def label_first_segment(
        self, changes: dict[str, Any], caption: str, faults: Sequence[Fault] = ()
    ) -> str | None:
        """Say what segment 0 stands for (an experiment's step 0) and start that step's
        faults in it: one step, one segment. Returns the first fault's error, if any."""
        with self._changes:
            started, error = self.faults.start(faults, self._clock())
            if started:
                changes = {**changes, "fault": fault_changes(started)}
            self.segments.relabel(0, changes, caption, self.faults.on())
        return error

    @property
    def _opened(self) -> Worker:
        """The worker; :meth:`open` makes it first, before anything that uses it."""
        assert self._worker is not None, "the engine is not open"
        return self._worker

    @property
    def backend(self) -> Backend:
        backend = self._opened.backend
        assert backend is not None, "open() swaps the first backend in"
        return backend

    # -- reading -----------------------------------------------------------------------

    def _sample(self) -> TimelineSample:
        return sample_timeline(
            self.store,
            [s.id for s in self.roster.sessions()],
            self.backend.memory(),
            self._clock(),
            self._t0,
            self._stats_t0,
        )

    def snapshot(self, scope: str = "segment", segment: int | None = None) -> Snapshot:
        """What the UI draws; latencies and batch sizes cover ``scope`` (see SCOPES).

        ``segment``: with the segment scope, that segment's measured interval
        (a closed one: from its settling second's end to its end) instead of the
        current one.
        """
        worker = self._opened
        backend = self.backend
        now = self._clock()
        segments = self.segments.all()
        if segment is not None and not 0 <= segment < len(segments):
            raise ValueError(f"segment {segment}: the run has {len(segments)} segments")
        seg = segments[segment] if segment is not None else (segments[-1] if segments else None)
        until = seg.end if segment is not None and seg is not None else None
        view = None
        if seg is not None:
            view = SegmentView(
                seg.index, seg.start - self._t0, seg.caption, dict(seg.changes), seg.settling(now)
            )
        since = scope_start(scope, seg, now, self._stats_t0)
        sessions = self.roster.sessions()
        at = SnapshotInputs(
            sessions=sessions,
            overwritten=self.mailboxes.overwritten(),
            config=self.config,
            device=DeviceView(
                backend.label,
                backend.weights,
                backend.draws_detections,
                worker.policy.describe(),
                worker.oom_cap,
            ),
            now=now,
            t0=self._t0,
            running=self.running,
            paused=self.paused,
            since=since,
            scope=scope,
            segment=view,
            until=until,
            expired=self.mailboxes.expired(),
            stalled=frozenset(s.id for s in sessions if self.faults.stalled(s.id)),
        )
        return take_snapshot(self.store, at)

    def keep_buses(self, buses: dict[int, BusRecords], snap: Snapshot | None = None) -> None:
        """Keep the device's last BUS_S s for every segment that runs or ends inside them
        (:func:`~batchscope.engine.snapshot.keep_buses`); ``snap``: a snapshot just taken
        (the app's tick has one), else a new one."""
        keep_buses(buses, self.segments.all(), snap if snap is not None else self.snapshot())

    def report(self, kind: str = "run") -> dict[str, Any]:
        """The JSON report over the interval since the last statistics reset (or start)."""
        stalled = self.faults.stalled
        infos = [_info(s, shown_state(s, stalled(s.id))) for s in self.roster.sessions()]
        return run_report(
            kind,
            self.config,
            self.store,
            self.mailboxes,
            infos,
            self.segments.all(),
            self._worker.backend if self._worker else None,
            self._clock(),
            self._t0,
            self._stats_t0,
            [_info(s, state) for s, state in self.roster.retired()],
        )


def _info(session: Session, state: str) -> SessionInfo:
    """What a report says of ``session`` (in ``state``)."""
    source = session.source
    return SessionInfo(
        session.id, source.spec, state, session.error, source.own_fps, source.has_truth
    )


def _is_user_error(exc: BaseException) -> bool:
    """A setting the user can fix (its message is one line naming it), not a bug."""
    return isinstance(
        exc, ConfigError | SourceError | BackendError | ProfileError | CheckpointError
    )


def _fmt(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"
    return str(value)
