"""The engine facade: start/stop, apply(config) live, snapshot(), report().

The UI and the CLI talk to this object only. It owns the sources, the
sessions, the feeder and worker threads and a small monitor thread that
samples the per-second timeline (fps, throughput, busy, memory) so that the
worker's hot path does not pay for it.
"""

from __future__ import annotations

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
from batchscope.engine.metrics import (
    MONITOR_PERIOD_S,
    Event,
    Latest,
    MetricsStore,
    TimelineSample,
)
from batchscope.engine.policies import make_policy
from batchscope.engine.report import SessionInfo, build_report
from batchscope.engine.roster import Roster, SourceSlot, close_slots, default_sources, open_slots
from batchscope.engine.session import Mailboxes, Session
from batchscope.engine.sources import SourceError
from batchscope.engine.stats import (
    busy_fraction,
    latencies_ms,
    latency_summary,
    live_fps,
    stage_means,
)

RECENT_ITEMS = 4096  # latencies the live histograms and stage bars use
RECENT_BATCHES_S = 10.0  # the live batch-size distribution covers the last 10 s


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
        self._listeners: list[Callable[[Event], None]] = []
        self._worker = None
        self._feeder = Feeder(self.mailboxes, self._on_source_error, clock, seed=config.seed)
        self.roster = Roster(self.mailboxes, self._feeder)
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

        slots = open_slots(self.config.sources or default_sources(), self.config.resolution)
        if not self.config.skip_bad_sources:
            for slot in slots:
                if slot.error:
                    close_slots(slots)
                    raise SourceError(slot.spec, slot.error)
        self._report_bad(slots)
        self.roster.replace_sources(slots)
        config, oom_above = self.config, self._oom_above
        self._worker = Worker(
            self.mailboxes,
            self.store,
            make_policy(config),
            lambda: make_backend(config, oom_above),
            self.event,
            self._clock,
        )
        try:
            self._worker.open()
        except Exception:
            self.roster.close()
            self._worker = None
            raise
        for slot in slots:
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
        self.roster.close()

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
        self._feeder.set_sessions([] if paused else self.roster.active(), self.config.fps)
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

    def _report_bad(self, slots: list[SourceSlot]) -> None:
        for slot in slots:
            if slot.error:
                self.event("error", f"{slot.spec}: {slot.error}")

    def _sync_sessions(self) -> None:
        self.roster.sync(self.config.sessions, self.config.fps)

    def add_source(self, spec: str) -> SourceSlot:
        """Open one more source (UI); a bad one shows its error on its sessions' rows."""
        slot = open_slots((spec,), self.config.resolution)[0]
        self._report_bad([slot])
        self.roster.add(slot)
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
            slots = open_slots(new.sources or default_sources(), new.resolution)
            self._report_bad(slots)
            self.roster.replace_sources(slots)
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
                if self.roster.has(sid)
            }
            batches = self.store.batches.tail(256)
        recent = batches[batches["end"] > now - 1.0]
        window = min(1.0, now - self._stats_t0) or 1.0
        return TimelineSample(
            t=round(now - self._t0, 3),
            fps={s.id: fps.get(s.id, 0.0) for s in self.roster.sessions()},
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
        sessions = self.roster.sessions()
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
                for s in self.roster.slots
                if s.source is not None and s.source.note
            ],
        )

    def report(self, kind: str = "run") -> dict[str, Any]:
        """The JSON report over the interval since the last statistics reset (or start)."""
        now = self._clock()
        with self.store.lock:
            items = self.store.items.view()
            batches = self.store.batches.view()
        # what was delivered in the interval (the rings were cleared when it began; the
        # filter keeps that true however they were read): counting by arrival instead
        # would drop the windows waiting at the reset and under-count by latency/duration
        items = items[items["result"] >= self._stats_t0]
        batches = batches[batches["end"] >= self._stats_t0]
        infos = [SessionInfo(s.id, s.source.spec, s.state, s.error) for s in self.roster.sessions()]
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


def _fmt(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"
    return str(value)
