"""The JSON report (contract shared by ``run`` and ``simulate``) and its text table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.policies import REASONS
from batchscope.engine.stats import (
    accuracy_summary,
    busy_fraction,
    fps_figures,
    latencies_ms,
    latency_summary,
    stage_means,
)


@dataclass(frozen=True)
class SessionInfo:
    id: int
    source: str
    state: str = "running"
    error: str | None = None
    source_fps: float | None = None  # the source's own frame rate, where it has one
    has_truth: bool = False  # its source knows the ball's position: results are scored


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
    for s in sessions:
        mine = items[items["session"] == s.id]
        fps = len(mine) / duration_s if duration_s > 0 else 0.0
        states_and_fps.append((s.state, fps))
        entry: dict[str, Any] = {
            "id": s.id,
            "source": s.source,
            "fps": round(fps, 3),
            "delivered": len(mine),
            "overwritten": int(overwritten.get(s.id, 0)),
            "expired": int(expired.get(s.id, 0)),
            "latency_ms": latency_summary(latencies_ms(mine)),
            "stages_ms": stage_means(mine),
        }
        if s.has_truth:
            entry["accuracy"] = accuracy_summary(mine)
        if s.source_fps is not None:
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
    sizes = Counter(int(b) for b in batches["size"])
    reasons = Counter(REASONS[int(r)] for r in batches["reason"] if r)
    overall = {
        "throughput_wps": round(len(items) / duration_s, 3) if duration_s > 0 else 0.0,
        **fps_figures(states_and_fps),
        "overwritten": int(sum(overwritten.get(s.id, 0) for s in sessions)),
        "expired": int(sum(expired.get(s.id, 0) for s in sessions)),
        "latency_ms": latency_summary(latencies_ms(items)),
        "batch_sizes": {str(k): sizes[k] for k in sorted(sizes)},
        "batch_reasons": {r: reasons[r] for r in REASONS if r in reasons},
        "busy": round(busy_fraction(float(batches["compute_s"].sum()), duration_s), 4),
    }
    padded = int(batches["padded"].sum())
    if padded:  # a fixed batch shape ran short batches: the rows it filled with nothing
        rows = padded + int(batches["size"].sum())
        overall["padded"] = {"windows": padded, "share": round(padded / rows, 4)}
    truth = [s.id for s in sessions if s.has_truth]
    if truth:
        overall["accuracy"] = accuracy_summary(items[np.isin(items["session"], truth)])
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


TABLE_COLUMNS = (
    ("sessions", 8),
    ("policy", 22),
    ("mean fps", 9),
    ("min fps", 8),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("overwr %", 9),
    ("thru w/s", 9),
)


def summary_row(report: Mapping[str, Any]) -> list[str]:
    cfg, overall = report["config"], report["overall"]
    return [
        str(cfg["sessions"]),
        str(report["policy_label"]),
        f"{overall['mean_fps']:.1f}",
        f"{overall['min_fps']:.1f}",
        f"{overall['latency_ms']['p50']:.1f}",
        f"{overall['latency_ms']['p99']:.1f}",
        f"{overwritten_pct(report):.1f}",
        f"{overall['throughput_wps']:.1f}",
    ]


#: Columns a table gains when one of its runs uses the setting.
OPTIONAL_COLUMNS = (
    ("seeds", ("min worst", 10), lambda r: f"{r['seeds']['min_fps_worst']:.1f}"),
    ("seeds", ("min med", 8), lambda r: f"{r['seeds']['min_fps_median']:.1f}"),
    ("seeds", ("p99 worst", 10), lambda r: f"{r['seeds']['p99_worst']:.1f}"),
    ("neighbours", ("nbrs", 5), lambda r: str(r["config"].get("neighbours", 0))),
    ("expired", ("expired %", 10), lambda r: f"{expired_pct(r):.1f}"),
    ("neighbours", ("batch ms", 9), lambda r: f"{mean_batch_ms(r):.1f}"),
)


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
    return 1000.0 * o["busy"] * duration / batches


def _uses(reports: Sequence[Mapping[str, Any]], key: str) -> bool:
    if key == "seeds":
        return all("seeds" in r for r in reports) and bool(reports)
    if key == "neighbours":
        return any(r["config"].get("neighbours") for r in reports)
    return any(r["overall"].get(key) for r in reports)


def format_table(reports: Sequence[Mapping[str, Any]]) -> str:
    """One row per report: the figures the study compared (and a run's extras)."""
    extra = [(col, cell) for key, col, cell in OPTIONAL_COLUMNS if _uses(reports, key)]
    columns = (*TABLE_COLUMNS, *(col for col, _ in extra))
    head = "".join(
        name.rjust(w) if i != 1 else "  " + name.ljust(w - 2) for i, (name, w) in enumerate(columns)
    )
    lines = [head, "-" * len(head)]
    for r in reports:
        cells = [*summary_row(r), *(cell(r) for _, cell in extra)]
        lines.append(
            "".join(
                c.rjust(w) if i != 1 else "  " + c.ljust(w - 2)
                for i, (c, (_, w)) in enumerate(zip(cells, columns, strict=True))
            )
        )
    return "\n".join(lines)


def format_sessions(report: Mapping[str, Any]) -> str:
    """Per-session table of one report (an expired column when windows expired; hit %,
    error and freshness when a source has ground truth)."""
    expiring = any(s.get("expired") for s in report["sessions"])
    scoring = any("accuracy" in s for s in report["sessions"])
    lines = [
        f"{'id':>3}  {'source':<24}{'fps':>7}{'delivered':>10}{'overwr':>8}"
        + (f"{'expired':>8}" if expiring else "")
        + f"{'p50 ms':>8}{'p99 ms':>8}{'wait':>7}{'prep':>7}{'comp':>7}{'post':>7}"
        + (f"{'hit %':>7}{'err px':>8}{'fresh px':>9}" if scoring else "")
    ]
    for s in report["sessions"]:
        lat, st = s["latency_ms"], s["stages_ms"]
        src = s["source"] if len(s["source"]) <= 23 else "…" + s["source"][-22:]
        lines.append(
            f"{s['id']:>3}  {src:<24}{s['fps']:>7.1f}{s['delivered']:>10}{s['overwritten']:>8}"
            + (f"{s.get('expired', 0):>8}" if expiring else "")
            + f"{lat['p50']:>8.1f}{lat['p99']:>8.1f}{st['wait']:>7.1f}{st['prep']:>7.1f}"
            f"{st['compute']:>7.1f}{st['post']:>7.1f}"
            + (_accuracy_cells(s.get("accuracy")) if scoring else "")
            + (f"  ERROR: {s['error']}" if s.get("error") else "")
            + (f"  ({s['pacing']})" if s.get("pacing") else "")
        )
    return "\n".join(lines)


def _accuracy_cells(accuracy: Mapping[str, Any] | None) -> str:
    def cell(value: float | None, width: int, digits: int) -> str:
        return f"{'–':>{width}}" if value is None else f"{value:>{width}.{digits}f}"

    a = accuracy or {}
    hit = a.get("hit_rate")
    return (
        cell(None if hit is None else 100 * hit, 7, 0)
        + cell(a.get("median_error_px"), 8, 1)
        + cell(a.get("median_freshness_px"), 9, 1)
    )
