"""The segment table's rows and the two-segment comparison, as plain text (no Qt).

Every figure comes from a segment entry of ``Engine.report()["segments"]``
(the report's ``overall`` keys, measured after the settling second) and, where
the simulator could predict it, its ``predicted`` figures; the view only shows
these strings, so tests read the table without a screen.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchscope.engine.report import overwritten_pct
from batchscope.sim.prediction import live_vs_predicted

DASH = "–"
SETTLING = "settling…"


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    tip: str


#: The columns, keyed as the CLI's segment table (cli/tables.py) so the two read alike.
COLUMNS: tuple[Column, ...] = (
    Column("index", "#", "segment number (0 is the start)"),
    Column("span", "s", "start–end, s since the run started (… while it runs)"),
    Column("changed", "changed", "what the change that opened it set (or that it failed)"),
    Column("sessions", "sess.", "sessions"),
    Column("policy", "policy", "batch policy"),
    Column("mean_fps", "mean fps", "results per second per session, mean over sessions"),
    Column("min_fps", "min fps", "the slowest session's fps"),
    Column("jain", "Jain", "fairness: (Σfps)² / (n·Σfps²)"),
    Column("p50", "p50 ms", "median end-to-end latency"),
    Column("p99", "p99 ms", "99th percentile end-to-end latency"),
    Column("overwritten", "overwr. %", "windows replaced before the worker took them, % of all"),
    Column("throughput", "w/s", "windows processed per second, all sessions"),
    Column("mean_batch", "batch", "mean batch size (windows)"),
    Column("busy", "busy %", "share of the time the device spent computing"),
    Column("stable", "stable", "its last three 1 s windows agree within 10%"),
    Column("pred_fps", "sim fps", "the simulator's mean fps for this config and duration"),
    Column("ratio_fps", "fps ÷ sim", "live mean fps ÷ predicted"),
    Column("pred_p50", "sim p50", "the simulator's p50 latency (ms)"),
    Column("ratio_p50", "p50 ÷ sim", "live p50 ÷ predicted"),
    Column("pred_p99", "sim p99", "the simulator's p99 latency (ms)"),
    Column("ratio_p99", "p99 ÷ sim", "live p99 ÷ predicted"),
)
HEADERS = tuple(c.header for c in COLUMNS)
LIVE_KEYS = ("mean_fps", "min_fps", "jain", "p50", "p99", "overwritten", "throughput")
PREDICTED_KEYS = ("pred_fps", "ratio_fps", "pred_p50", "ratio_p50", "pred_p99", "ratio_p99")


def mean_batch(overall: Mapping[str, Any]) -> float | None:
    """Mean batch size (windows) from the report's ``batch_sizes`` {size: batches}."""
    sizes = {int(k): int(n) for k, n in overall.get("batch_sizes", {}).items()}
    batches = sum(sizes.values())
    return sum(k * n for k, n in sizes.items()) / batches if batches else None


def describe_changes(segment: Mapping[str, Any]) -> str:
    """What opened the segment, in a few words: "sessions 6, policy all"."""
    parts = [f"{k} {_value(v)}" for k, v in (segment.get("changes") or {}).items()]
    if segment.get("error"):
        return ", ".join(parts) + " FAILED" if parts else "FAILED"
    if parts:
        return ", ".join(parts)
    if segment.get("caption") == "statistics reset":
        return "statistics reset"
    return "start" if segment.get("index") == 0 else "(no change)"


def has_figures(segment: Mapping[str, Any]) -> bool:
    """Something was delivered after its settling second."""
    return float(segment.get("measured_s", 0.0)) > 0 and segment["overall"]["throughput_wps"] > 0


def segment_row(segment: Mapping[str, Any], running: bool = False) -> dict[str, str]:
    """The row's cells by column key; ``running``: the segment is still open.

    A segment with nothing measured yet reads "settling…" while it runs, "–" after.
    """
    cfg = segment.get("config", {})
    end = "…" if running else f"{segment['end_s']:.0f}"
    row = {
        "index": str(segment["index"]),
        "span": f"{segment['start_s']:.0f}–{end}",
        "changed": describe_changes(segment),
        "sessions": str(cfg.get("sessions", DASH)),
        "policy": str(cfg.get("policy", DASH)),
        **dict.fromkeys(LIVE_KEYS, SETTLING if running else DASH),
        **dict.fromkeys(("mean_batch", "busy", "stable"), DASH),
        **dict.fromkeys(PREDICTED_KEYS, DASH),
    }
    if has_figures(segment):
        o = segment["overall"]
        batch = mean_batch(o)
        row |= {
            "mean_fps": f"{o['mean_fps']:.1f}",
            "min_fps": f"{o['min_fps']:.1f}",
            "jain": f"{o['jain']:.2f}",
            "p50": f"{o['latency_ms']['p50']:.0f}",
            "p99": f"{o['latency_ms']['p99']:.0f}",
            "overwritten": f"{overwritten_pct(segment):.0f}",
            "throughput": f"{o['throughput_wps']:.0f}",
            "mean_batch": DASH if batch is None else f"{batch:.1f}",
            "busy": f"{100 * o.get('busy', 0.0):.0f}",
            "stable": "yes" if segment.get("stable") else "no",
        }
        p = segment.get("predicted")
        if p:
            ratios = live_vs_predicted(segment) or {}
            row |= {
                "pred_fps": f"{p['mean_fps']:.1f}",
                "pred_p50": f"{p['latency_ms']['p50']:.0f}",
                "pred_p99": f"{p['latency_ms']['p99']:.0f}",
                "ratio_fps": _ratio(ratios.get("mean_fps")),
                "ratio_p50": _ratio(ratios.get("p50")),
                "ratio_p99": _ratio(ratios.get("p99")),
            }
    return row


def _ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}"


def _value(value: Any) -> str:
    if isinstance(value, list | tuple) and len(value) == 2:
        return f"{value[0]}x{value[1]}"
    return str(value)


#: The figures compared side by side: (label, how to read it from a segment).
COMPARED: tuple[tuple[str, Any], ...] = (
    ("mean fps", lambda s: s["overall"]["mean_fps"]),
    ("min fps", lambda s: s["overall"]["min_fps"]),
    ("Jain", lambda s: s["overall"]["jain"]),
    ("p50 ms", lambda s: s["overall"]["latency_ms"]["p50"]),
    ("p99 ms", lambda s: s["overall"]["latency_ms"]["p99"]),
    ("throughput w/s", lambda s: s["overall"]["throughput_wps"]),
    ("mean batch", lambda s: mean_batch(s["overall"])),
    ("busy %", lambda s: 100 * s["overall"].get("busy", 0.0)),
)


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, B ÷ A) for two segments; "–" where a segment has no figures."""
    rows = []
    for label, read in COMPARED:
        va = read(a) if has_figures(a) else None
        vb = read(b) if has_figures(b) else None
        ratio = vb / va if va and vb is not None else None
        rows.append((label, _number(va), _number(vb), _ratio(ratio)))
    return rows


def _number(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def segments_csv(segments: Sequence[Mapping[str, Any]], open_index: int | None = None) -> str:
    """The table as CSV: the cells as shown, then each segment's caption and error."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*(c.header for c in COLUMNS), "caption", "error"])
    for s in segments:
        row = segment_row(s, s["index"] == open_index)
        writer.writerow([*(row[c.key] for c in COLUMNS), s.get("caption", ""), s.get("error", "")])
    return out.getvalue()


def segments_json(segments: Sequence[Mapping[str, Any]]) -> str:
    """The segments as the report carries them (the JSON schema's ``segments``)."""
    return json.dumps(list(segments), indent=2) + "\n"
