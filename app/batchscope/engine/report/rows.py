"""The segment table's cells, once: what `run`, `simulate`, the app and the HTML report show.

A row is read from one entry of a report's ``segments`` (the report's
``overall`` keys over the segment's measured interval, see
:mod:`batchscope.engine.segments`) and, where the simulator could predict
it, its ``predicted`` figures. The CLI lays the cells out as a text table
(``engine/report/text.py``), the app adds tooltips and "settling…" for the open
segment (``ui/segment_table/cells.py``), the HTML report puts them in a ``<table>``
(``render/page.py``); none of them formats a figure of its own, so the
three cannot disagree. Plain text, no Qt.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchscope.engine.report.body import overwritten_pct
from batchscope.engine.report.phrases import segment_phrase
from batchscope.engine.report.segment import too_short
from batchscope.policy_kinds import KINDS

DASH = "–"  # no value: nothing measured, nothing predicted


@dataclass(frozen=True)
class Column:
    key: str
    head: str  # short heading (the app's table header)
    title: str  # long heading (CSV, HTML)


COLUMNS: dict[str, Column] = {
    c.key: c
    for c in (
        Column("index", "#", "segment"),
        Column("span", "s", "start–end s"),
        Column("changed", "changed", "what changed"),
        Column("sessions", "sess.", "sessions"),
        Column("policy", "policy", "policy"),
        Column("mean_fps", "mean fps", "mean fps"),
        Column("min_fps", "min fps", "min fps"),
        Column("jain", "Jain", "Jain"),
        Column("p50", "p50 ms", "p50 ms"),
        Column("p99", "p99 ms", "p99 ms"),
        Column("overwritten", "overwr. %", "overwritten %"),
        Column("throughput", "w/s", "throughput w/s"),
        Column("mean_batch", "batch", "mean batch"),
        Column("busy", "busy %", "busy %"),
        Column("stable", "stable", "stable"),
        Column("hit_rate", "hit %", "hit rate % (ball in view)"),
        Column("false_rate", "false %", "false detections % (no ball in view)"),
        Column("error_px", "err px", "median error px"),
        Column("fresh_px", "fresh px", "median freshness px"),
        Column("pred_fps", "sim fps", "predicted mean fps"),
        Column("ratio_fps", "fps ÷ sim", "live ÷ predicted fps"),
        Column("pred_p50", "sim p50", "predicted p50 ms"),
        Column("ratio_p50", "p50 ÷ sim", "live ÷ predicted p50"),
        Column("pred_p99", "sim p99", "predicted p99 ms"),
        Column("ratio_p99", "p99 ÷ sim", "live ÷ predicted p99"),
    )
}
#: The live table: what the segment measured.
LIVE_KEYS = (
    "index",
    "span",
    "changed",
    "sessions",
    "policy",
    "mean_fps",
    "min_fps",
    "jain",
    "p50",
    "p99",
    "overwritten",
    "throughput",
    "mean_batch",
    "busy",
    "stable",
)
#: Accuracy and freshness (sources with ground truth): after the live ones, where a
#: segment has them (:func:`with_accuracy`).
ACCURACY_KEYS = ("hit_rate", "false_rate", "error_px", "fresh_px")
#: The simulator's figures and live ÷ predicted, after the live ones in the app's table.
PREDICTED_KEYS = ("pred_fps", "ratio_fps", "pred_p50", "ratio_p50", "pred_p99", "ratio_p99")
#: The table against the simulator (the CLI's and the HTML report's second table).
VERSUS_KEYS = (
    "index",
    "changed",
    "mean_fps",
    "pred_fps",
    "ratio_fps",
    "p50",
    "pred_p50",
    "ratio_p50",
    "p99",
    "pred_p99",
    "ratio_p99",
)
TOO_SHORT = "too short"  # a closed segment's figures under MIN_MEASURED_S measured

#: The measured figures (those that read "settling…" in the app while a segment settles).
FIGURE_KEYS = ("mean_fps", "min_fps", "jain", "p50", "p99", "overwritten", "throughput")
TEXT_KEYS = ("changed", "policy")  # left-aligned wherever the table is drawn


def mean_batch(overall: Mapping[str, Any]) -> float:
    """Mean batch size (windows) from ``batch_sizes`` {size: batches}; 0 with no batch."""
    sizes = {int(k): int(n) for k, n in overall.get("batch_sizes", {}).items()}
    batches = sum(sizes.values())
    return sum(k * n for k, n in sizes.items()) / batches if batches else 0.0


def live_vs_predicted(segment: Mapping[str, Any]) -> dict[str, float | None] | None:
    """live ÷ predicted for mean fps, p50 and p99 latency; None without a prediction.

    A figure whose prediction is 0 has no ratio (None).
    """
    predicted = segment.get("predicted")
    if not predicted:
        return None
    live = segment["overall"]
    pairs = {
        "mean_fps": (live["mean_fps"], predicted["mean_fps"]),
        "p50": (live["latency_ms"]["p50"], predicted["latency_ms"]["p50"]),
        "p99": (live["latency_ms"]["p99"], predicted["latency_ms"]["p99"]),
    }
    return {k: round(a / b, 3) if b else None for k, (a, b) in pairs.items()}


def policy_text(config: Mapping[str, Any]) -> str:
    """The policy with the knob that shapes it: "all ≤8", "fixed 4", "oldest"."""
    kind = KINDS.get(config.get("policy", DASH))
    if kind is None:
        return str(config.get("policy", DASH))
    return kind.text(kind.brief, {k: config.get(k) for k in kind.knobs}, " ≤{}")


def has_figures(segment: Mapping[str, Any]) -> bool:
    """Long enough to measure (engine/segments.py's MIN_MEASURED_S), and something was
    delivered after its settling second."""
    overall = segment.get("overall")
    if too_short(segment) or not overall:
        return False
    return overall["throughput_wps"] > 0


def _num(value: float | None, digits: int = 1) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def segment_cells(
    segment: Mapping[str, Any], previous: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """The row's cells by column key, plus its ``caption`` and ``error`` ("" for none).

    ``previous``: the segment before it, for what the change replaced ("policy oldest →
    all") and the faults that ended (:func:`~batchscope.engine.report.phrases.segment_phrase`).
    A segment with nothing measured after its settling second has "–" for
    every figure, and so has a segment without a prediction for the
    simulator's; one too short to measure reads "too short".
    """
    cfg = segment.get("config", {})
    cells = {
        "index": str(segment["index"]),
        "span": f"{segment['start_s']:.1f}–{segment['end_s']:.1f}",
        "changed": segment_phrase(segment, previous),
        "sessions": str(cfg.get("sessions", DASH)),
        "policy": policy_text(cfg),
        **dict.fromkeys(
            (*FIGURE_KEYS, "mean_batch", "busy", "stable", *ACCURACY_KEYS, *PREDICTED_KEYS), DASH
        ),
        "caption": segment.get("caption") or "",
        "error": segment.get("error") or "",
    }
    if too_short(segment):
        cells |= dict.fromkeys(FIGURE_KEYS, TOO_SHORT)
    if not has_figures(segment):
        return cells
    o = segment["overall"]
    cells |= {
        "mean_fps": _num(o["mean_fps"]),
        "min_fps": _num(o["min_fps"]),
        "jain": _num(o["jain"], 2),
        "p50": _num(o["latency_ms"]["p50"]),
        "p99": _num(o["latency_ms"]["p99"]),
        "overwritten": _num(overwritten_pct(segment)),
        "throughput": _num(o["throughput_wps"]),
        "mean_batch": _num(mean_batch(o), 2),
        "busy": _num(100 * o.get("busy", 0.0), 0),
        "stable": "yes" if segment.get("stable") else "no",
    }
    accuracy = o.get("accuracy")
    if accuracy:
        hit_rate, false_rate = accuracy["hit_rate"], accuracy.get("false_detection_rate")
        cells |= {
            "hit_rate": _num(None if hit_rate is None else 100 * hit_rate, 0),
            "false_rate": _num(None if false_rate is None else 100 * false_rate, 0),
            "error_px": _num(accuracy["median_error_px"]),
            "fresh_px": _num(accuracy["median_freshness_px"]),
        }
    pred = segment.get("predicted")
    if pred:
        ratio = live_vs_predicted(segment) or {}
        cells |= {
            "pred_fps": _num(pred["mean_fps"]),
            "pred_p50": _num(pred["latency_ms"]["p50"]),
            "pred_p99": _num(pred["latency_ms"]["p99"]),
            "ratio_fps": _num(ratio.get("mean_fps"), 2),
            "ratio_p50": _num(ratio.get("p50"), 2),
            "ratio_p99": _num(ratio.get("p99"), 2),
        }
    return cells


def table_cells(segments: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Every row of a report's segment table (in order: each reads the one before it)."""
    return [segment_cells(s, p) for p, s in zip([None, *segments], segments, strict=False)]


def has_predictions(segments: Sequence[Mapping[str, Any]]) -> bool:
    return any(seg.get("predicted") for seg in segments)


def has_accuracy(segments: Sequence[Mapping[str, Any]]) -> bool:
    """A segment's sources have ground truth (its ``overall`` carries ``accuracy``)."""
    return any("accuracy" in (seg.get("overall") or {}) for seg in segments)


def with_accuracy(keys: Sequence[str], segments: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """``keys``, then the accuracy columns when a segment has them."""
    return (*keys, *ACCURACY_KEYS) if has_accuracy(segments) else tuple(keys)


#: The CSV's columns: the live table, accuracy, the simulator's figures, then the texts.
CSV_KEYS = (*LIVE_KEYS, *ACCURACY_KEYS, *PREDICTED_KEYS, "caption", "error")


def segments_csv(segments: Sequence[Mapping[str, Any]]) -> str:
    """The table as CSV: one header row of long titles, then the cells ("" for "–")."""
    titles = {k: c.title for k, c in COLUMNS.items()} | {"caption": "caption", "error": "error"}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([titles[k] for k in CSV_KEYS])
    for cells in table_cells(segments):
        writer.writerow(["" if cells[k] == DASH else cells[k] for k in CSV_KEYS])
    return out.getvalue()


def segments_json(segments: Sequence[Mapping[str, Any]]) -> str:
    """The segments as the report carries them (the JSON schema's ``segments``)."""
    return json.dumps(list(segments), indent=2) + "\n"


Figure = tuple[str, Callable[[Mapping[str, Any]], float], int]

#: The figures two reports (or two segments) are compared on: (label, read it, digits).
#: Each reads an ``overall``-shaped report or segment (with its ``sessions``).
FIGURES: tuple[Figure, ...] = (
    ("mean fps", lambda r: r["overall"]["mean_fps"], 1),
    ("min fps", lambda r: r["overall"]["min_fps"], 1),
    ("Jain", lambda r: r["overall"]["jain"], 3),
    ("p50 ms", lambda r: r["overall"]["latency_ms"]["p50"], 1),
    ("p95 ms", lambda r: r["overall"]["latency_ms"]["p95"], 1),
    ("p99 ms", lambda r: r["overall"]["latency_ms"]["p99"], 1),
    ("throughput w/s", lambda r: r["overall"]["throughput_wps"], 1),
    ("overwritten %", overwritten_pct, 1),
    ("mean batch", lambda r: mean_batch(r["overall"]), 2),
    ("busy %", lambda r: 100 * r["overall"].get("busy", 0.0), 1),
)
