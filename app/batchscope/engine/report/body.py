"""The JSON report's body (contract shared by ``run`` and ``simulate``): sessions, overall,
and the figures read off it (overwritten and expired %, mean batch time)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.stats import busy_fraction, fps_figures
from batchscope.engine.tally import RecordFigures, Tally
from batchscope.urls import mask_credentials

#: Where a report's figures come from: a live run's tally, or records (the simulator's).
Figures: TypeAlias = Tally | RecordFigures
#: A session present this much less than the interval says so (``present_s``): a clock's
#: reading apart from the interval's ends, not a late join
PRESENT_TOLERANCE_S = 0.001


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
    present_s: Mapping[int, float] | None = None,
) -> dict[str, Any]:
    """A report in the schema of ARCHITECTURE.md from item and batch records.

    ``items`` and ``batches`` are arrays of :data:`ITEM_DTYPE` / :data:`BATCH_DTYPE`
    covering the measured interval of ``duration_s`` seconds; ``expired``: windows
    discarded per session for waiting past ``drop_after_ms`` (none when not given).
    """
    figures = RecordFigures(items, batches, overwritten, expired)
    return report_body(kind, config, sessions, figures, duration_s, memory, extra, present_s)


def report_body(
    kind: str,
    config: RunConfig,
    sessions: Sequence[SessionInfo],
    figures: Figures,
    duration_s: float,
    memory: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    present_s: Mapping[int, float] | None = None,
) -> dict[str, Any]:
    """The report of ``figures`` (a live :class:`Tally` or :class:`RecordFigures`) over an
    interval of ``duration_s`` seconds.

    A session's fps divides what it delivered by the seconds it existed in the
    interval: ``present_s[id]`` where given (a session that joined late or left early;
    its entry then says so with ``present_s``), else ``duration_s``.
    """
    present_s = present_s or {}
    overwritten, expired = figures.overwritten(), figures.expired()
    per_session = []
    states_and_fps = []
    for s in sessions:
        entry, fps = _session_entry(s, config, figures, duration_s, present_s, overwritten, expired)
        states_and_fps.append((s.state, fps))
        per_session.append(entry)
    windows = figures.windows()
    overall = {
        "throughput_wps": round(windows / duration_s, 3) if duration_s > 0 else 0.0,
        **fps_figures(states_and_fps),
        "overwritten": int(sum(overwritten.get(s.id, 0) for s in sessions)),
        "expired": int(sum(expired.get(s.id, 0) for s in sessions)),
        "latency_ms": figures.overall_latency(),
        "host_late_ms": figures.overall_host_late(),
        "batch_sizes": figures.batch_sizes(),
        "batch_reasons": figures.batch_reasons(),
        "busy": round(busy_fraction(figures.compute_s(), duration_s, config.devices), 4),
    }
    padded, rows = figures.padded_rows()
    if padded:  # a fixed batch shape ran short batches: the rows it filled with nothing
        overall["padded"] = {"windows": padded, "share": round(padded / rows, 4)}
    truth = [s.id for s in sessions if s.has_truth]
    if truth:
        overall["accuracy"] = figures.accuracy(truth)
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


def _session_entry(
    s: SessionInfo,
    config: RunConfig,
    figures: Figures,
    duration_s: float,
    present_s: Mapping[int, float],
    overwritten: Mapping[int, int],
    expired: Mapping[int, int],
) -> tuple[dict[str, Any], float]:
    """One session's entry in the report's ``sessions``, and its fps (what it delivered
    over the seconds it was present)."""
    delivered = figures.delivered(s.id)
    present = min(present_s.get(s.id, duration_s), duration_s)
    fps = delivered / present if present > 0 else 0.0
    latency, stages, host_late = figures.session_figures(s.id)
    entry: dict[str, Any] = {
        "id": s.id,
        "source": mask_credentials(s.source),
        "fps": round(fps, 3),
        "delivered": delivered,
        "overwritten": int(overwritten.get(s.id, 0)),
        "expired": int(expired.get(s.id, 0)),
        "latency_ms": latency,
        "stages_ms": stages,
        "host_late_ms": host_late,
    }
    if present < duration_s - PRESENT_TOLERANCE_S:
        entry["present_s"] = round(present, 3)
    if s.has_truth:
        entry["accuracy"] = figures.accuracy([s.id])
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
    return entry, fps


def device_list(
    figures: Figures,
    labels: Sequence[str],
    duration_s: float,
    pinned: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """The report's ``devices`` list (one entry per device ``d``, named ``labels[d]``):
    ``sessions`` (``pinned``: the sessions pinned to it; else those it served), ``busy``
    (its share of ``duration_s`` in compute) and ``batch_sizes`` (its batches by size)."""
    return [
        {
            "device": label,
            "sessions": int(pinned[d]) if pinned is not None else figures.device_sessions(d),
            "busy": round(busy_fraction(figures.compute_s(d), duration_s), 4),
            "batch_sizes": figures.device_batch_sizes(d),
        }
        for d, label in enumerate(labels)
    ]


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
