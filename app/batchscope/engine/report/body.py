"""The JSON report's body (contract shared by ``run`` and ``simulate``): sessions, overall,
and the figures read off it (overwritten and expired %, mean batch time)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.policies import REASONS
from batchscope.engine.stats import (
    accuracy_summary,
    batch_sizes,
    busy_fraction,
    fps_figures,
    group_sessions,
    host_late_summaries,
    host_late_summary,
    latencies_ms,
    latency_summaries,
    latency_summary,
    pick,
    stage_means,
    stage_means_grouped,
)
from batchscope.urls import mask_credentials


@dataclass(frozen=True)
class SessionInfo:
    id: int
    source: str
    state: str = "running"
    error: str | None = None
    source_fps: float | None = None  # the source's own frame rate, where it has one
    has_truth: bool = False  # its source knows the ball's position: results are scored
    # a network stream's own figures (StreamStatus.as_json: rate declared and arriving,
    # jitter, age, reconnects), None for every other source
    stream: Mapping[str, Any] | None = None


def build_report(
    kind: str,
    config: RunConfig,
    sessions: Sequence[SessionInfo],
    items: np.ndarray,
    batches: np.ndarray,
    overwritten: Mapping[int, int],
    duration_s: float,
    memory: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    expired: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """A report in the schema of ARCHITECTURE.md from item and batch records.

    ``items`` and ``batches`` are arrays of :data:`ITEM_DTYPE` / :data:`BATCH_DTYPE`
    covering the measured interval of ``duration_s`` seconds; ``expired``: windows
    discarded per session for waiting past ``drop_after_ms`` (none when not given).
    """
    expired = expired or {}
    per_session = []
    states_and_fps = []
    by_session, spans, count = group_sessions(items)  # one sort, not one pass per session
    latency = latency_summaries(latencies_ms(by_session), count)  # each group's, in one pass
    stages = stage_means_grouped(by_session, count)
    host_late = host_late_summaries(by_session, count)
    nothing = by_session[:0]  # a session that delivered nothing: every figure 0
    none = (latency_summary([]), stage_means(nothing), host_late_summary(nothing))
    for s in sessions:
        k, lo, hi = spans.get(s.id, (-1, 0, 0))
        mine = by_session[lo:hi]
        fps = len(mine) / duration_s if duration_s > 0 else 0.0
        states_and_fps.append((s.state, fps))
        entry: dict[str, Any] = {
            "id": s.id,
            "source": mask_credentials(s.source),
            "fps": round(fps, 3),
            "delivered": len(mine),
            "overwritten": int(overwritten.get(s.id, 0)),
            "expired": int(expired.get(s.id, 0)),
            "latency_ms": dict(latency[k] if k >= 0 else none[0]),
            "stages_ms": dict(stages[k] if k >= 0 else none[1]),
            "host_late_ms": dict(host_late[k] if k >= 0 else none[2]),
        }
        if s.has_truth:
            entry["accuracy"] = accuracy_summary(mine)
        if s.stream is not None:  # live: never paced, so no paced_fps
            entry["stream"] = dict(s.stream)
        elif s.source_fps is not None:
            paced = config.fps or s.source_fps
            entry["source_fps"] = round(s.source_fps, 3)
            entry["paced_fps"] = round(paced, 3)
            if abs(paced - s.source_fps) > 0.01:
                entry["pacing"] = (
                    f"paced at {paced:g} fps; its own rate is {s.source_fps:g} fps "
                    f"(plays {paced / s.source_fps:.2f}× as fast)"
                )
        if s.state != "running":
            entry["state"] = s.state
        if s.error:
            entry["error"] = s.error
        per_session.append(entry)
    why, times = np.unique(batches["reason"], return_counts=True)
    reasons = {REASONS[r]: n for r, n in zip(why.tolist(), times.tolist(), strict=True) if r}
    overall = {
        "throughput_wps": round(len(items) / duration_s, 3) if duration_s > 0 else 0.0,
        **fps_figures(states_and_fps),
        "overwritten": int(sum(overwritten.get(s.id, 0) for s in sessions)),
        "expired": int(sum(expired.get(s.id, 0) for s in sessions)),
        "latency_ms": latency_summary(latencies_ms(items)),
        "host_late_ms": host_late_summary(items),
        "batch_sizes": batch_sizes(batches["size"]),
        "batch_reasons": {r: reasons[r] for r in REASONS if r in reasons},
        "busy": round(
            busy_fraction(float(batches["compute_s"].sum()), duration_s, config.devices), 4
        ),
    }
    padded = int(batches["padded"].sum())
    if padded:  # a fixed batch shape ran short batches: the rows it filled with nothing
        rows = padded + int(batches["size"].sum())
        overall["padded"] = {"windows": padded, "share": round(padded / rows, 4)}
    truth = [s.id for s in sessions if s.has_truth]
    if truth:
        overall["accuracy"] = accuracy_summary(pick(items, np.isin(items["session"], truth)))
    report: dict[str, Any] = {
        "kind": kind,
        "config": config.to_json(),
        "sessions": per_session,
        "overall": overall,
        "memory": dict(memory or {}),
        "policy_label": config.policy_label(),
    }
    if extra:
        report.update(extra)
    return report


def overwritten_pct(report: Mapping[str, Any]) -> float:
    """Overwritten windows as a share of all windows the sessions published."""
    over = report["overall"]["overwritten"]
    delivered = sum(s["delivered"] for s in report["sessions"])
    total = over + delivered
    return 100.0 * over / total if total else 0.0


def expired_pct(report: Mapping[str, Any]) -> float:
    """Expired windows as a share of all windows the sessions published."""
    o = report["overall"]
    expired = o.get("expired", 0)
    total = o["overwritten"] + expired + sum(s["delivered"] for s in report["sessions"])
    return 100.0 * expired / total if total else 0.0


def mean_batch_ms(report: Mapping[str, Any]) -> float:
    """Mean compute time of a batch (ms): busy time over the batches run."""
    o = report["overall"]
    batches = sum(o["batch_sizes"].values())
    if not batches:
        return 0.0
    duration = report["config"].get("duration_s") or 0.0
    devices = report["config"].get("devices") or 1  # busy is the devices' mean
    return 1000.0 * o["busy"] * duration * devices / batches
