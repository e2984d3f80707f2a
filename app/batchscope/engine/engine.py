"""The engine facade: start/stop, apply(config) live, snapshot(), report().

The UI and the CLI talk to this object only. It owns the sources, the
sessions, the feeder and worker threads and a small monitor thread that
samples the per-second timeline (fps, throughput, busy, memory) so that the
worker's hot path does not pay for it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from batchscope.config import BACKEND_FIELDS, POLICY_PARAMS, RunConfig
from batchscope.engine.backends import Backend, make_backend
from batchscope.engine.feeder import Feeder
from batchscope.engine.metrics import Event, Latest, MetricsStore, TimelineSample
from batchscope.engine.policies import make_policy
from batchscope.engine.report import SessionInfo, build_report
from batchscope.engine.session import Mailboxes, Session
from batchscope.engine.sources import FrameSource, SourceError, open_source
from batchscope.engine.stats import (
    busy_fraction,
    latencies_ms,
    latency_summary,
    live_fps,
    stage_means,
)
from batchscope.paths import sample_videos

MONITOR_PERIOD_S = 0.25
RECENT_ITEMS = 4096  # latencies the live histograms and stage bars use
RECENT_BATCHES_S = 10.0  # the live batch-size distribution covers the last 10 s
GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass
class SourceSlot:
    """An opened source, or the reason it could not be opened."""

    spec: str
    source: FrameSource | None = None
    error: str | None = None


@dataclass(frozen=True)
class SessionView:
    id: int
    source: str
    state: str
    error: str | None
    fps: float
    delivered: int
    overwritten: int
    latency_ms: dict[str, float]
    stages_ms: dict[str, float]
    latest: Latest | None


@dataclass(frozen=True)
class Snapshot:
    """Everything the UI draws, copied out at one instant."""

    t: float  # s since start
    config: RunConfig
    running: bool
    paused: bool
    device: str
    weights: str
    draws_detections: bool
    policy: str
    oom_cap: int | None
    sessions: list[SessionView]
    recent_latency_ms: dict[int, np.ndarray]
    batch_sizes: dict[int, int]  # batch size -> batches in the last RECENT_BATCHES_S
    throughput_wps: float
    busy: float
    memory: dict[str, float]
    timeline: list[TimelineSample]
    events: list[Event]
    notes: list[str] = field(default_factory=list)


def default_sources() -> tuple[str, ...]:
    videos = sample_videos()
    return tuple(str(p) for p in videos) if videos else ("synthetic",)


class Engine:
    def __init__(
        self,
        config: RunConfig,
        clock: Callable[[], float] = time.perf_counter,
        oom_above: int | None = None,
    ) -> None:
        self.config = config
        self._clock = clock
        self._oom_above = oom_above
        self.store = MetricsStore()
        self.mailboxes = Mailboxes()
        self._t0 = clock()
        self._stats_t0 = self._t0
        self._lock = threading.RLock()
        self._slots: list[SourceSlot] = []
        self._sessions: dict[int, Session] = {}
        self._listeners: list[Callable[[Event], None]] = []
        self._worker = None
        self._feeder = Feeder(self.mailboxes, self._on_source_error, clock, seed=config.seed)
        self._monitor_stop = threading.Event()
        self._monitor = threading.Thread(
            target=self._monitor_loop, name="batchscope-monitor", daemon=True
        )
        self.running = False
        self.recorder = None

    # -- lifecycle --------------------------------------------------------------

    def open(self) -> None:
        """Open sources and build the backend; raises on bad input before any thread starts.

        A bad source raises SourceError unless ``skip_bad_sources`` is set, in
        which case its sessions show the error and the others run.
        """
        from batchscope.engine.worker import Worker

        specs = self.config.sources or default_sources()
        self._slots = self._open_sources(specs, self.config.resolution)
        if not self.config.skip_bad_sources:
            for slot in self._slots:
                if slot.error:
                    raise SourceError(slot.spec, slot.error)
        backend = make_backend(self.config, self._oom_above)
        self._worker = Worker(
            self.mailboxes, self.store, make_policy(self.config), backend, self.event, self._clock
        )
        for slot in self._slots:
            if slot.source is not None and slot.source.note:
                self.event("info", f"{slot.spec}: {slot.source.note}")

    def start(self) -> None:
        if self._worker is None:
            self.open()
        self._t0 = self._stats_t0 = self._clock()
        self._sync_sessions()
        self._worker.start()
        self._feeder.start()
        self._monitor.start()
        self.running = True
        self.event(
            "config",
            f"start: {self.config.policy_phrase()}, {self.config.sessions} "
            f"sessions on {self._worker.backend.label}",
        )

    def stop(self, timeout: float = 2.0) -> None:
        """Stop every thread; returns within about ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        self.running = False
        self.stop_recording()
        self._feeder.stop(max(0.1, deadline - time.monotonic()))
        self._monitor_stop.set()
        if self._monitor.is_alive():
            self._monitor.join(max(0.1, deadline - time.monotonic()))
        if self._worker is not None:
            self._worker.stop(max(0.1, deadline - time.monotonic()))
        for slot in self._slots:
            if slot.source is not None:
                slot.source.close()

    def threads_alive(self) -> list[str]:
        out = []
        if self._feeder.alive:
            out.append("feeder")
        if self._monitor.is_alive():
            out.append("monitor")
        if self._worker is not None and self._worker.alive:
            out.append("worker")
        if self.recorder is not None and self.recorder.alive:
            out.append("recorder")
        return out

    def set_paused(self, paused: bool) -> None:
        self._worker.paused = paused
        self._feeder.set_sessions([] if paused else self._active(), self.config.fps)
        self.event("config", "paused" if paused else "resumed")

    @property
    def paused(self) -> bool:
        return bool(self._worker and self._worker.paused)

    def reset_stats(self, announce: bool = True) -> None:
        """Forget statistics; reports and histograms restart from now (e.g. after warm-up)."""
        self.store.reset()
        self.mailboxes.reset_counts()
        self._stats_t0 = self._clock()
        if announce:
            self.event("config", "statistics reset")

    # -- events -------------------------------------------------------------------

    @property
    def clock_origin(self) -> float:
        """The clock reading that is t = 0 s on every time axis."""
        return self._t0

    def start_recording(self, folder: str | Path) -> Path:
        """Record config, events, per-item timings and timeline to ``folder`` (see recorder)."""
        from batchscope.engine.recorder import Recorder

        if self.recorder is not None:
            raise ValueError(f"already recording to {self.recorder.folder}")
        self.recorder = Recorder(self, folder)
        self.event("config", f"recording to {self.recorder.folder}")
        return self.recorder.folder

    def stop_recording(self) -> Path | None:
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return None
        self.event("config", f"recording stopped: {recorder.folder}")
        return recorder.stop(self.report())

    def now(self) -> float:
        """Seconds since start (the time axis of every plot)."""
        return self._clock() - self._t0

    def event(self, kind: str, message: str) -> Event:
        ev = self.store.add_event(self.now(), kind, message)
        for listener in list(self._listeners):
            listener(ev)
        return ev

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener(event)`` for every new event (from the thread that raised it)."""
        self._listeners.append(listener)

    def _on_source_error(self, session: Session, message: str) -> None:
        self.event("error", f"session {session.id}: {message}")

    # -- sources and sessions -----------------------------------------------------------

    def _open_sources(
        self, specs: tuple[str, ...], resolution: tuple[int, int]
    ) -> list[SourceSlot]:
        slots = []
        for spec in specs:
            try:
                slots.append(SourceSlot(spec, open_source(spec, resolution)))
            except SourceError as exc:
                slots.append(SourceSlot(spec, error=exc.reason))
                if self.config.skip_bad_sources:
                    self.event("error", str(exc))
        return slots

    def _active(self) -> list[Session]:
        return [s for s in self._sessions.values() if s.state == "running"]

    def _sync_sessions(self) -> None:
        """Make ``config.sessions`` sessions cycling over the sources; retire the rest."""
        with self._lock:
            n = self.config.sessions
            for sid in [s for s in self._sessions if s >= n]:
                session = self._sessions.pop(sid)
                session.state = "stopped"
                self.mailboxes.drop(sid)
            for sid in range(n):
                slot = self._slots[sid % len(self._slots)] if self._slots else None
                current = self._sessions.get(sid)
                if current is not None and slot is not None and current.source is slot.source:
                    continue
                self._sessions[sid] = self._make_session(sid, slot)
            self._feeder.set_sessions(self._active(), self.config.fps)

    def _make_session(self, sid: int, slot: SourceSlot | None) -> Session:
        if slot is None or slot.source is None:
            session = Session(sid, _NoSource(slot.spec if slot else "no source"))
            session.fail(slot.error if slot else "no source opened")
            return session
        n = slot.source.n_frames or 1
        phase = int(n * ((sid * GOLDEN) % 1.0))
        return Session(sid, slot.source, phase)

    def add_source(self, spec: str) -> SourceSlot:
        """Open one more source (UI); a bad one shows its error on its sessions' rows."""
        slot = self._open_sources((spec,), self.config.resolution)[0]
        if slot.error:
            self.event("error", f"{spec}: {slot.error}")
        with self._lock:
            self._slots.append(slot)
            specs = (
                (*self.config.sources, spec)
                if self.config.sources
                else tuple(s.spec for s in self._slots)
            )
            self.config = self.config.with_changes(sources=specs)
            self._sync_sessions()
        return slot

    def remove_source(self, spec: str) -> None:
        with self._lock:
            keep = [s for s in self._slots if s.spec != spec]
            gone = [s for s in self._slots if s.spec == spec]
            if not keep:
                return
            self._slots = keep
            self.config = self.config.with_changes(sources=tuple(s.spec for s in keep))
            self._sync_sessions()
        for slot in gone:
            if slot.source is not None:
                slot.source.close()

    @property
    def sources(self) -> list[SourceSlot]:
        return list(self._slots)

    # -- live configuration -----------------------------------------------------------

    def apply(self, new: RunConfig, on_done: Callable[[str | None], None] | None = None) -> None:
        """Apply a changed config live; each change becomes a labelled event.

        Policy and session changes take effect before the next batch. A new
        backend (device, precision, resolution…) is built by the worker between
        batches; if that fails the old one keeps running, the config reverts
        and ``on_done(error message)`` is called.
        """
        old = self.config
        changes = old.diff(new)
        if not changes:
            if on_done:
                on_done(None)
            return
        label = ", ".join(f"{k}: {_fmt(a)} → {_fmt(b)}" for k, (a, b) in changes.items())
        self.config = new
        self.event("config", label)
        policy_fields = {"policy", *POLICY_PARAMS[new.policy]}
        if policy_fields & changes.keys():
            self._worker.set_policy(make_policy(new))
        if "resolution" in changes or "sources" in changes:
            old_slots = self._slots
            self._slots = self._open_sources(new.sources or default_sources(), new.resolution)
            with self._lock:
                self._sessions.clear()
            for slot in old_slots:
                if slot.source is not None:
                    slot.source.close()
        if {"sessions", "fps", "resolution", "sources"} & changes.keys():
            self._sync_sessions()
        if set(BACKEND_FIELDS) & changes.keys():

            def done(exc: Exception | None) -> None:
                if exc is not None:
                    revert = {k: getattr(old, k) for k in BACKEND_FIELDS if k != "resolution"}
                    self.config = self.config.with_changes(**revert)
                    self.event("error", f"could not switch backend: {exc}")
                if on_done:
                    on_done(None if exc is None else str(exc))

            self._worker.set_backend(lambda: make_backend(new, self._oom_above), done)
        elif on_done:
            on_done(None)

    @property
    def backend(self) -> Backend:
        return self._worker.backend

    # -- monitor ------------------------------------------------------------------------

    def _monitor_loop(self) -> None:
        while not self._monitor_stop.wait(MONITOR_PERIOD_S):
            try:
                self.store.timeline.append(self._sample())
            except Exception as exc:  # never let the monitor die silently
                self.event("error", f"monitor: {type(exc).__name__}: {exc}")

    def _sample(self) -> TimelineSample:
        now = self._clock()
        with self.store.lock:
            fps = {
                sid: live_fps(np.fromiter(times, float), now)
                for sid, times in self.store.result_times.items()
                if sid in self._sessions
            }
            batches = self.store.batches.tail(256)
        recent = batches[batches["end"] > now - 1.0]
        window = min(1.0, now - self._stats_t0) or 1.0
        return TimelineSample(
            t=round(now - self._t0, 3),
            fps={sid: fps.get(sid, 0.0) for sid in self._sessions},
            throughput_wps=float(recent["size"].sum()) / window,
            busy=busy_fraction(float(recent["compute_s"].sum()), window),
            mean_batch=float(recent["size"].mean()) if len(recent) else 0.0,
            memory=self._worker.backend.memory(),
        )

    # -- reading -----------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        now = self._clock()
        with self.store.lock:
            items = self.store.items.tail(RECENT_ITEMS)
            result_times = {
                sid: np.fromiter(t, float) for sid, t in self.store.result_times.items()
            }
            delivered = dict(self.store.delivered)
            latest = dict(self.store.latest)
            recent_batches = self.store.batches.tail(4096)
            recent_batches = recent_batches[recent_batches["end"] > now - RECENT_BATCHES_S]
            sizes = Counter(int(b) for b in recent_batches["size"])
            timeline = list(self.store.timeline)
            events = list(self.store.events)
        overwritten = self.mailboxes.overwritten()
        views, recent = [], {}
        with self._lock:
            sessions = sorted(self._sessions.values(), key=lambda s: s.id)
        for s in sessions:
            mine = items[items["session"] == s.id]
            lat = latencies_ms(mine)
            recent[s.id] = lat
            views.append(
                SessionView(
                    id=s.id,
                    source=s.source.name,
                    state=s.state,
                    error=s.error,
                    fps=live_fps(result_times.get(s.id, np.empty(0)), now),
                    delivered=delivered.get(s.id, 0),
                    overwritten=overwritten.get(s.id, 0),
                    latency_ms=latency_summary(lat),
                    stages_ms=stage_means(mine),
                    latest=latest.get(s.id),
                )
            )
        last = timeline[-1] if timeline else None
        worker = self._worker
        return Snapshot(
            t=now - self._t0,
            config=self.config,
            running=self.running,
            paused=self.paused,
            device=worker.backend.label,
            weights=worker.backend.weights,
            draws_detections=worker.backend.draws_detections,
            policy=worker.policy.describe(),
            oom_cap=worker.oom_cap,
            sessions=views,
            recent_latency_ms=recent,
            batch_sizes=dict(sorted(sizes.items())),
            throughput_wps=last.throughput_wps if last else 0.0,
            busy=last.busy if last else 0.0,
            memory=last.memory if last else {},
            timeline=timeline,
            events=events,
            notes=[
                f"{s.spec}: {s.source.note}"
                for s in self._slots
                if s.source is not None and s.source.note
            ],
        )

    def report(self, kind: str = "run") -> dict[str, Any]:
        """The JSON report over the interval since the last statistics reset (or start)."""
        now = self._clock()
        with self.store.lock:
            items = self.store.items.view()
            batches = self.store.batches.view()
        items = items[items["arrival"] >= self._stats_t0]
        batches = batches[batches["start"] >= self._stats_t0]
        with self._lock:
            infos = [
                SessionInfo(s.id, s.source.spec, s.state, s.error)
                for s in sorted(self._sessions.values(), key=lambda s: s.id)
            ]
        backend = self._worker.backend
        return build_report(
            kind,
            self.config,
            infos,
            items,
            batches,
            self.mailboxes.overwritten(),
            now - self._stats_t0,
            backend.memory(),
            extra={
                "device_label": backend.label,
                "weights": backend.weights,
                "events": [e.__dict__ for e in self.store.events],
            },
        )


class _NoSource(FrameSource):
    """Stands in for a source that failed to open, so its session can show the error."""

    def __init__(self, spec: str) -> None:
        self.spec = self.name = spec
        self.fps = 30.0
        self.source_size = self.resolution = (32, 16)

    def frame(self, index: int) -> np.ndarray:
        raise SourceError(self.spec, "not open")


def _fmt(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"
    return str(value)
