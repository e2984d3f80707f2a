"""One line that says whether figures meet a budget, and by how much.

Wherever a plan is verified (``plan --verify``, Capacity → Verify) or two runs or
segments are compared (``compare --p99-ms``, the Segments table), the reader asks one
question first: inside the budget or not? :func:`verdict` answers it in one line, by
the planner's own rule (:meth:`~batchscope.sim.planner.results.Budget.meets`: the
slowest session's fps at least ``min_fps_ratio × fps``, the overall p99 at most
``p99_ms``), with each figure's margin::

    pass: p99 43.7 ≤ 50 ms ✓ (6.3 to spare), slowest 29.8 fps ≥ 28.5 ✓ (1.3 to spare)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchscope.sim.planner.results import Budget

PASS, FAIL = "✓", "✗"


def verdict(budget: Budget, min_fps: float, p99_ms: float) -> str:
    """``pass``/``FAIL``, then the p99 and the slowest session's fps against ``budget``."""
    return _line(budget.p99_ms, budget.min_fps, min_fps, p99_ms)


def figures_verdict(
    overall: Mapping[str, Any], fps: float | None, p99_ms: float, min_fps_ratio: float
) -> str:
    """:func:`verdict` of a report's (or a segment's) ``overall``-shaped figures, run at
    ``fps``; with no frame rate (each source at its own: ``--fps source``) there is no
    fps floor, and the line judges the p99 alone."""
    p99 = overall["latency_ms"]["p99"]
    if fps is None:
        return _line(p99_ms, None, overall["min_fps"], p99)
    return verdict(Budget(fps, p99_ms, min_fps_ratio), overall["min_fps"], p99)


def _line(p99_limit: float, fps_floor: float | None, min_fps: float, p99_ms: float) -> str:
    p99_ok = p99_ms <= p99_limit
    parts = [
        f"p99 {_shown(p99_ms, p99_limit)} {'≤' if p99_ok else '>'} {p99_limit:g} ms "
        f"{_mark(p99_ok, p99_limit - p99_ms, 'over')}"
    ]
    ok = p99_ok
    if fps_floor is None:
        parts.append(f"slowest {min_fps:.1f} fps (no frame rate set: no fps floor)")
    else:
        fps_ok = min_fps >= fps_floor
        ok = ok and fps_ok
        parts.append(
            f"slowest {_shown(min_fps, fps_floor)} fps {'≥' if fps_ok else '<'} "
            f"{fps_floor:g} {_mark(fps_ok, min_fps - fps_floor, 'short')}"
        )
    return f"{'pass' if ok else 'FAIL'}: {', '.join(parts)}"


def _mark(ok: bool, margin: float, missed: str) -> str:
    """✓ and what is to spare, or ✗ and by how much it misses (``missed``: over, short)."""
    if ok:
        return f"{PASS} ({_figure(margin)} to spare)"
    return f"{FAIL} ({_figure(-margin)} {missed})"


def _shown(value: float, limit: float) -> str:
    """``value`` to one decimal, or more where one decimal would read as the limit
    itself (50.04 > 50 must not read "50.0 > 50")."""
    for digits in (1, 2, 3):
        text = f"{value:.{digits}f}"
        if float(text) != limit or value == limit:
            return text
    return f"{value:g}"


def _figure(margin: float) -> str:
    """A margin to one decimal, or two significant digits when it is under 0.05."""
    return f"{margin:.1f}" if margin >= 0.05 or margin == 0 else f"{margin:.2g}"
