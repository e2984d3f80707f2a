"""Still plots of a report, as PNG bytes, drawn with QPainter on a QImage.

Why not pyqtgraph: these plots go into a file (the HTML report of ``run
--report`` and the app's File → Export report), not on a screen, so they are
drawn once from the report's JSON, with no widget, no event loop and no
window: under the ``offscreen`` platform when no app is running. A report
keeps percentiles, not every window's latency, so the latency plots are
percentile bars (p50, p95, p99, max), not histograms.

Every plot is drawn at twice its nominal size, so it stays sharp printed and
on a projector; colours are the Okabe–Ito pair (blue, vermilion) that reads
in grey and to colour-blind eyes; predictions are hatched.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontMetricsF,
    QGuiApplication,
    QImage,
    QPainter,
    QPen,
)
from PySide6.QtWidgets import QApplication

SCALE = 2  # pixels per nominal pixel
MARGINS = (64, 16, 64, 56)  # a bar chart's left, right, top and bottom margins (nominal px)
LABEL_PX = 15  # a category label's font size (nominal px), made smaller to fit its slot
MIN_LABEL_PX = 11  # no smaller: a word wider than its slot at this size breaks anywhere
MAX_LABEL_LINES = 4  # a label that wraps to more lines at LABEL_PX is set smaller
LABEL_PAD = 2  # nominal px either side of a category label in its slot
INK = QColor("#111111")
GRID = QColor("#c8c8c8")
LIVE = QColor("#0b4f9c")
LIVE_LIGHT = QColor("#6fa8e8")
PREDICTED = QColor("#c84f00")
PREDICTED_LIGHT = QColor("#f0a56b")

_app: QApplication | None = None


def ensure_gui() -> None:
    """An application for fonts and painting; offscreen unless one already runs.

    A QApplication (not the lighter QGuiApplication), so that widgets made later
    in the same process (the app, the UI tests) still find the kind they need.
    """
    global _app
    if QGuiApplication.instance() is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        _app = QApplication([])


@dataclass(frozen=True)
class Series:
    name: str
    color: QColor
    values: Sequence[float | None]  # one per group; None: no bar
    hatched: bool = False  # a prediction


@dataclass(frozen=True)
class LabelRoom:
    """How a bar chart's category labels are set: whole, wrapped within their room."""

    font_px: int
    room: float  # nominal px across that one label may take (``every`` groups' width)
    height: float  # nominal px under the axis that the tallest label takes
    every: int = 1  # every how many groups a label is drawn (1: all; more: many sessions)
    anywhere: bool = False  # a word is wider than the whole chart: break it anywhere

    def font(self) -> QFont:
        font = QFont()
        font.setPixelSize(self.font_px)
        return font

    def flags(self) -> int:
        wrap = Qt.TextFlag.TextWrapAnywhere if self.anywhere else Qt.TextFlag.TextWordWrap
        return int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop | wrap)

    def rect(self, label: str) -> QRectF:
        """The rect ``label`` takes when drawn in its room (width and height, nominal px)."""
        metrics = QFontMetricsF(self.font())
        box = QRectF(0, 0, self.room - 2 * LABEL_PAD, 100_000)
        return metrics.boundingRect(box, self.flags(), label)

    def shown(self, groups: Sequence[str]) -> list[str]:
        return list(groups[:: self.every])


def category_room(groups: Sequence[str], width: int = 1000) -> LabelRoom:
    """How to set every category label of a bar chart ``width`` nominal px wide whole.

    The largest font (LABEL_PX down to MIN_LABEL_PX) at which every word fits the
    group's width and no label needs more than MAX_LABEL_LINES lines; failing the
    lines, the largest at which the words fit, on more lines. Where even the words do
    not fit (64 sessions' "s63" in 560 px), a label every 2, 3, … groups, centred on
    its group with the room of them all.
    """
    ensure_gui()
    left, right, _, _ = MARGINS
    slot = (width - left - right) / max(1, len(groups))
    for every in range(1, len(groups) + 1):
        shown = list(groups[::every])
        words = [w for g in shown for w in g.split()]
        fitting = None  # the largest size at which every word fits
        for px in range(LABEL_PX, MIN_LABEL_PX - 1, -1):
            room = LabelRoom(px, slot * every, 0.0, every)
            metrics = QFontMetricsF(room.font())
            if any(metrics.horizontalAdvance(w) > room.room - 2 * LABEL_PAD for w in words):
                continue
            tallest = max((room.rect(g).height() for g in shown), default=0.0)
            fitting = fitting or LabelRoom(px, room.room, tallest, every)
            if tallest <= MAX_LABEL_LINES * metrics.lineSpacing():
                return LabelRoom(px, room.room, tallest, every)
        if fitting is not None:
            return fitting
    room = LabelRoom(MIN_LABEL_PX, width - left - right, 0.0, max(1, len(groups)), True)
    return LabelRoom(MIN_LABEL_PX, room.room, room.rect(groups[0]).height(), room.every, True)


def nice_step(top: float, ticks: int = 5) -> float:
    """A 1-2-5 step that cuts [0, top] into about ``ticks`` parts."""
    raw = max(top, 1e-9) / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def bar_chart(
    title: str,
    groups: Sequence[str],
    series: Sequence[Series],
    unit: str,
    width: int = 1000,
    height: int = 380,
) -> bytes:
    """Grouped bars: one group per label, one bar per series; PNG bytes.

    ``height`` is the chart's with one line of labels; it grows by what the labels need
    (:func:`category_room`), so that every label reads whole.
    """
    ensure_gui()
    left, right, top, bottom = MARGINS
    labels = category_room(groups, width)
    grow = max(0, math.ceil(labels.height) + 14 - bottom)
    bottom, height = bottom + grow, height + grow
    image = QImage(width * SCALE, height * SCALE, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.scale(SCALE, SCALE)
    font = QFont()
    font.setPixelSize(15)
    small = QFont(font)
    small.setPixelSize(12)
    bold = QFont(font)
    bold.setPixelSize(18)
    bold.setBold(True)

    p.setPen(INK)
    p.setFont(bold)
    draw_title(p, title, width)
    _legend(p, series, font, width)

    plot = QRectF(left, top, width - left - right, height - top - bottom)
    values = [v for s in series for v in s.values if v is not None]
    peak = max(values, default=0.0) or 1.0
    step = nice_step(peak)
    y_max = step * math.ceil(peak * 1.08 / step)

    def y(value: float) -> float:
        return plot.bottom() - plot.height() * value / y_max

    p.setFont(small)
    _value_axis(p, plot, y, y_max, step, unit)

    n = max(1, len(groups))
    slot = plot.width() / n
    bar = min(48.0, slot * 0.8 / max(1, len(series)))
    for g, label in enumerate(groups):
        x0 = plot.left() + g * slot + (slot - bar * len(series)) / 2
        _group_bars(p, series, g, x0, bar, plot.bottom(), y, small)
        if g % labels.every == 0:
            p.setFont(labels.font())
            x = plot.left() + (g + 0.5) * slot - labels.room / 2 + LABEL_PAD
            x = min(max(x, 0.0), width - labels.room + LABEL_PAD)  # inside the picture
            p.drawText(
                QRectF(x, plot.bottom() + 6, labels.room - 2 * LABEL_PAD, bottom - 8),
                labels.flags(),
                label,
            )
            p.setFont(small)
    p.setPen(QPen(INK, 1.5))
    p.drawLine(plot.left(), plot.bottom(), plot.right(), plot.bottom())
    p.end()
    return _png(image)


def _value_axis(
    p: QPainter,
    plot: QRectF,
    y: Callable[[float], float],
    y_max: float,
    step: float,
    unit: str,
) -> None:
    """The value axis left of ``plot``: a grid line and its value every ``step`` up to
    ``y_max``, and ``unit`` written upwards beside them."""
    tick = 0.0
    while tick <= y_max + 1e-9:
        p.setPen(QPen(GRID, 1))
        p.drawLine(plot.left(), y(tick), plot.right(), y(tick))
        p.setPen(INK)
        p.drawText(
            QRectF(0, y(tick) - 9, plot.left() - 8, 18),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            f"{tick:g}",
        )
        tick += step
    p.save()
    p.translate(14, plot.center().y())
    p.rotate(-90)
    p.drawText(QRectF(-80, -10, 160, 20), Qt.AlignmentFlag.AlignCenter, unit)
    p.restore()


def _group_bars(
    p: QPainter,
    series: Sequence[Series],
    g: int,
    x0: float,
    bar: float,
    base: float,
    y: Callable[[float], float],
    small: QFont,
) -> None:
    """Group ``g``'s bars from ``x0``, one per series (``bar`` nominal px wide, from the
    axis at ``base`` up; a prediction hatched), each with its value above it where that fits."""
    for k, s in enumerate(series):
        value = s.values[g] if g < len(s.values) else None
        if value is None:
            continue
        rect = QRectF(x0 + k * bar + 1, y(value), bar - 2, base - y(value))
        _fill(p, rect, s)
        text = f"{value:.0f}" if value >= 10 else f"{value:.1f}"
        fitted = _fitted(small, text, bar + 2)  # wider, it would cover the next bar's
        if fitted is not None:
            p.setFont(fitted)
            p.drawText(
                QRectF(rect.left() - 12, rect.top() - 17, rect.width() + 24, 16),
                Qt.AlignmentFlag.AlignCenter | Qt.AlignmentFlag.AlignBottom,
                text,
            )
            p.setFont(small)


def _fill(p: QPainter, rect: QRectF, s: Series) -> None:
    """A bar or a legend box in ``s``'s colour (a prediction hatched and outlined); the pen
    left at ink."""
    p.fillRect(rect, s.color)
    if s.hatched:
        p.fillRect(rect, QBrush(QColor("white"), Qt.BrushStyle.BDiagPattern))
        p.setPen(QPen(s.color, 1.5))
        p.drawRect(rect)
    p.setPen(INK)


def _fitted(font: QFont, text: str, room: float, smallest: int = 9) -> QFont | None:
    """``font``, or a smaller one (down to ``smallest`` px), in which ``text`` fits ``room``
    nominal px; None where it does not fit even then."""
    for px in range(font.pixelSize(), smallest - 1, -1):
        sized = QFont(font)
        sized.setPixelSize(px)
        if QFontMetricsF(sized).horizontalAdvance(text) <= room:
            return sized
    return None


def draw_title(p: QPainter, title: str, width: int) -> None:
    """A chart's title on its first line, cut with "…" where it is wider than the chart
    (the figure's alt text and the report's heading say it whole)."""
    room = width - 24
    text = p.fontMetrics().elidedText(title, Qt.TextElideMode.ElideRight, room)
    p.drawText(QRectF(12, 6, room, 26), Qt.AlignmentFlag.AlignLeft, text)


def _legend(p: QPainter, series: Sequence[Series], font: QFont, width: int) -> None:
    p.setFont(font)
    metrics = p.fontMetrics()
    x = 12.0
    for s in series:
        _fill(p, QRectF(x, 38, 16, 16), s)
        p.drawText(QRectF(x + 22, 36, width, 20), Qt.AlignmentFlag.AlignLeft, s.name)
        x += 22 + metrics.horizontalAdvance(s.name) + 24


def _png(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


# -- the report's plots ---------------------------------------------------------------


def _live(segment: Mapping[str, Any], key: str) -> float | None:
    """A measured figure of ``segment``; None (no bar) when it was too short to measure."""
    overall = segment.get("overall")
    if not overall:
        return None
    return overall["latency_ms"][key] if key in ("p50", "p99") else overall[key]


def _predicted(segment: Mapping[str, Any], key: str) -> float | None:
    pred = segment.get("predicted")
    if not pred:
        return None
    return pred["latency_ms"][key] if key in ("p50", "p99") else pred[key]


def segments_fps_chart(segments: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> bytes:
    """Mean and min fps of every segment, with the simulator's mean where predicted."""
    series = [
        Series("mean fps", LIVE, [_live(s, "mean_fps") for s in segments]),
        Series("min fps", LIVE_LIGHT, [_live(s, "min_fps") for s in segments]),
    ]
    if any(s.get("predicted") for s in segments):
        series.append(
            Series(
                "predicted mean fps",
                PREDICTED,
                [_predicted(s, "mean_fps") for s in segments],
                hatched=True,
            )
        )
    return bar_chart("Frames per second per session, by segment", labels, series, "fps")


def segments_latency_chart(segments: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> bytes:
    """p50 and p99 latency of every segment, live and predicted."""
    series = [
        Series("p50", LIVE, [_live(s, "p50") for s in segments]),
        Series("p99", LIVE_LIGHT, [_live(s, "p99") for s in segments]),
    ]
    if any(s.get("predicted") for s in segments):
        series += [
            Series("predicted p50", PREDICTED, [_predicted(s, "p50") for s in segments], True),
            Series(
                "predicted p99", PREDICTED_LIGHT, [_predicted(s, "p99") for s in segments], True
            ),
        ]
    return bar_chart("End-to-end latency, by segment", labels, series, "ms")


def session_fps_chart(segment: Mapping[str, Any]) -> bytes:
    """Each session's fps in one segment: who starves."""
    sessions = segment["sessions"]
    series = [Series("fps", LIVE, [s["fps"] for s in sessions])]
    pred = segment.get("predicted")
    if pred:
        series.append(Series("predicted mean", PREDICTED, [pred["mean_fps"]] * len(sessions), True))
    labels = [f"s{s['id']}" for s in sessions]
    return bar_chart("fps of each session", labels, series, "fps", width=560, height=320)


def latency_percentiles_chart(segment: Mapping[str, Any]) -> bytes:
    """One segment's latency percentiles (the report keeps these, not every window's)."""
    lat = segment["overall"]["latency_ms"]
    keys = ("p50", "p95", "p99", "max")
    series = [Series("live", LIVE, [lat[k] for k in keys])]
    if segment.get("predicted"):
        series.append(
            Series(
                "predicted",
                PREDICTED,
                [_predicted(segment, "p50"), None, _predicted(segment, "p99"), None],
                True,
            )
        )
    return bar_chart("latency percentiles", list(keys), series, "ms", width=560, height=320)
