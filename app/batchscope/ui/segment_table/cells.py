"""What the app adds to the segment table's cells: tooltips, "settling…", the comparison.

The cells themselves are :func:`batchscope.engine.report.rows.segment_cells`,
the ones ``run`` prints and the HTML report shows; the view only shows these
strings, so tests read the table without a screen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batchscope.engine.report.host import explained_by_host
from batchscope.engine.report.rows import (
    ACCURACY_KEYS,
    DASH,
    FIGURE_KEYS,
    FIGURES,
    LIVE_KEYS,
    PREDICTED_KEYS,
    has_figures,
    segment_cells,
)
from batchscope.engine.report.rows import COLUMNS as CELLS

SETTLING = "settling…"
OPEN_END = "now"  # the end of the segment the run is in


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    tip: str


SIMULATED = "the simulator's prediction for the same segment (its config, its measured seconds)"
TIPS = {
    "index": "segment number (0 is the start)",
    "span": f"start–end, s since the run started ({OPEN_END}: the segment running)",
    "changed": "what the change that opened it did (or that it was not applied)",
    "sessions": "sessions",
    "policy": "batch policy (≤: its max batch)",
    "mean_fps": "results per second per session, mean over sessions",
    "min_fps": "the slowest session's fps",
    "jain": "fairness: (Σfps)² / (n·Σfps²)",
    "p50": "median end-to-end latency",
    "p99": "99th percentile end-to-end latency",
    "overwritten": "windows replaced before the worker took them, % of all",
    "throughput": "windows processed per second, all sessions",
    "mean_batch": "mean batch size (windows)",
    "busy": "share of the time the device spent computing",
    "stable": "perf_analyzer's test: over its last three 1 s windows, max ÷ min ≤ 1.1 "
    "in throughput and in mean latency",
    "hit_rate": "results within 5 px of the ball, % of the scored windows whose own frame "
    "shows the ball",
    "false_rate": "results with a detection, % of the scored windows whose own frame has no "
    "ball in view",
    "error_px": "median distance from a detection to the ball in its own frame (source px)",
    "fresh_px": "median distance from the answer to where the ball is when it arrives "
    "(source px): latency in pixels of ball travel",
    "pred_fps": "the simulator's mean fps for this config and duration",
    "ratio_fps": f"live mean fps divided by {SIMULATED}: under 1, fewer results than predicted",
    "pred_p50": "the simulator's p50 latency (ms)",
    "ratio_p50": f"live p50 latency divided by {SIMULATED}: over 1, slower than predicted",
    "pred_p99": "the simulator's p99 latency (ms)",
    "ratio_p99": f"live p99 latency divided by {SIMULATED}: 1 is as predicted, 3 is three "
    "times the predicted latency",
}
#: The app's columns: the live ones, accuracy (hidden without ground truth), then the
#: simulator's (keys of segment_cells).
COLUMNS: tuple[Column, ...] = tuple(
    Column(k, CELLS[k].head, TIPS[k]) for k in (*LIVE_KEYS, *ACCURACY_KEYS, *PREDICTED_KEYS)
)


def host_marked(segment: Mapping[str, Any]) -> bool:
    """Whether the row's p99 ÷ sim is the host's: its tail over a clean prediction is the
    machine's, or its prediction models the machine's measured delays (the app predicts
    so on a busy host). The table colours that cell; its tooltip says which."""
    return explained_by_host(segment) or bool((segment.get("predicted") or {}).get("host_jitter"))


def segment_row(
    segment: Mapping[str, Any],
    running: bool = False,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The row's cells by column key; ``running``: the segment is still open;
    ``previous``: the segment before it (what its change replaced).

    An open segment's end reads "now" (not "…", which reads as a cut cell), and its
    figures "settling…" until it has measured enough (MIN_MEASURED_S after its settling
    second; a closed one reads "too short" then, or "–" with nothing delivered).
    """
    cells = segment_cells(segment, previous)
    row = {c.key: cells[c.key] for c in COLUMNS}
    if running:
        row["span"] = f"{segment['start_s']:.1f}–{OPEN_END}"
        if not has_figures(segment):
            row |= dict.fromkeys(FIGURE_KEYS, SETTLING)
    return row


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, B ÷ A) for two segments; "–" where a segment has no figures."""
    rows = []
    for label, read, digits in FIGURES:
        va = read(a) if has_figures(a) else None
        vb = read(b) if has_figures(b) else None
        ratio = f"{vb / va:.2f}" if va and vb is not None else DASH
        rows.append((label, _number(va, digits), _number(vb, digits), ratio))
    return rows


def _number(value: float | None, digits: int) -> str:
    return DASH if value is None else f"{value:.{digits}f}"
