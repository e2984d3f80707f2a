"""The capacity plan as one picture: slowest-session fps and p99 against sessions, per policy.

Drawn with QPainter on a QImage (no widget, no event loop; under the
``offscreen`` platform when no app runs), because ``batchscope plan --plot``
writes a file and the app will show the same image. Made for a projector:
1600×900, large type, one colour per policy (Okabe–Ito, readable in grey and
to colour-blind eyes), the budget as dashed lines, each policy's maximum
marked with a ring and its count. p99 is clipped at 3× the budget (overload
latencies run to seconds and would flatten everything else); a clipped point
sits on the top edge as a triangle.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QImage, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QApplication

from batchscope.config import format_resolution
from batchscope.policy_kinds import KINDS
from batchscope.sim.planner import Plan, Series

WIDTH, HEIGHT = 1600, 900
INK = QColor("#111111")
GRID = QColor("#d0d0d0")
BUDGET = QColor("#555555")
#: each policy's colour (policy_kinds.py)
POLICY_COLOURS = {k.name: QColor(k.colour) for k in KINDS.values()}
P99_CLIP = 3.0  # × the budget

_app: QApplication | None = None


def _ensure_gui() -> None:
    """An application for fonts and painting; offscreen unless one already runs."""
    global _app
    if QGuiApplication.instance() is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        _app = QApplication([])


def _step(top: float, ticks: int = 5) -> float:
    """A 1-2-5 tick step that cuts [0, top] into about ``ticks`` parts."""
    raw = max(top, 1e-9) / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _font(px: int, bold: bool = False) -> QFont:
    font = QFont()
    font.setPixelSize(px)
    font.setBold(bold)
    return font


def plan_image(plan: Plan, series: Sequence[Series]) -> QImage:
    """The plot of ``plan`` (``series`` from :func:`batchscope.sim.planner.series`)."""
    _ensure_gui()
    image = QImage(WIDTH, HEIGHT, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    b = plan.budget
    p.setPen(INK)
    p.setFont(_font(34, bold=True))
    p.drawText(
        QRectF(40, 14, WIDTH - 80, 48),
        Qt.AlignmentFlag.AlignLeft,
        f"How many sessions fit? {plan.profile} · {plan.precision} "
        f"{format_resolution(plan.resolution)} · {b.fps:g} fps",
    )
    p.setFont(_font(24))
    rec = plan.recommended
    verdict = (
        f"recommended: {rec.policy}, {rec.max_sessions} sessions"
        if rec.max_sessions
        else "nothing meets the budget"
    )
    p.drawText(
        QRectF(40, 62, WIDTH - 80, 34),
        Qt.AlignmentFlag.AlignLeft,
        f"budget: every session ≥ {b.min_fps:g} fps, p99 ≤ {b.p99_ms:g} ms "
        f"(worst of {plan.seeds} phase seeds) — {verdict}",
    )
    top = 110
    legend_h = 84
    panel_w = (WIDTH - 3 * 40) / 2
    panel_h = HEIGHT - top - legend_h - 20
    n_max = max(max(s.sessions) for s in series)
    fps_top = b.fps * 1.1
    _panel(
        p,
        QRectF(40, top, panel_w, panel_h),
        "slowest session (fps)",
        series,
        [s.min_fps for s in series],
        n_max,
        fps_top,
        b.min_fps,
        f"≥ {b.min_fps:g} fps",
    )
    _panel(
        p,
        QRectF(80 + panel_w, top, panel_w, panel_h),
        "p99 latency (ms)",
        series,
        [s.p99_ms for s in series],
        n_max,
        b.p99_ms * P99_CLIP,
        b.p99_ms,
        f"≤ {b.p99_ms:g} ms",
    )
    _legend(p, series, QRectF(130, HEIGHT - legend_h - 6, WIDTH - 170, legend_h))
    p.end()
    return image


def _panel(
    p: QPainter,
    box: QRectF,
    title: str,
    series: Sequence[Series],
    values: Sequence[Sequence[float]],
    n_max: int,
    y_top: float,
    budget: float,
    budget_text: str,
) -> None:
    left, bottom = 90.0, 70.0
    plot = QRectF(
        box.left() + left, box.top() + 44, box.width() - left - 16, box.height() - 44 - bottom
    )
    p.setPen(INK)
    p.setFont(_font(28, bold=True))
    p.drawText(QRectF(box.left(), box.top(), box.width(), 40), Qt.AlignmentFlag.AlignHCenter, title)

    def x_of(n: float) -> float:
        return plot.left() + (n - 0.5) / n_max * plot.width()

    def y_of(v: float) -> float:
        return plot.bottom() - min(v, y_top) / y_top * plot.height()

    p.setFont(_font(22))
    step = _step(y_top)
    v = 0.0
    while v <= y_top + 1e-9:
        p.setPen(QPen(GRID, 1))
        p.drawLine(QPointF(plot.left(), y_of(v)), QPointF(plot.right(), y_of(v)))
        p.setPen(INK)
        p.drawText(
            QRectF(box.left(), y_of(v) - 14, left - 12, 28),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            f"{v:g}",
        )
        v += step
    x_step = max(1, int(_step(n_max, 8)))
    for n in range(x_step if x_step > 1 else 1, n_max + 1, x_step):
        p.drawText(
            QRectF(x_of(n) - 30, plot.bottom() + 6, 60, 28), Qt.AlignmentFlag.AlignHCenter, str(n)
        )
    p.drawText(
        QRectF(plot.left(), plot.bottom() + 34, plot.width(), 30),
        Qt.AlignmentFlag.AlignHCenter,
        "sessions (ring: the most that fit)",
    )
    p.setPen(QPen(INK, 2))
    p.drawLine(plot.bottomLeft(), plot.bottomRight())
    p.drawLine(plot.bottomLeft(), plot.topLeft())
    _budget_line(p, plot, y_of, budget, budget_text)
    _policy_lines(p, plot, series, values, x_of, y_of, n_max, y_top)


def _budget_line(
    p: QPainter, plot: QRectF, y_of: Callable[[float], float], budget: float, budget_text: str
) -> None:
    """The budget as a dashed line across ``plot``, labelled below it (above it where
    there is no room)."""
    pen = QPen(BUDGET, 4, Qt.PenStyle.DashLine)
    p.setPen(pen)
    p.drawLine(QPointF(plot.left(), y_of(budget)), QPointF(plot.right(), y_of(budget)))
    p.setFont(_font(24, bold=True))
    label = QRectF(plot.left() + 12, y_of(budget) + 8, 250, 32)
    if label.bottom() > plot.bottom() - 4:  # no room below the line: above it
        label.moveTop(y_of(budget) - 40)
    p.fillRect(label, QColor(255, 255, 255, 220))
    p.setPen(BUDGET)
    p.drawText(
        label, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, f"budget {budget_text}"
    )


def _policy_lines(
    p: QPainter,
    plot: QRectF,
    series: Sequence[Series],
    values: Sequence[Sequence[float]],
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
    n_max: int,
    y_top: float,
) -> None:
    """One line per policy, offset a little sideways so equal values stay visible: a dot
    per point (a triangle on the top edge where it is clipped at ``y_top``), a ring on the
    most sessions that fit."""
    k = len(series)
    for j, (s, ys) in enumerate(zip(series, values, strict=True)):
        colour = POLICY_COLOURS.get(s.policy, INK)
        dx = (j - (k - 1) / 2) * min(6.0, plot.width() / n_max / (k + 2))
        pts = [QPointF(x_of(n) + dx, y_of(y)) for n, y in zip(s.sessions, ys, strict=True)]
        path = QPainterPath(pts[0])
        for q in pts[1:]:
            path.lineTo(q)
        p.setPen(QPen(colour, 5))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawPath(path)
        p.setBrush(colour)
        for q, y in zip(pts, ys, strict=True):
            if y > y_top:
                tri = QPainterPath(QPointF(q.x(), q.y() - 2))
                tri.lineTo(q.x() - 9, q.y() + 14)
                tri.lineTo(q.x() + 9, q.y() + 14)
                tri.closeSubpath()
                p.setPen(Qt.PenStyle.NoPen)
                p.drawPath(tri)
            else:
                p.setPen(Qt.PenStyle.NoPen)
                p.drawEllipse(q, 6, 6)
        if s.max_sessions and s.max_sessions in s.sessions:
            q = pts[s.sessions.index(s.max_sessions)]
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(QPen(colour, 4))
            p.drawEllipse(q, 16, 16)


def _legend(p: QPainter, series: Sequence[Series], box: QRectF) -> None:
    """Policies in rows of three, each with its colour and its maximum."""
    p.setFont(_font(26))
    per_row = 3
    rows = max(1, math.ceil(len(series) / per_row))
    cell_w, cell_h = box.width() / per_row, box.height() / rows
    for j, s in enumerate(series):
        x = box.left() + (j % per_row) * cell_w
        y = box.top() + (j // per_row) * cell_h
        colour = POLICY_COLOURS.get(s.policy, INK)
        p.setPen(QPen(colour, 7))
        p.drawLine(QPointF(x, y + cell_h / 2), QPointF(x + 40, y + cell_h / 2))
        p.setPen(INK)
        fits = f"fits {s.max_sessions} sessions" if s.max_sessions else "fits none"
        p.drawText(
            QRectF(x + 50, y, cell_w - 54, cell_h),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            f"{s.policy}: {fits}",
        )


def save_plan_plot(plan: Plan, series: Sequence[Series], path: str) -> None:
    """Write the plot as a PNG; OSError naming the file if it cannot be written."""
    if not plan_image(plan, series).save(path, "PNG"):
        raise OSError(f"{path}: cannot write the PNG")
