"""The report as text: the run table, the sessions table, the segment table.

Writers that only format: every cell comes from the report's figures
(:mod:`~batchscope.engine.report.body`) or the segment cells
(:func:`~batchscope.engine.report.rows.segment_cells`), the same the HTML
report and the app's table show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from batchscope.engine.report.body import expired_pct, mean_batch_ms, overwritten_pct
from batchscope.engine.report.host import host_verdict
from batchscope.engine.report.phrases import accuracy_notes
from batchscope.engine.report.rows import (
    LIVE_KEYS,
    TOO_SHORT,
    VERSUS_KEYS,
    has_predictions,
    table_cells,
    with_accuracy,
)
from batchscope.engine.report.segment import too_short
from batchscope.engine.segments import MIN_MEASURED_S

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
        _fixed(overall["mean_fps"], 1),
        _fixed(overall["min_fps"], 1),
        f"{overall['latency_ms']['p50']:.1f}",
        f"{overall['latency_ms']['p99']:.1f}",
        f"{overwritten_pct(report):.1f}",
        f"{overall['throughput_wps']:.1f}",
    ]


def _fixed(value: float | None, digits: int) -> str:
    """A figure to ``digits`` places; "–" where it has none (stats.fps_figures)."""
    return "–" if value is None else f"{value:.{digits}f}"


#: Columns a table gains when one of its runs uses the setting.
OPTIONAL_COLUMNS = (
    ("seeds", ("min worst", 10), lambda r: f"{r['seeds']['min_fps_worst']:.1f}"),
    ("seeds", ("min med", 8), lambda r: f"{r['seeds']['min_fps_median']:.1f}"),
    ("seeds", ("p99 worst", 10), lambda r: f"{r['seeds']['p99_worst']:.1f}"),
    ("neighbours", ("nbrs", 5), lambda r: str(r["config"].get("neighbours", 0))),
    ("expired", ("expired %", 10), lambda r: f"{expired_pct(r):.1f}"),
    ("neighbours", ("batch ms", 9), lambda r: f"{mean_batch_ms(r):.1f}"),
)


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
    false %, error and freshness when a source has ground truth, with notes below on what
    they count and how the detections were measured)."""
    expiring = any(s.get("expired") for s in report["sessions"])
    scoring = any("accuracy" in s for s in report["sessions"])
    lines = [
        f"{'id':>3}  {'source':<24}{'fps':>7}{'delivered':>10}{'overwr':>8}"
        + (f"{'expired':>8}" if expiring else "")
        + f"{'p50 ms':>8}{'p99 ms':>8}{'wait':>7}{'prep':>7}{'comp':>7}{'post':>7}"
        + (f"{'hit %':>7}{'false %':>8}{'err px':>8}{'fresh px':>9}" if scoring else "")
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
    lines += [f"  {note}" for note in accuracy_notes(report)]
    lines += stream_lines(report)
    return "\n".join(lines)


def stream_lines(report: Mapping[str, Any]) -> list[str]:
    """A line for each network stream its sessions play (once per source): its rate
    declared and arriving, jitter, the frames' age at arrival (network and camera delay,
    beside the latency above, which starts at arrival) and its reconnects."""
    lines, seen = [], set()
    for s in report["sessions"]:
        stream = s.get("stream")
        if stream is None or s["source"] in seen:
            continue
        seen.add(s["source"])
        own = f"{stream['own_fps']:g}" if stream.get("own_fps") else "no"
        age = stream.get("age_ms")
        lines.append(
            f"  stream {s['source']}: {stream['arrival_fps']:.1f} fps arriving ({own} declared"
            + (", on demand: read at its own timestamps" if stream.get("on_demand") else "")
            + f"), jitter {stream['jitter_ms']:.1f} ms, frame age at arrival "
            + ("unknown (no RTCP wall clock)" if age is None else f"{age:.1f} ms")
            + f", {stream['reconnects']} reconnect{'s' if stream['reconnects'] != 1 else ''}"
            + (f" ({stream['down_s']:.1f} s down)" if stream["reconnects"] else "")
            + (f", now {stream['state']}" if stream["state"] != "playing" else "")
        )
    return lines


def _accuracy_cells(accuracy: Mapping[str, Any] | None) -> str:
    def cell(value: float | None, width: int, digits: int) -> str:
        return f"{'–':>{width}}" if value is None else f"{value:>{width}.{digits}f}"

    a = accuracy or {}
    hit, false = a.get("hit_rate"), a.get("false_detection_rate")
    return (
        cell(None if hit is None else 100 * hit, 7, 0)
        + cell(None if false is None else 100 * false, 8, 0)
        + cell(a.get("median_error_px"), 8, 1)
        + cell(a.get("median_freshness_px"), 9, 1)
    )


#: The segment table's columns on a terminal: key -> (header, width; negative: left-aligned).
LAYOUT: dict[str, tuple[str, int]] = {
    "index": ("#", 2),
    "span": ("start–end s", 11),
    "changed": ("changed", -30),
    "sessions": ("sess", 4),
    "policy": ("policy", -10),
    "mean_fps": ("fps", 5),
    "min_fps": ("min", 5),
    "jain": ("Jain", 5),
    "p50": ("p50", 6),
    "p99": ("p99", 6),
    "overwritten": ("ovw%", 5),
    "throughput": ("w/s", 6),
    "mean_batch": ("batch", 5),
    "busy": ("busy%", 5),
    "stable": ("stable", 6),
    "hit_rate": ("hit%", 5),
    "false_rate": ("false%", 6),
    "error_px": ("err", 5),
    "fresh_px": ("fresh", 5),
    "pred_fps": ("sim fps", 7),
    "ratio_fps": ("÷", 5),
    "pred_p50": ("sim p50", 7),
    "ratio_p50": ("÷", 5),
    "pred_p99": ("sim p99", 7),
    "ratio_p99": ("÷", 5),
}


def _cell(text: str, width: int) -> str:
    w = abs(width)
    if len(text) > w:
        text = text[: w - 1] + "…"
    return text.ljust(w) if width < 0 else text.rjust(w)


def _text_table(rows: list[dict[str, str]], keys: Sequence[str]) -> str:
    head = " ".join(_cell(LAYOUT[k][0], LAYOUT[k][1]) for k in keys)
    lines = [head, "-" * len(head)]
    lines += [" ".join(_cell(r[k], LAYOUT[k][1]) for k in keys) for r in rows]
    return "\n".join(lines)


def format_segments(report: Mapping[str, Any]) -> str:
    """The segment table as text; a second table against the simulator where predicted.

    Below the table: each segment's caption, and the error of a step that failed.
    """
    segments = report.get("segments", [])
    rows = table_cells(segments)
    parts = [_text_table(rows, with_accuracy(LIVE_KEYS, segments))]
    if has_predictions(segments):
        parts += ["", "live vs the simulator's prediction (÷: live ÷ predicted)"]
        parts.append(_text_table(rows, VERSUS_KEYS))
    notes = [f"  {r['index']}: {r['caption']}" for r in rows if r["caption"]]
    notes += [f"  {r['index']}: not applied: {r['error']}" for r in rows if r["error"]]
    notes += [
        f"  {seg['index']}: {TOO_SHORT} to measure ({seg['measured_s']:.2f} s after its "
        f"settling second; figures need {MIN_MEASURED_S:g} s)"
        for seg in segments
        if too_short(seg)
    ]
    notes += [f"  {note}" for note in accuracy_notes(report)]
    notes += [f"  {seg['index']}: {v}" for seg in segments if (v := host_verdict(seg))]
    if notes:
        parts += ["", *notes]
    return "\n".join(parts)


def format_devices(reports: Sequence[dict[str, Any]]) -> str:
    """The devices of each report, one line each: sessions, busy share, mean batch."""
    lines = []
    for r in reports:
        config = r["config"]
        lines.append(f"{config['sessions']} sessions, {r['policy_label']}, router {r['router']}:")
        for d, device in enumerate(r["devices"]):
            sizes = {int(k): n for k, n in device["batch_sizes"].items()}
            batches = sum(sizes.values())
            mean = sum(k * n for k, n in sizes.items()) / batches if batches else 0.0
            memory = device.get("memory", {})  # a live run's: its own counters
            peak = memory.get("peak_allocated_mb", memory.get("profile_peak_mb"))
            lines.append(
                f"  device {d}  {device['device']:<24} {device['sessions']:>4} sessions  "
                f"busy {100 * device['busy']:5.1f}%  mean batch {mean:5.2f}"
                + (f"  peak {peak:,.0f} MB" if peak is not None else "")
            )
    return "\n".join(lines)
