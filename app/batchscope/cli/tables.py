"""The segment table as text: the layout of the cells that `run` and `simulate` print.

The cells come from :func:`batchscope.engine.segment_rows.segment_cells`, the
same ones the app and the HTML report show; here they only get their widths
and short headings. ``--csv`` writes :func:`~batchscope.engine.segment_rows.segments_csv`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from batchscope.cli.args import CliError
from batchscope.engine.segment_rows import (
    LIVE_KEYS,
    TOO_SHORT,
    VERSUS_KEYS,
    has_predictions,
    segment_cells,
    segments_csv,
    with_accuracy,
)
from batchscope.engine.segments import MIN_MEASURED_S, too_short

#: key -> (heading, width); a negative width is left-aligned.
LAYOUT: dict[str, tuple[str, int]] = {
    "index": ("#", 2),
    "span": ("start–end s", 11),
    "changed": ("changed", -26),
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
    rows = [segment_cells(seg) for seg in segments]
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
    if notes:
        parts += ["", *notes]
    return "\n".join(parts)


def write_csv(report: Mapping[str, Any], target: str | None) -> None:
    if not target:
        return
    try:
        with open(target, "w", newline="", encoding="utf-8") as fh:
            fh.write(segments_csv(report.get("segments", [])))
    except OSError as exc:
        raise CliError(f"{target}: cannot write the segment table ({exc.strerror})") from None
