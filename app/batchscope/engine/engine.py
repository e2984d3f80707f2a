"""The engine facade: open/start/stop, apply(config) live, snapshot(), report().

The UI and the CLI talk to this object only. It owns the roster (sources and
sessions), the feeder, the devices (device 0's worker and the others:
:mod:`batchscope.engine.run_devices`), the monitor and, while recording, the
recorder. Every thread it starts stops within ``stop(timeout)`` from any
state: opening (decoding a file), building a backend, running, paused,
recording.

A live change is a transaction (:meth:`Engine.apply`, built in
:mod:`batchscope.engine.live_change`, which holds the parts it changes): what
can fail is built first, swapped in between two batches only when all of it
worked; on failure the run stays exactly as it was and keeps delivering.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from batchscope.config import (
    RunConfig,
    format_resolution,
)
from batchscope.device.load import NeighbourLoad, neighbour_load
from batchscope.engine.accuracy import UNSCORED, score
from batchscope.engine.backends import Backend
from batchscope.engine.fault_actions import RunFaults
from batchscope.engine.feeder import Feeder
from batchscope.engine.host_check import HostProbe, LoadWatch, host_load_since, load_mark
from batchscope.engine.live_change import LiveChange
from batchscope.engine.metrics import Event, MetricsStore, TimelineSample
from batchscope.engine.monitor import Monitor, sample_timeline
from batchscope.engine.recorder import Recorder
from batchscope.engine.report.body import SessionInfo
from batchscope.engine.report.live_figures import LiveFigures
from batchscope.engine.report.run_report import run_report
from batchscope.engine.roster import (
    Roster,
    SourceSlot,
    close_slots,
    default_sources,
    open_slots,
)
from batchscope.engine.routing import devices_label, pinned_counts
from batchscope.engine.run_devices import Devices, EngineStopped
from batchscope.engine.segments import SegmentLog
from batchscope.engine.serving.dispatch import ServingWorker
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
    OpenCancelled,
    SourceError,
)
from batchscope.engine.streams import StreamSettings, StreamSource
from batchscope.engine.worker import Worker, WorkerStopped
from batchscope.experiment import Fault
from batchscope.urls import mask_credentials


class Engine:
    def __init__(
        self,
        config: RunConfig,
        oom_above: int | None = None,
        run_s: float = math.inf,
    ) -> None:
        self.config = config
        # seconds, monotonic: every instant the engine records. Not a parameter: the
        # backends stamp their batches with perf_counter, and a report over two clocks
        # read all zeros
        clock = self.clock = time.perf_counter
        self.run_s = run_s  # seconds its sessions play (inf: until stopped), for loop notes
        self.store = MetricsStore()
        self.mailboxes = Mailboxes(on_overwrite=self.store.record_overwrite)
        self.segments = SegmentLog()
        self._t0 = clock()
        # every figure of the run and its segments, read from the records as they come
        self.figures = LiveFigures(self.store, self._t0)
        self._stats_t0 = self._t0
        self._listeners: list[Callable[[Event], None]] = []
        self._lifecycle = threading.Lock()  # open/stop: who owns the sources and threads
        self._stopping = threading.Event()
        # device 0's worker (a serving engine's client while its backend is one), the
        # devices past it, the router over them, Ray's hold (engine/run_devices.py)
        self.devices = Devices(
            self.mailboxes,
            self.store,
            self.event,
            self.said,
            clock,
            self._score,
            self._stopping,
            lambda device: self.faults.active.slowdown(device),  # a device joining a fault
            lambda: [s.id for s in self.roster.sessions()],
            oom_above,
        )
        self._feeder = Feeder(
            self.mailboxes,
            lambda m: self.event("error", m),
            clock,
            seed=config.seed,
            on_stream=self._stream_changed,
        )
        self.roster = Roster(self.mailboxes, self._feeder)
        self._monitor = Monitor(self.store, self._sample, lambda m: self.event("error", m))
        self.faults = RunFaults(  # faults on cue (engine/fault_actions.py)
            self._feeder,
            self.roster,
            self.segments,
            self.devices.workers,  # a slow device: the one it names, or every one
            lambda: self.config,
            lambda: self.running,
            self.event,
            clock,
        )
        self.running = False
        self.recorder: Recorder | None = None
        self._load: NeighbourLoad | None = None  # real neighbours (torch backend)
        self.progress: str | None = None  # what is being decoded, and how far (or None)
        self.on_progress: Callable[[str], None] | None = None  # hears ``said`` (the CLI)
        # live changes, one at a time (engine/live_change.py), on the parts they change
        self._live = LiveChange(
            self,
            self.devices,
            self.roster,
            self.segments,
            self.faults,
            self._feeder,
            self.mailboxes,
            clock,
            self.event,
        )
        self.host_probe: HostProbe | None = None  # the timers' check at the start
        self._load_mark = load_mark()  # the machine's load since the statistics began
        self._load_watch = LoadWatch()  # and over the last seconds (the status bar's)
        self._paused_snapshot: tuple[tuple, Snapshot] | None = None  # the last, while paused

    # -- lifecycle --------------------------------------------------------------

    def open(self) -> None:
        """Open sources and build the backend; raises on bad input before batching starts.

        A bad source raises SourceError unless ``skip_bad_sources`` is set, in
        which case its sessions show the error and the others run. A ``stop()``
        meanwhile makes this raise EngineStopped, with nothing left open.
        """
        config, devices = self.config, self.devices
        with self._lifecycle:
            if self._stopping.is_set():
                raise EngineStopped()
            if self.host_probe is None:  # while the sources open: it costs no time
                self.host_probe = HostProbe(self._stopping)
            worker = devices.open(config)
        try:
            slots = self.open_sources(config.sources or default_sources(), config)
        except BaseException:
            worker.stop()
            raise
        try:
            if not config.skip_bad_sources:
                for slot in slots:
                    if slot.error:
                        raise SourceError(slot.spec, slot.error)
            devices.swap_in(devices.build_backend(config))
            devices.swap_others(devices.build_others(config), config, False, self.running)
        except WorkerStopped:
            close_slots(slots)
            devices.others.stop()
            raise EngineStopped() from None
        except BaseException:
            close_slots(slots)
            devices.others.stop()
            worker.stop()
            raise
        self.install_sources(slots)
        for slot in slots:
            if slot.source is not None and slot.source.note:
                self.event("info", f"{slot.spec}: {slot.source.note}")

    def start(self) -> None:
        if not self.devices.opened or self.devices.worker.backend is None:
            self.open()
        self.sync_load(self.config)
        started = self.clock()
        self.store.shift_events(started - self._t0)  # what opening said is before t = 0
        self._t0 = self._stats_t0 = started
        self.figures.reset(started)
        self.figures.bind(self._report_sessions, started)
        self.segments.open(self._t0, self.config)
        self.sync_sessions()
        self.worker.start()
        self.devices.others.start()
        self._feeder.start()
        self._monitor.start()
        self.running = True
        self.event(
            "config",
            f"start: {self.config.policy_phrase()}, {self.config.sessions} "
            f"sessions on {self.where}",
        )

    def stop(self, timeout: float = 2.0) -> list[str]:
        """Stop every thread and close every source, within ``timeout`` s in all.

        One deadline for every wait, not one per thread: the sources' captures and the
        devices' workers (those a build made included: their build is cancelled) are
        told first and wind down together, so a stalled stream's read, which nothing
        can cut short, costs the others nothing. A serving engine's processes get
        SERVING_STOP_S more. Returns the threads still alive then
        (:meth:`threads_alive`; empty when all ended), so a caller can say which did
        not stop rather than hang or lie; each ends by itself later.
        """
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        with self._lifecycle:
            self._stopping.set()
            self.roster.signal_stop()
        was_running, self.running = self.running, False
        if was_running:
            self.segments.close(self.clock())
        self.stop_recording()
        self._feeder.stop(left())
        self._monitor.stop(left())
        self.devices.stop(left)
        if self._load is not None:
            self._load.stop(left())
        self.devices.release_ray()  # the last engine out stops Ray's processes
        with self._lifecycle:
            self.roster.close(left())
        if self.host_probe is not None:
            self.host_probe.wait(left())  # it ends on the stop event
        return self.threads_alive()

    def threads_alive(self) -> list[str]:
        out = []
        if self._feeder.alive:
            out.append("feeder")
        if self._monitor.alive:
            out.append("monitor")
        out.extend(self.devices.threads_alive())
        if self.host_probe is not None and self.host_probe.alive:
            out.append("host timer probe")
        if self.recorder is not None and self.recorder.alive:
            out.append("recorder")
        out.extend(
            f"capture of {s.source.name}" for s in self.roster.slots if s.source and s.source.alive
        )
        if self._load is not None and self._load.alive():
            out.append(f"{self._load.alive()} neighbour processes")
        return out

    def set_paused(self, paused: bool) -> None:
        """Pause or resume feeding and batching; paused stays paused through every live
        change and recovery (the feeder's own flag, which re-making sessions keeps)."""
        if paused == self.paused:
            return
        self.worker.paused = paused
        self.devices.others.each(lambda w: setattr(w, "paused", paused))
        self._feeder.set_paused(paused)
        if paused:
            # paused time is never latency: the windows waiting now would count the pause
            # in theirs, so they go (neither overwritten nor expired: nobody served them
            # late); the next windows are made after the resume
            self.figures.pause(self.clock())
            for session in self.roster.sessions():
                self.mailboxes.drop(session.id)
        else:
            self.figures.resume(self.clock())
        self.event("config", "paused" if paused else "resumed")

    @property
    def paused(self) -> bool:
        return self.devices.paused

    def reset_stats(self, announce: bool = True, open_segment: bool = True) -> None:
        """Forget statistics; reports and histograms restart from now (e.g. after warm-up).

        A reset also opens a new segment (same config), so the live views, which
        read the current segment, restart with it; earlier segments keep their figures.
        ``open_segment`` False: the caller opens one at this instant (an experiment's
        start: ``LiveChange.apply`` with ``fresh``).
        """
        self.store.reset()
        self.mailboxes.reset_counts()
        client = self.devices.client
        if client is not None:
            client.reset()
        self._load_mark = load_mark()
        for slot in self.roster.slots:
            if isinstance(slot.source, StreamSource):
                slot.source.reset_counts()
        self._stats_t0 = self.clock()
        self.figures.reset(self._stats_t0)
        if self.running and open_segment:
            self.segments.open(self._stats_t0, self.config, caption="statistics reset")
        if announce:
            self.event("config", "statistics reset")

    # -- events and recording ---------------------------------------------------------

    def said(self, message: str) -> None:
        """What a slow start is doing (a serving engine's: seconds): an ``info`` event, and
        ``on_progress`` (the terminal's line) if set."""
        self.event("info", message)
        if self.on_progress is not None:
            self.on_progress(message)

    def now(self) -> float:
        """Seconds since start (the time axis of every plot)."""
        return self.clock() - self._t0

    def event(self, kind: str, message: str) -> Event:
        ev = self.store.add_event(self.now(), kind, mask_credentials(message))
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

    def open_sources(self, specs: tuple[str, ...], config: RunConfig) -> list[SourceSlot]:
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
                stream=StreamSettings.of(config),
            )
        except OpenCancelled:
            raise EngineStopped() from None
        finally:
            self.progress = None

    def _stream_changed(self, source: StreamSource, lost: bool, phrase: str) -> None:
        """A stream's capture thread: it was lost (its sessions reconnect) or is back.

        A fault that happened by itself: a ``fault`` event marks it on the plots, and a
        segment opens at it, as at the start and end of a fault on cue.
        """
        self.event("fault", phrase)
        if self.running:
            self.segments.open(self.clock(), self.config, {}, phrase, faults=self.faults.on())

    def _report_bad(self, slots: list[SourceSlot]) -> None:
        for slot in slots:
            if slot.error:
                self.event("error", f"{slot.spec}: {slot.error}")

    def sync_sessions(self) -> None:
        self.roster.sync(self.config.sessions, self.config.fps)
        self.devices.repin()

    def add_source(self, spec: str) -> SourceSlot:
        """Open one more source (UI) as a live change (a segment opens); a bad one shows
        its error on its sessions' rows."""
        slot = self._live.add_source(spec)
        self._report_bad([slot])
        return slot

    def remove_source(self, spec: str) -> None:
        """Close ``spec`` (not the last source) as a live change (a segment opens)."""
        self._live.remove_source(spec)

    def add_slot(self, slot: SourceSlot) -> None:
        """Play an opened source, unless a stop came meanwhile: then close it (the stop
        closed the roster already; nothing opened may outlive it)."""
        with self._lifecycle:
            if self._stopping.is_set():
                close_slots([slot])
                raise EngineStopped()
            self.roster.add(slot)

    @property
    def sources(self) -> list[SourceSlot]:
        return self.roster.slots

    # -- live configuration (the transaction: engine/live_change.py) -------------------

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

        ``change``: the fields it changes, made on the config of the moment under
        the one lock every writer of ``config`` takes; a whole RunConfig sets
        every field. ``fresh``: then start over from it as a fresh run would (an
        experiment's start; :meth:`LiveChange.apply
        <batchscope.engine.live_change.LiveChange.apply>`).
        """
        return self._live.apply(change, on_done, caption, step, faults, fresh)

    def inject(self, fault: Fault, caption: str = "") -> str | None:
        """Start ``fault`` now (the Faults menu); it ends by itself after ``fault.for_s``.

        Returns the error, or None. Each fault opens a segment when it starts and
        another when it ends (the run back to normal, or to the faults still on),
        and both are ``fault`` events on the time plots. Overlapping faults
        compose (:class:`~batchscope.engine.faults.ActiveFaults`).
        """
        return self.apply({}, caption=caption, faults=(fault,))

    def label_segment(
        self, index: int, changes: dict[str, Any], caption: str, faults: Sequence[Fault] = ()
    ) -> str | None:
        """Say what segment ``index`` stands for (an experiment's step 0, in the segment it
        started in) and start that step's faults in it: one step, one segment. Returns the
        first fault's error, if any."""
        return self._live.label_segment(index, changes, caption, faults)

    def install_sources(self, slots: list[SourceSlot]) -> None:
        """Swap in newly opened sources, unless a stop came meanwhile: then close them
        (the stop closed the roster already; nothing opened may outlive it)."""
        with self._lifecycle:
            if self._stopping.is_set():
                close_slots(slots)
                raise EngineStopped()
            self.roster.replace_sources(slots)
        self._report_bad(slots)

    def _score(self, window: Window, detection: Any, positions: bool) -> tuple:
        """Worker thread: one delivered result against its source's ground truth."""
        session = self.roster.session(window.session)
        if session is None or not session.source.has_truth:
            return UNSCORED
        source = session.source
        truth_now = source.truth(session.current_index())
        return score(detection, source.truth(window.frame_index), truth_now, positions)

    def workers(self) -> list[Worker]:
        """Every device's worker, device 0 first (one unless several devices run in
        BatchScope's worker)."""
        return self.devices.workers()

    def sync_load(self, config: RunConfig) -> None:
        """Real neighbour processes on a real device, as many as ``config`` asks for."""
        self._load = neighbour_load(self._load, config)

    @property
    def worker(self) -> ServingWorker:
        """Device 0's worker; :meth:`open` makes it first, before anything that uses it."""
        return self.devices.worker

    @property
    def backend(self) -> Backend:
        return self.devices.backend

    @property
    def where(self) -> str:
        """Where the run runs, as the status line, the events and the plots' titles say it:
        the backend's label, or every device's with the router when BatchScope's worker runs
        on several (the first device's backend alone would name one of them)."""
        config = self.config
        if config.devices > 1 and not config.serving:
            return devices_label(config.device_names(), config.router)
        return self.backend.label

    # -- reading -----------------------------------------------------------------------

    def _sample(self) -> TimelineSample:
        """The monitor's tick: the figures read the new records, then the timeline's sample."""
        self.figures.update(self.segments.all(), self.clock())
        return sample_timeline(
            self.store,
            [s.id for s in self.roster.sessions()],
            self.backend.memory(),
            self.clock(),
            self._t0,
            self._stats_t0,
            self.config.devices,
        )

    def snapshot(self, scope: str = "segment", segment: int | None = None) -> Snapshot:
        """What the UI draws; latencies and batch sizes cover ``scope`` (see SCOPES).

        ``segment``: with the segment scope, that segment's measured interval
        (a closed one: from its settling second's end to its end) instead of the
        current one.
        """
        worker = self.worker
        backend = self.backend
        now = self.clock()
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
                self.where,
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
        names, pinned = self._devices_named()
        if names:
            at = replace(at, devices=names, pinned=pinned)
        # while paused no record comes: the figures are the last ones, not recomputed
        # (a paused window cost a core at 16 sessions); the time and timeline move on
        key = (scope, segment, self.config, len(segments), self._records_written())
        cached = self._paused_snapshot
        if self.paused and cached is not None and cached[0] == key:
            with self.store.lock:
                timeline = list(self.store.timeline)
            return replace(cached[1], t=now - self._t0, timeline=timeline, fresh=False)
        snap = replace(take_snapshot(self.store, at), host_load=self._load_watch.now())
        self._paused_snapshot = (key, snap) if self.paused else None
        return snap

    def _records_written(self) -> tuple[int, ...]:
        store = self.store
        return tuple(r.total for r in (store.items, store.batches, store.overwrites))

    def keep_buses(self, buses: dict[int, BusRecords], snap: Snapshot | None = None) -> None:
        """Keep the device's last BUS_S s for every segment that runs or ends inside them
        (:func:`~batchscope.engine.snapshot.keep_buses`); ``snap``: a snapshot just taken
        (the app's tick has one), else a new one."""
        keep_buses(buses, self.segments.all(), snap if snap is not None else self.snapshot())

    def _report_sessions(self) -> list[SessionInfo]:
        """Every session the run has had, as a report lists them: the current ones in the
        state they show, the retired ones in the state they ran in."""
        stalled = self.faults.stalled
        paused = self.paused
        infos = [_info(s, shown_state(s, stalled(s.id), paused)) for s in self.roster.sessions()]
        infos += [_info(s, state) for s, state in self.roster.retired()]
        return sorted(infos, key=lambda s: s.id)

    def report(self, kind: str = "run") -> dict[str, Any]:
        """The JSON report over the interval since the last statistics reset (or start)."""
        current = {s.id for s in self.roster.sessions()}
        infos = self._report_sessions()
        report = run_report(
            kind,
            self.config,
            self.store,
            self.figures,
            [s for s in infos if s.id in current],
            self.segments.all(),
            self.devices.worker.backend if self.devices.opened else None,
            self.clock(),
            self._t0,
            self._stats_t0,
            [s for s in infos if s.id not in current],
            *self._devices_named(),
        )
        probe = self.host_probe.result if self.host_probe is not None else None
        if probe is not None:
            report["host_probe"] = probe
        report["host_load"] = host_load_since(self._load_mark)
        client = self.devices.client
        if client is not None:
            report["serving"] = client.report()
        elif "devices" in report:  # BatchScope's workers: each device's own memory
            for entry, worker in zip(report["devices"], self.workers(), strict=False):
                if worker.backend is not None:
                    entry["memory"] = device_memory(worker.backend)
        return report

    def _devices_named(self) -> tuple[list[str], list[int] | None]:
        """On several devices, each one's name by index (BatchScope's workers, or the
        serving engine's replicas that answered), and the sessions pinned to each (router
        ``pinned``); nothing on one device."""
        if not self.devices.opened or self.config.devices == 1:
            return [], None
        client = self.devices.client
        if client is not None:
            return client.replica_labels(), None
        names = self.config.device_names()  # the simulator's names
        router = self.devices.router
        if router is None or router.kind != "pinned":
            return names, None
        return names, pinned_counts(router.pins().values(), router.devices)


def device_memory(backend: Backend) -> dict[str, float]:
    """A device's own memory figures (MB): its backend's, less the process's RSS (the
    report's ``memory`` has it once); a CUDA device's counters, an emulated one's profile
    peak."""
    return {k: round(v, 1) for k, v in backend.memory().items() if k != "rss_mb"}


def _info(session: Session, state: str) -> SessionInfo:
    """What a report says of ``session`` (in ``state``)."""
    source = session.source
    stream = source.status().as_json() if isinstance(source, StreamSource) else None
    return SessionInfo(
        session.id, source.spec, state, session.error, source.own_fps, source.has_truth, stream
    )
