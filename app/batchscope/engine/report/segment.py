"""A segment's entry of a report: the same figures as the report's ``overall``, over its
measured interval (the rules are in :mod:`batchscope.engine.segments`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from batchscope.engine.report.body import Figures, SessionInfo, report_body
from batchscope.engine.segments import MIN_MEASURED_S, Segment, is_stable
from batchscope.engine.stats import pick
from batchscope.engine.tally import RecordFigures
from batchscope.urls import mask_all, mask_credentials


def segment_report(
    segment: Segment,
    sessions: Sequence[SessionInfo],
    items: np.ndarray,
    batches: np.ndarray,
    overwrites: np.ndarray,
    now: float,
    t0: float,
    kind: str = "run",
    expiries: np.ndarray | None = None,
) -> dict[str, Any]:
    """The segment's entry of a report from the run's records (the simulator's: all of
    them), ``items``/``batches``/``overwrites``/``expiries`` (ITEM_DTYPE, BATCH_DTYPE,
    OVERWRITE_DTYPE twice); only those delivered (or overwritten, or expired) in the
    measured interval count."""
    end = segment.end if segment.end is not None else now
    lo = min(segment.measure_start, end)
    mine = pick(items, (items["result"] >= lo) & (items["result"] <= end))
    my_batches = batches[(batches["end"] >= lo) & (batches["end"] <= end)]
    figures = RecordFigures(
        mine, my_batches, _counts(overwrites, lo, end), _counts(expiries, lo, end)
    )
    return segment_entry(segment, sessions, figures, mine, now, t0, kind)


def segment_entry(
    segment: Segment,
    sessions: Sequence[SessionInfo],
    figures: Figures,
    recent: np.ndarray,
    now: float,
    t0: float,
    kind: str = "run",
    paused_s: float = 0.0,
) -> dict[str, Any]:
    """The segment's entry of a report: the same figures as the report's ``overall``,
    from ``figures`` over its measured interval (a live :class:`Tally` or records).

    ``recent``: item records delivered in it, at least its last STABLE_WINDOWS seconds
    (the stability test's); ``paused_s``: how much of its measured interval the run was
    paused (no figure divides paused time).
    """
    end = segment.end if segment.end is not None else now
    lo = min(segment.measure_start, end)
    measured = max(0.0, end - lo - paused_s)
    ids = {s for s in range(segment.config.sessions)}
    ids |= {s.id for s in sessions if figures.delivered(s.id)}
    ids |= set(figures.overwritten()) | set(figures.expired())
    infos = [s for s in sessions if s.id in ids]
    body = report_body(kind, segment.config, infos, figures, measured)
    entry: dict[str, Any] = {
        "index": segment.index,
        "start_s": round(segment.start - t0, 3),
        "end_s": round(end - t0, 3),
        "changes": {k: _json(v) for k, v in segment.changes.items()},
        "config": body["config"],
        "caption": mask_credentials(segment.caption),
        "stable": paused_s == 0 and is_stable(recent, lo, end),
        "measured_s": round(measured, 3),
        "too_short": measured < MIN_MEASURED_S,
        "overall": body["overall"],
        "sessions": body["sessions"],
        "faults": [dict(f) for f in segment.faults],
        "predicted": None,
    }
    if paused_s:
        entry["paused_s"] = round(paused_s, 3)
    if entry["too_short"]:  # no figures: see the module doc
        entry |= {"overall": None, "sessions": None, "stable": False}
    if segment.error:
        entry["error"] = segment.error
    return entry


def too_short(segment: Mapping[str, Any]) -> bool:
    """Whether a report's segment entry was too short to measure (it has no figures): its
    ``too_short``, or for an entry without one, its ``measured_s`` under the minimum."""
    if "too_short" in segment:
        return bool(segment["too_short"])
    return float(segment.get("measured_s", 0.0)) < MIN_MEASURED_S


def _counts(records: np.ndarray | None, lo: float, hi: float) -> dict[int, int]:
    """Per session, the (session, t) records with t in [lo, hi]."""
    if records is None or len(records) == 0:
        return {}
    inside = records[(records["t"] >= lo) & (records["t"] <= hi)]
    counts = np.bincount(inside["session"]) if len(inside) else np.zeros(0, int)
    return {int(s): int(c) for s, c in enumerate(counts) if c}


def _json(value: Any) -> Any:
    """A change's value as JSON: tuples as lists, a URL's password masked (sources)."""
    return mask_all(list(value) if isinstance(value, tuple) else value)
