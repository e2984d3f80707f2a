"""What the UI draws, copied out of the engine at one instant.

The UI timer calls :func:`take_snapshot` 10–20 times a second while the
worker records batches, so the part done under the store's lock (which the
worker waits on) is only copying: arrays are sliced out and every figure is
computed after the lock is released.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.metrics import Latest, MetricsStore, TimelineSample
from batchscope.engine.session import Session, shown_state
from batchscope.engine.stats import (
    OVERWRITE_DTYPE,
    accuracy_summary,
    device_entries,
    group_sessions,
    host_late_summary,
    latencies_ms,
    latency_summaries,
    latency_summary,
    live_fps,
    pick,
    stage_means,
    stage_means_grouped,
)

#: What the live views (headline, histogram, stage bars, batch sizes, per-session p50)
#: cover: the current segment (the default), the last 60 s, or the whole run.
SCOPES = ("segment", "60s", "run")
SCOPE_LABELS = {"segment": "current segment", "60s": "last 60 s", "run": "whole run"}
MAX_ITEMS = 1 << 16  # the most windows a snapshot copies (15 times a second)
MAX_BATCHES = 1 << 14
BUS_S = 10.0  # the bus view's span: the device's last seconds, batch by batch
HOST_S = 5.0  # the live host indicator's span


@dataclass(frozen=True)
class BusRecords:
    """The device's last ``BUS_S`` seconds as records, for the bus view (times: engine s).

    ``items``: every window delivered (ITEM_DTYPE: its session, arrival, batch start
    and end); ``batches`` (BATCH_DTYPE, with why each left and the policy's cap);
    ``overwrites`` (OVERWRITE_DTYPE: a session's window replaced untaken, and when);
    ``expiries`` (the same, for windows dropped by ``drop_after_ms``).
    """

    items: np.ndarray
    batches: np.ndarray
    overwrites: np.ndarray
    t0: float  # the engine's clock origin: t = 0 s on the time axes
    expiries: np.ndarray = field(default_factory=lambda: np.zeros(0, OVERWRITE_DTYPE))


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
    expired: int = 0  # windows discarded for waiting past drop_after_ms
    # its windows over the scope (ITEM_DTYPE), if its source has ground truth: what
    # ``accuracy`` is summed from, on demand (the tiles ask for a few sessions, not all)
    scored_items: np.ndarray | None = field(default=None, repr=False, compare=False)
    truth: Any = None  # the ball's truth (BallTruth) in the latest window's newest frame

    @cached_property
    def accuracy(self) -> dict | None:
        """stats.accuracy_summary over the scope; None when the source has no truth."""
        return None if self.scored_items is None else accuracy_summary(self.scored_items)


#: The most sessions a view singles out (a tile each, a bus lane each); past it, the slowest.
SINGLED_OUT = 16


def slowest_sessions(sessions: Sequence[SessionView], most: int = SINGLED_OUT) -> list[SessionView]:
    """The sessions a view singles out: all of them up to ``most``; past that the slowest
    first (the ones a user waits on: errored and stopped count as 0 fps), ties by id. The
    video wall's tiles and the bus view's lanes are the same sessions."""
    if len(sessions) <= most:
        return list(sessions)
    fps = {s.id: s.fps if s.state == "running" else 0.0 for s in sessions}
    return sorted(sessions, key=lambda s: (fps[s.id], s.id))[:most]


@dataclass(frozen=True)
class DeviceView:
    """The device as the worker has it now."""

    label: str
    weights: str
    draws_detections: bool
    policy: str  # the policy's own description (e.g. the adaptive cap)
    oom_cap: int | None


@dataclass(frozen=True)
class SegmentView:
    """The segment the run is in now."""

    index: int
    start_s: float  # s since start, when its change took effect
    caption: str
    changes: dict
    settling: bool  # inside its first SETTLE_S: no figures yet


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
    recent_latency_ms: dict[int, np.ndarray]  # per session, over the scope
    batch_sizes: dict[int, int]  # batch size -> batches in the scope
    throughput_wps: float
    busy: float
    memory: dict[str, float]
    timeline: list[TimelineSample]
    scope: str = "segment"  # what recent_latency_ms, batch_sizes and session p50 cover
    segment: SegmentView | None = None
    truncated: bool = False  # the scope held more than MAX_ITEMS windows: the newest only
    bus: BusRecords | None = None  # the last BUS_S seconds of the device (live scopes only)
    # how late the host served windows over the last HOST_S seconds (p50, p99 ms): the
    # status bar's "host: quiet / busy"
    host_late_ms: dict[str, float] = field(default_factory=lambda: {"p50": 0.0, "p99": 0.0})
    # the machine's load (engine/host_check.LoadWatch): others' work or BatchScope's own
    host_load: dict[str, Any] = field(default_factory=dict)
    # on several devices, what each did over the scope: the report's ``devices`` entries
    # (engine/stats.py: device_entries), device 0 first; empty on one device
    devices: list[dict[str, Any]] = field(default_factory=list)
    # stats.latency_summary of every current session's latencies over the scope (what the
    # headline, the histogram and Capacity read: summed once here, not once each per tick)
    latency_ms: dict[str, float] = field(default_factory=lambda: latency_summary([]))
    # False: the run is paused and nothing came since the last snapshot, which this one
    # repeats (its time and timeline aside); the views have drawn it already
    fresh: bool = True

    @property
    def settling(self) -> bool:
        """The current segment has no figures yet (the views say "settling…")."""
        return self.scope == "segment" and self.segment is not None and self.segment.settling

    @property
    def scope_label(self) -> str:
        label = SCOPE_LABELS[self.scope]
        if self.scope == "segment" and self.segment is not None:
            label += f" {self.segment.index}"
        return label


def scope_start(scope: str, segment: Any, now: float, stats_t0: float) -> float:
    """Where ``scope`` starts (engine s): a segment's measured start, 60 s ago, the reset."""
    if scope == "segment":
        return segment.measure_start if segment is not None else stats_t0
    if scope == "60s":
        return max(stats_t0, now - 60.0)
    if scope == "run":
        return stats_t0
    raise ValueError(f"scope {scope!r}: choose from {', '.join(SCOPES)}")


@dataclass(frozen=True)
class SnapshotInputs:
    """What the engine hands :func:`take_snapshot` besides its store: the run at one instant.

    ``now`` and ``t0`` are s on the engine's clock (``t0``: the run's start); the
    latencies, stages and batch sizes cover what was delivered from ``since`` (the
    scope's start) up to ``until`` (a closed segment's end; None: now). ``stalled``:
    the sessions a stall fault holds (their state reads ``stalled``).
    """

    sessions: Sequence[Session]
    overwritten: dict[int, int]
    config: RunConfig
    device: DeviceView
    now: float
    t0: float
    running: bool
    paused: bool
    since: float
    scope: str = "segment"
    segment: SegmentView | None = None
    until: float | None = None
    expired: dict[int, int] | None = None
    stalled: frozenset[int] = frozenset()
    devices: Sequence[str] = ()  # on several devices, each one's name (the report's)
    pinned: Sequence[int] | None = None  # the sessions pinned to each (router pinned)


def take_snapshot(store: MetricsStore, at: SnapshotInputs) -> Snapshot:
    """The snapshot of ``store`` at ``at.now`` (see :class:`SnapshotInputs`); the fps,
    counts and timeline are the run's, the distributions its scope's."""
    with store.lock:
        if at.until is None:
            items = store.items.tail(MAX_ITEMS)
            batches = store.batches.tail(MAX_BATCHES)
        else:  # a closed segment: whatever the rings still hold of it, reset or not
            items = store.items.retained()
            batches = store.batches.retained()
        result_times = {sid: list(times) for sid, times in store.result_times.items()}
        delivered = dict(store.delivered)
        latest = dict(store.latest)
        timeline = list(store.timeline)
        overwrites = store.overwrites.tail(4096) if at.until is None else None
        expiries = store.expiries.tail(4096) if at.until is None else None
    bus = _bus_records(at, items, batches, overwrites, expiries)
    host_late = host_late_summary(pick(items, items["result"] > at.now - HOST_S))
    end = np.inf if at.until is None else at.until
    truncated = len(items) > 0 and items["result"][0] > at.since and len(items) >= MAX_ITEMS
    items = pick(items, (items["result"] >= at.since) & (items["result"] <= end))
    scoped = pick(batches, (batches["end"] >= at.since) & (batches["end"] <= end))
    sizes, counts = np.unique(scoped["size"], return_counts=True)
    devices = []
    if at.devices:  # the scope's wall time: from its start to its end, or now
        span = min(at.now, end) - at.since
        devices = device_entries(items, scoped, at.devices, span, at.pinned)
    views, recent = _session_views(at, items, result_times, delivered, latest)
    last = timeline[-1] if timeline else None
    parts = list(recent.values())
    overall = latency_summary(np.concatenate(parts) if parts else np.empty(0))
    return Snapshot(
        t=at.now - at.t0,
        config=at.config,
        running=at.running,
        paused=at.paused,
        device=at.device.label,
        weights=at.device.weights,
        draws_detections=at.device.draws_detections,
        policy=at.device.policy,
        oom_cap=at.device.oom_cap,
        sessions=views,
        recent_latency_ms=recent,
        batch_sizes={int(k): int(c) for k, c in zip(sizes, counts, strict=True)},
        throughput_wps=last.throughput_wps if last else 0.0,
        busy=last.busy if last else 0.0,
        memory=last.memory if last else {},
        timeline=timeline,
        scope=at.scope,
        segment=at.segment,
        truncated=bool(truncated),
        bus=bus,
        host_late_ms=host_late,
        devices=devices,
        latency_ms=overall,
    )


def _bus_records(
    at: SnapshotInputs,
    items: np.ndarray,
    batches: np.ndarray,
    overwrites: np.ndarray | None,
    expiries: np.ndarray | None,
) -> BusRecords | None:
    """The bus view's records: the device's last ``BUS_S`` s (None for a closed segment,
    whose overwrites and expiries were not copied)."""
    if overwrites is None or expiries is None:
        return None
    bus_start = at.now - BUS_S
    return BusRecords(
        pick(items, items["result"] > bus_start),
        pick(batches, batches["end"] > bus_start),
        pick(overwrites, overwrites["t"] > bus_start),
        at.t0,
        pick(expiries, expiries["t"] > bus_start),
    )


def _session_views(
    at: SnapshotInputs,
    items: np.ndarray,
    result_times: dict[int, list[float]],
    delivered: dict[int, int],
    latest: dict[int, Latest],
) -> tuple[list[SessionView], dict[int, np.ndarray]]:
    """Each session's row over the scope's windows (``items``), and its latencies (ms)."""
    # group the windows by session once (a stable sort keeps each one's time order),
    # instead of one pass over all of them per session
    by_session, spans, count = group_sessions(items)
    # every session's summaries in one pass over the grouped windows
    lat_all = latencies_ms(by_session)
    summaries = latency_summaries(lat_all, count)
    stages = stage_means_grouped(by_session, count)
    views: list[SessionView] = []
    recent: dict[int, np.ndarray] = {}
    for s in at.sessions:
        shown = latest.get(s.id)
        has_truth = s.source.has_truth
        k, lo, hi = spans.get(s.id, (-1, 0, 0))
        mine = by_session[lo:hi]
        lat = lat_all[lo:hi]
        recent[s.id] = lat
        views.append(
            SessionView(
                id=s.id,
                source=s.source.name,
                state=shown_state(s, s.id in at.stalled, at.paused),
                error=s.error,
                fps=live_fps(np.asarray(result_times.get(s.id, ()), float), at.now),
                delivered=delivered.get(s.id, 0),
                overwritten=at.overwritten.get(s.id, 0),
                latency_ms=summaries[k] if k >= 0 else latency_summary(lat),
                stages_ms=stages[k] if k >= 0 else stage_means(mine),
                latest=shown,
                expired=(at.expired or {}).get(s.id, 0),
                scored_items=mine if has_truth else None,
                truth=s.source.truth(shown.frame_index) if has_truth and shown else None,
            )
        )
    return views, recent


def keep_buses(buses: dict[int, BusRecords], segments: Sequence[Any], snap: Snapshot) -> None:
    """Keep the device's last BUS_S s for every segment that runs or ends inside them.

    Called about once a second while an experiment plays (the CLI's loop, the
    app's timer), with a snapshot just taken: a running segment keeps the newest
    records, a closed one the first that reach past its end, so its bus view in a
    report is its own last seconds (``segments``: the engine's, on its clock).
    """
    if snap.bus is None:
        return
    since = snap.bus.t0 + snap.t - BUS_S  # on the engine's clock, as segments are
    for seg in segments:
        if seg.end is None:
            buses[seg.index] = snap.bus
            continue
        kept = buses.get(seg.index)
        reached = kept is not None and kept.batches["end"].max(initial=-np.inf) >= seg.end
        if seg.end > since and not reached:
            buses[seg.index] = snap.bus
