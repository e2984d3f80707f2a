"""The live run's report: the interval since the last reset, and every segment.

Why apart from ``report.py``: that module turns records into the JSON schema
and is shared with the simulator; this one reads the live store (under its
lock, copying) to decide which records each part covers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.backends import Backend
from batchscope.engine.metrics import MetricsStore
from batchscope.engine.report.body import SessionInfo, device_list, report_body
from batchscope.engine.report.live_figures import LiveFigures
from batchscope.engine.routing import devices_label
from batchscope.engine.segments import Segment, presence
from batchscope.engine.stats import pick
from batchscope.experiment import Experiment
from batchscope.urls import mask_credentials

#: How finely a run's host lateness is kept for the simulator to replay: its quantiles.
JITTER_QUANTILES = 101
#: The newest windows (and batches) a report's ``host_jitter`` is taken over: minutes of
#: a run, plenty for 101 quantiles, and a report read every second (the segment table's)
#: does not sort the whole ring three times
JITTER_SAMPLE = 1 << 15


def host_jitter(items: np.ndarray, batches: np.ndarray) -> dict[str, Any]:
    """The run's measured host lateness as distributions the simulator replays
    (``simulate --host-jitter REPORT``): ``publish_ms``, how late the feeder published
    each frame; ``wake_ms``, how late the worker woke for each batch; ``device_ms``, how
    late an emulated device's timer ended each batch; each its quantiles
    0, 1, … 100 % in ms (empty when nothing was measured)."""

    def quantiles(ms: np.ndarray) -> list[float]:
        if ms.size == 0:
            return []
        qs = np.percentile(ms, np.linspace(0, 100, JITTER_QUANTILES))
        return [round(float(q), 4) for q in qs]

    return {
        "publish_ms": quantiles(
            (items["host_late"] - items["host_wait"] - items["host_device"]) * 1000.0
        ),
        "wake_ms": quantiles(batches["host_wait"] * 1000.0),
        "device_ms": quantiles(batches["host_device"] * 1000.0),
    }


def run_report(
    kind: str,
    config: RunConfig,
    store: MetricsStore,
    figures: LiveFigures,
    sessions: Sequence[SessionInfo],
    segments: Sequence[Segment],
    backend: Backend | None,
    now: float,
    t0: float,
    stats_t0: float,
    retired: Sequence[SessionInfo] = (),
    devices: Sequence[str] = (),
    pinned: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The report at ``now`` (engine clock) of a run started at ``t0``, reset at ``stats_t0``.

    ``sessions`` are the run's now; ``retired`` those a smaller count retired, as they
    ran: the segments they ran in list them (as the simulator's do). ``devices``: on
    several devices, each one's name by index (the report gains ``router`` and
    ``devices``); ``pinned``: the sessions pinned to each (router ``pinned``).

    Every figure is the run's tally's (``figures``: every window since ``stats_t0``, the
    paused time left out); ``host_jitter`` alone comes from the newest JITTER_SAMPLE
    records (a sample of the host's lateness for the simulator to replay).
    """
    ever = sorted([*sessions, *retired], key=lambda s: s.id)
    entries = figures.segment_entries(segments, ever, now, t0, kind)
    with store.lock:  # the newest records: a sample of the host's lateness (module doc)
        items = store.items.tail(JITTER_SAMPLE)
        batches = store.batches.tail(JITTER_SAMPLE)
        events = [e.__dict__ for e in store.events]
    items = pick(items, items["result"] >= stats_t0)
    batches = pick(batches, batches["end"] >= stats_t0)
    measured = max(0.0, now - stats_t0 - figures.paused_in(stats_t0, now))
    present = {
        s.id: presence(segments, s.id, stats_t0, now) - figures.paused_in(stats_t0, now)
        for s in sessions
    }
    report = report_body(
        kind,
        config,
        sessions,
        figures.run,
        measured,
        backend.memory() if backend else {},
        extra={
            "device_label": backend.label if backend else config.device_label,
            "weights": backend.weights if backend else "",
            "events": events,
            "host_jitter": host_jitter(items, batches),
            "segments": [dict(e) for e in entries],
        },
        present_s=present,
    )
    if devices:
        report["device_label"] = devices_label(devices, config.router)
        report["router"] = config.router
        report["devices"] = device_list(figures.run, devices, measured, pinned)
    if figures.missed:
        report["overall"]["missed_windows"] = figures.missed
    return report


def experiment_block(experiment: Experiment) -> dict[str, Any]:
    """The report's ``experiment`` object: what was played, with the file itself."""
    return {
        "name": experiment.name,
        "caption": experiment.caption,
        "duration": experiment.duration,
        "source": experiment.source,
        "text": mask_credentials(experiment.text),  # a stream URL's password stays out
    }
