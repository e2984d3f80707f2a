"""The segment table: one row per segment of a report, as text, CSV and HTML cells.

``run --experiment`` and ``simulate --experiment`` print it, ``--csv`` writes
it and the HTML report shows it; all of them read the rows from
:func:`segment_rows`, so the three cannot disagree on a figure. A segment's
figures are those of the report's ``overall`` (see
:mod:`batchscope.engine.segments` for what a segment leaves out).
"""

from __future__ import annotations

import csv as csv_module
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batchscope.cli.args import CliError
from batchscope.config import format_resolution
from batchscope.engine.report import overwritten_pct
from batchscope.sim.prediction import live_vs_predicted


@dataclass(frozen=True)
class Column:
    key: str
    head: str  # short heading for the text table
    width: int  # text table width (a negative width: left-aligned)
    title: str  # long heading (CSV, HTML)


LIVE_COLUMNS = (
    Column("index", "#", 2, "segment"),
    Column("span", "start–end s", 11, "start–end s"),
    Column("changed", "changed", -26, "what changed"),
    Column("sessions", "sess", 4, "sessions"),
    Column("policy", "policy", -10, "policy"),
    Column("mean_fps", "fps", 5, "mean fps"),
    Column("min_fps", "min", 5, "min fps"),
    Column("jain", "Jain", 5, "Jain"),
    Column("p50", "p50", 6, "p50 ms"),
    Column("p99", "p99", 6, "p99 ms"),
    Column("overwritten", "ovw%", 5, "overwritten %"),
    Column("throughput", "w/s", 6, "throughput w/s"),
    Column("mean_batch", "batch", 5, "mean batch"),
    Column("busy", "busy%", 5, "busy %"),
    Column("stable", "stable", 6, "stable"),
)
PREDICTED_COLUMNS = (
    Column("index", "#", 2, "segment"),
    Column("changed", "changed", -26, "what changed"),
    Column("mean_fps", "fps", 5, "mean fps"),
    Column("pred_fps", "sim fps", 7, "predicted mean fps"),
    Column("ratio_fps", "÷", 5, "live ÷ predicted fps"),
    Column("p50", "p50", 6, "p50 ms"),
    Column("pred_p50", "sim p50", 7, "predicted p50 ms"),
    Column("ratio_p50", "÷", 5, "live ÷ predicted p50"),
    Column("p99", "p99", 6, "p99 ms"),
    Column("pred_p99", "sim p99", 7, "predicted p99 ms"),
    Column("ratio_p99", "÷", 5, "live ÷ predicted p99"),
)


def mean_batch(overall: Mapping[str, Any]) -> float:
    sizes = overall["batch_sizes"]
    batches = sum(sizes.values())
    return sum(int(k) * v for k, v in sizes.items()) / batches if batches else 0.0


def describe_changes(changes: Mapping[str, Any]) -> str:
    """``{"sessions": 6, "policy": "all"}`` -> ``sessions 6, policy all``."""
    parts = []
    for key, value in changes.items():
        if key == "resolution" and isinstance(value, list | tuple):
            value = format_resolution(tuple(value))
        elif isinstance(value, list | tuple):
            value = ",".join(map(str, value))
        parts.append(f"{key} {value}")
    return ", ".join(parts) or "start"


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def segment_rows(report: Mapping[str, Any]) -> list[dict[str, str]]:
    """One dict of cells (keyed as the columns) per segment of ``report``."""
    rows = []
    for seg in report.get("segments", []):
        o, cfg = seg["overall"], seg["config"]
        pred = seg.get("predicted")
        ratio = live_vs_predicted(seg) or {}
        error = seg.get("error")
        rows.append(
            {
                "index": str(seg["index"]),
                "span": f"{seg['start_s']:.1f}–{seg['end_s']:.1f}",
                "changed": describe_changes(seg["changes"]) + (" FAILED" if error else ""),
                "sessions": str(cfg["sessions"]),
                "policy": _policy(cfg),
                "mean_fps": _num(o["mean_fps"]),
                "min_fps": _num(o["min_fps"]),
                "jain": _num(o["jain"], 3),
                "p50": _num(o["latency_ms"]["p50"]),
                "p99": _num(o["latency_ms"]["p99"]),
                "overwritten": _num(overwritten_pct(seg)),
                "throughput": _num(o["throughput_wps"]),
                "mean_batch": _num(mean_batch(o), 2),
                "busy": _num(100 * o["busy"], 0),
                "stable": "yes" if seg["stable"] else "no",
                "pred_fps": _num(pred["mean_fps"]) if pred else "–",
                "pred_p50": _num(pred["latency_ms"]["p50"]) if pred else "–",
                "pred_p99": _num(pred["latency_ms"]["p99"]) if pred else "–",
                "ratio_fps": _num(ratio.get("mean_fps"), 2),
                "ratio_p50": _num(ratio.get("p50"), 2),
                "ratio_p99": _num(ratio.get("p99"), 2),
                "caption": seg.get("caption", ""),
                "error": error or "",
            }
        )
    return rows


def _policy(cfg: Mapping[str, Any]) -> str:
    policy, cap = cfg["policy"], cfg.get("max_batch")
    if policy in ("all", "dynamic", "adaptive") and cap:
        return f"{policy} ≤{cap}"
    if policy == "fixed":
        return f"fixed {cfg.get('batch')}"
    return policy


def has_predictions(report: Mapping[str, Any]) -> bool:
    return any(seg.get("predicted") for seg in report.get("segments", []))


def _cell(text: str, width: int) -> str:
    w = abs(width)
    if len(text) > w:
        text = text[: w - 1] + "…"
    return text.ljust(w) if width < 0 else text.rjust(w)


def _text_table(rows: list[dict[str, str]], columns: tuple[Column, ...]) -> str:
    head = " ".join(_cell(c.head, c.width) for c in columns)
    lines = [head, "-" * len(head)]
    lines += [" ".join(_cell(r[c.key], c.width) for c in columns) for r in rows]
    return "\n".join(lines)


def format_segments(report: Mapping[str, Any]) -> str:
    """The segment table as text; a second table against the simulator where predicted.

    Below the table: each segment's caption, and the error of a step that failed.
    """
    rows = segment_rows(report)
    parts = [_text_table(rows, LIVE_COLUMNS)]
    if has_predictions(report):
        parts += ["", "live vs the simulator's prediction (÷: live ÷ predicted)"]
        parts.append(_text_table(rows, PREDICTED_COLUMNS))
    notes = [f"  {r['index']}: {r['caption']}" for r in rows if r["caption"]]
    notes += [f"  {r['index']}: not applied: {r['error']}" for r in rows if r["error"]]
    if notes:
        parts += ["", *notes]
    return "\n".join(parts)


CSV_KEYS = (
    *(c.key for c in LIVE_COLUMNS),
    "pred_fps",
    "pred_p50",
    "pred_p99",
    "ratio_fps",
    "ratio_p50",
    "ratio_p99",
    "caption",
    "error",
)


def segments_csv(report: Mapping[str, Any]) -> str:
    """The segment table as CSV, one header row of long titles (empty: no value)."""
    titles = {c.key: c.title for c in (*LIVE_COLUMNS, *PREDICTED_COLUMNS)}
    titles |= {"caption": "caption", "error": "error"}
    out = io.StringIO()
    writer = csv_module.writer(out, lineterminator="\n")
    writer.writerow([titles[k] for k in CSV_KEYS])
    for row in segment_rows(report):
        writer.writerow(["" if row[k] == "–" else row[k] for k in CSV_KEYS])
    return out.getvalue()


def write_csv(report: Mapping[str, Any], target: str | None) -> None:
    if not target:
        return
    try:
        with open(target, "w", newline="", encoding="utf-8") as fh:
            fh.write(segments_csv(report))
    except OSError as exc:
        raise CliError(f"{target}: cannot write the segment table ({exc.strerror})") from None
