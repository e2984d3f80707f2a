"""The bus view as a still picture for the HTML report (QPainter on a QImage, PNG bytes).

The same layout as the live view (:func:`batchscope.engine.report.bus_layout.bus_layout`):
the device band with one bar per batch stacked from its windows' cells in their
sessions' colours, a lane per session with each window's wait and its overwritten
windows (×), and the reasons the batches left in the title. Drawn on white like
the report's other plots (``render/charts.py``), at twice its nominal size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPen

from batchscope.engine.report.bus_layout import BusLayout, reasons_text
from batchscope.render.charts import GRID, INK, SCALE, _png, draw_title, ensure_gui, nice_step
from batchscope.render.palette import session_colour

LANE_PX = 22  # a session lane's height (nominal pixels)
BAND_PX = 120  # the device band's height


def bus_chart(lay: BusLayout, title: str, width: int = 1000) -> bytes:
    """``lay`` drawn as a PNG: ``title`` on top, the reasons the batches left under it."""
    ensure_gui()
    left, right, top, bottom = 70, 16, 64, 40
    lanes_px = LANE_PX * len(lay.lanes)
    height = top + BAND_PX + 14 + lanes_px + bottom
    image = QImage(width * SCALE, height * SCALE, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.scale(SCALE, SCALE)
    font, small, bold = QFont(), QFont(), QFont()
    font.setPixelSize(15)
    small.setPixelSize(12)
    bold.setPixelSize(18)
    bold.setBold(True)
    p.setPen(INK)
    p.setFont(bold)
    draw_title(p, title, width)
    p.setFont(font)
    counts = lay.reason_counts()
    p.drawText(
        QRectF(12, 34, width - 24, 22),
        Qt.AlignmentFlag.AlignLeft,
        f"why batches left: {reasons_text(counts)} · {len(lay.batches)} batches · "
        f"device busy {100 * lay.busy():.0f}%",
    )
    plot_w = width - left - right
    span = max(1e-9, lay.t_max - lay.t_min)
    band_top, band_bottom = top, top + BAND_PX
    lanes_top = band_bottom + 14

    def x(t: float) -> float:
        return left + plot_w * (min(max(t, lay.t_min), lay.t_max) - lay.t_min) / span

    def lane_y(sid: int) -> float:
        return lanes_top + LANE_PX * (lay.lanes.index(sid) + 0.5)

    # time grid and labels
    p.setFont(small)
    step = nice_step(span, 8)
    tick = math.ceil(lay.t_min / step) * step
    while tick <= lay.t_max + 1e-9:
        p.setPen(QPen(GRID, 1))
        p.drawLine(QPointF(x(tick), band_top), QPointF(x(tick), lanes_top + lanes_px))
        p.setPen(INK)
        p.drawText(
            QRectF(x(tick) - 30, lanes_top + lanes_px + 4, 60, 16),
            Qt.AlignmentFlag.AlignCenter,
            f"{tick:g}",
        )
        tick += step
    p.drawText(QRectF(left, height - 20, plot_w, 18), Qt.AlignmentFlag.AlignCenter, "time (s)")
    p.setPen(QPen(GRID, 1))
    p.drawRect(QRectF(left, band_top, plot_w, BAND_PX))
    p.setPen(INK)
    p.drawText(
        QRectF(0, band_top, left - 8, BAND_PX),
        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
        "device",
    )
    _cells(p, lay, x, band_bottom)
    _lanes(p, lay, x, lane_y, left, plot_w)
    _marks(p, lay, x, lane_y)
    p.end()
    return _png(image)


def _cells(p: QPainter, lay: BusLayout, x: Callable[[float], float], band_bottom: float) -> None:
    """The device band's cells: one per window, stacked in its batch's bar, in its
    session's colour."""
    band_h = lay.band[1] - lay.band[0]
    for sid, (x0, x1, y0) in lay.cells.items():
        colour = QColor(session_colour(sid))
        for a, b, y in zip(x0.tolist(), x1.tolist(), y0.tolist(), strict=True):
            px0, px1 = x(a), x(b)
            h = BAND_PX * lay.cell_h / band_h
            yb = band_bottom - BAND_PX * y / band_h
            gap = 0.5 if px1 - px0 > 3 else 0.0
            p.fillRect(QRectF(px0, yb - h + gap, max(0.6, px1 - px0 - gap), h - gap), colour)


def _lanes(
    p: QPainter,
    lay: BusLayout,
    x: Callable[[float], float],
    lane_y: Callable[[int], float],
    left: float,
    plot_w: float,
) -> None:
    """A lane per session: its name, its line, and each of its windows' waits on it."""
    for sid in lay.lanes:
        y = lane_y(sid)
        p.setPen(INK)
        p.drawText(
            QRectF(0, y - 9, left - 8, 18),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            f"S{sid}",
        )
        p.setPen(QPen(GRID, 0.8))
        p.drawLine(QPointF(left, y), QPointF(left + plot_w, y))
        if sid in lay.waits:
            p.setPen(QPen(QColor(session_colour(sid)).darker(115), 2.4))
            arrival, start = lay.waits[sid]
            for a, s in zip(arrival.tolist(), start.tolist(), strict=True):
                p.drawLine(QPointF(x(a), y), QPointF(max(x(s), x(a) + 0.8), y))


def _marks(
    p: QPainter, lay: BusLayout, x: Callable[[float], float], lane_y: Callable[[int], float]
) -> None:
    """Each overwritten window, a × just above its lane, and each window dropped as too
    old, a ▾ just below it."""
    p.setPen(QPen(QColor("#555555"), 1.0))
    times, _, sessions = lay.overwrites
    for t, sid in zip(times.tolist(), sessions.tolist(), strict=True):
        cx, cy, r = x(t), lane_y(sid) - 6, 2.5  # just above the lane's wait line
        p.drawLine(QPointF(cx - r, cy - r), QPointF(cx + r, cy + r))
        p.drawLine(QPointF(cx - r, cy + r), QPointF(cx + r, cy - r))
    p.setPen(QPen(QColor("#b3261e"), 1.4))  # a window dropped as too old: a ▾ below the lane
    times, _, sessions = lay.expiries
    for t, sid in zip(times.tolist(), sessions.tolist(), strict=True):
        cx, cy, r = x(t), lane_y(sid) + 6, 2.8
        p.drawLine(QPointF(cx - r, cy - r), QPointF(cx + r, cy - r))
        p.drawLine(QPointF(cx - r, cy - r), QPointF(cx, cy + r))
        p.drawLine(QPointF(cx + r, cy - r), QPointF(cx, cy + r))
