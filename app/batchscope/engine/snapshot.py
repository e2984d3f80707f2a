"""What the UI draws, copied out of the engine at one instant.

The UI timer calls :func:`take_snapshot` 10–20 times a second while the
worker records batches, so the part done under the store's lock (which the
worker waits on) is only copying: arrays are sliced out and every figure is
computed after the lock is released.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.metrics import Latest, MetricsStore, TimelineSample
from batchscope.engine.session import Session
from batchscope.engine.stats import latencies_ms, latency_summary, live_fps, stage_means

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
class DeviceView:
    """The device as the worker has it now."""

    label: str
    weights: str
    draws_detections: bool
    policy: str  # the policy's own description (e.g. the adaptive cap)
    oom_cap: int | None


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


def take_snapshot(
    store: MetricsStore,
    sessions: Sequence[Session],
    overwritten: dict[int, int],
    config: RunConfig,
    device: DeviceView,
    now: float,
    t0: float,
    running: bool,
    paused: bool,
) -> Snapshot:
    """The snapshot at ``now`` (s on the engine's clock) of a run that started at ``t0``."""
    with store.lock:
        items = store.items.tail(RECENT_ITEMS)
        result_times = {sid: list(times) for sid, times in store.result_times.items()}
        delivered = dict(store.delivered)
        latest = dict(store.latest)
        batches = store.batches.tail(4096)
        timeline = list(store.timeline)
    recent_sizes = batches["size"][batches["end"] > now - RECENT_BATCHES_S]
    sizes, counts = np.unique(recent_sizes, return_counts=True)
    views, recent = [], {}
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
                fps=live_fps(np.asarray(result_times.get(s.id, ()), float), now),
                delivered=delivered.get(s.id, 0),
                overwritten=overwritten.get(s.id, 0),
                latency_ms=latency_summary(lat),
                stages_ms=stage_means(mine),
                latest=latest.get(s.id),
            )
        )
    last = timeline[-1] if timeline else None
    return Snapshot(
        t=now - t0,
        config=config,
        running=running,
        paused=paused,
        device=device.label,
        weights=device.weights,
        draws_detections=device.draws_detections,
        policy=device.policy,
        oom_cap=device.oom_cap,
        sessions=views,
        recent_latency_ms=recent,
        batch_sizes={int(k): int(c) for k, c in zip(sizes, counts, strict=True)},
        throughput_wps=last.throughput_wps if last else 0.0,
        busy=last.busy if last else 0.0,
        memory=last.memory if last else {},
        timeline=timeline,
    )
