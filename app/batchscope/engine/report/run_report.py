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
from batchscope.engine.report.body import SessionInfo, build_report
from batchscope.engine.report.segment import segment_report
from batchscope.engine.routing import devices_label
from batchscope.engine.segments import Segment
from batchscope.engine.session import Mailboxes
from batchscope.engine.stats import device_entries, pick
from batchscope.experiment import Experiment
from batchscope.urls import mask_credentials

#: How finely a run's host lateness is kept for the simulator to replay: its quantiles.
JITTER_QUANTILES = 101


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
            (items["late"] - items["host_wait"] - items["host_device"]) * 1000.0
        ),
        "wake_ms": quantiles(batches["late"] * 1000.0),
        "device_ms": quantiles(batches["device_late"] * 1000.0),
    }


def run_report(
    kind: str,
    config: RunConfig,
    store: MetricsStore,
    mailboxes: Mailboxes,
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
    """
    ever = sorted([*sessions, *retired], key=lambda s: s.id)
    with store.lock:
        items = store.items.view()
        batches = store.batches.view()
        events = [e.__dict__ for e in store.events]
        history = (store.items.retained(), store.batches.retained(), store.overwrites.retained())
        expiries = store.expiries.retained()
    # what was delivered in the interval (the rings were cleared when it began; the
    # filter keeps that true however they were read): counting by arrival instead
    # would drop the windows waiting at the reset and under-count by latency/duration
    items = pick(items, items["result"] >= stats_t0)
    batches = pick(batches, batches["end"] >= stats_t0)
    report = build_report(
        kind,
        config,
        sessions,
        items,
        batches,
        mailboxes.overwritten(),
        now - stats_t0,
        backend.memory() if backend else {},
        extra={
            "device_label": backend.label if backend else config.device_label,
            "weights": backend.weights if backend else "",
            "events": events,
            "host_jitter": host_jitter(items, batches),
            "segments": [
                segment_report(seg, ever, *history, now, t0, kind, expiries) for seg in segments
            ],
        },
        expired=mailboxes.expired(),
    )
    if devices:
        report["device_label"] = devices_label(devices, config.router)
        report["router"] = config.router
        report["devices"] = device_entries(items, batches, devices, now - stats_t0, pinned)
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
