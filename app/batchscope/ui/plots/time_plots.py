"""Plot cards and the time plots (fps, throughput, memory) with config-change markers.

pyqtgraph as its examples teach: every item is created once and fed with
``setData``/``setOpts`` from the one UI timer, never ``clear()`` + ``plot()``;
``PlotCurveItem`` for the many session lines; float64 x with clip-to-view.
The time axis is seconds since the engine started; the plots show the last
``SPAN_S`` seconds ("live"), or the whole run (:class:`~batchscope.ui.live.run_history.
RunHistory`, a bounded copy of it) with its segments' boundaries; both start where the
run's plots start (the engine's start, or an experiment's).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsTextItem,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from batchscope.engine.metrics import MONITOR_PERIOD_S, Event, TimelineSample
from batchscope.engine.snapshot import Snapshot
from batchscope.render.palette import session_colour
from batchscope.ui.plain_text import CardTitle
from batchscope.ui.plots.lines import pen, style_labels
from batchscope.ui.plots.notes import EventMarkers
from batchscope.ui.theme import MEMORY_SERIES, Look

SPAN_S = 60.0
#: Samples further apart than this (s; the monitor samples every MONITOR_PERIOD_S) have no
#: data between them: the lines break there. Joined, a stall (a process-wide pause while
#: a serving engine started) drew a fall from 20 to 0 fps that never happened.
GAP_S = 4 * MONITOR_PERIOD_S


@dataclass
class TimeWindow:
    """The timeline samples of the visible span, as arrays (computed once per tick)."""

    t: np.ndarray
    fps: dict[int, np.ndarray] = field(default_factory=dict)
    throughput: np.ndarray = field(default_factory=lambda: np.empty(0))
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    x_range: tuple[float, float] = (0.0, SPAN_S)
    since: float = 0.0  # where the plots start (s): the engine's start, or an experiment's
    whole: bool = False  # the whole run since ``since`` (else the last SPAN_S s)


def time_window(
    timeline: Sequence[TimelineSample], now: float, span: float = SPAN_S, since: float = 0.0
) -> TimeWindow:
    """The samples of the last ``span`` s (none before ``since``) as arrays; where two are
    more than ``GAP_S`` apart, one NaN sample between them (every curve draws
    ``connect="finite"``: a gap). The span starts at ``since`` until it has run ``span`` s,
    as a fresh run's plots fill from the left."""
    start = max(now - span, since)
    i = len(timeline)
    while i > 0 and timeline[i - 1].t >= start:
        i -= 1
    samples = timeline[i:]
    t = np.fromiter((s.t for s in samples), float, len(samples))
    sids = sorted({sid for s in samples for sid in s.fps})
    fps = {
        sid: np.fromiter((s.fps.get(sid, np.nan) for s in samples), float, len(samples))
        for sid in sids
    }
    keys = sorted({k for s in samples for k in s.memory})
    memory = {
        k: np.fromiter((s.memory.get(k, np.nan) for s in samples), float, len(samples))
        for k in keys
    }
    throughput = np.fromiter((s.throughput_wps for s in samples), float, len(samples))
    x_range = (max(since, now - span), max(since + span, now))
    return _broken(t, fps, throughput, memory, GAP_S, MONITOR_PERIOD_S, x_range, since)


class Points(Protocol):
    """A bounded copy of the whole run (``batchscope.ui.live.RunHistory``)."""

    origin: float  # where the plots start (s)
    step: float  # s per point

    @property
    def gap_s(self) -> float: ...

    def arrays(
        self,
    ) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray, dict[str, np.ndarray]]: ...


def whole_window(history: Points, now: float, least: float = SPAN_S) -> TimeWindow:
    """The whole run since ``history.origin`` (its decimated points), over at least
    ``least`` s; where two points are more than ``history.gap_s`` apart, a gap."""
    t, fps, throughput, memory = history.arrays()
    x_range = (history.origin, max(history.origin + least, now))
    window = _broken(
        t, fps, throughput, memory, history.gap_s, history.step, x_range, history.origin
    )
    window.whole = True
    return window


def _broken(
    t: np.ndarray,
    fps: dict[int, np.ndarray],
    throughput: np.ndarray,
    memory: dict[str, np.ndarray],
    gap: float,
    step: float,
    x_range: tuple[float, float],
    since: float,
) -> TimeWindow:
    """The arrays with one NaN sample (``step`` s after the last before it) in each gap."""
    gaps = np.flatnonzero(np.diff(t) > gap) + 1  # the first sample after each gap

    def broken(values: np.ndarray) -> np.ndarray:
        return np.insert(values, gaps, np.nan)

    return TimeWindow(
        np.insert(t, gaps, t[gaps - 1] + step),
        {sid: broken(v) for sid, v in fps.items()},
        broken(throughput),
        {k: broken(v) for k, v in memory.items()},
        x_range,
        since,
    )


def style_legend(legend: pg.LegendItem, colour: str) -> None:
    """Colour a legend's labels; each is re-rendered (pyqtgraph only stores the colour)."""
    legend.setLabelTextColor(colour)
    for _sample, label in legend.items:
        label.setText(label.text)


#: The smallest a plot card is laid out (px): below it, axes and bars stop reading.
MIN_CARD_PX = (220, 150)
#: The least height of a plot's data area (px), between its title and its time axis: a
#: card of MIN_CARD_PX in presentation type left the fps band 40 px at 1280×800.
MIN_VIEW_PX = 50
AXIS_BAND_AIR_PX = 6  # a first guess at the axis's offsets and margins beyond two lines
AXIS_LABEL_AIR_PX = 2  # between an axis label's ends and its axis's
MIN_CUT_CHARS = 4  # a label cut shorter than this is not shown


def fitted_axis_text(text: str, room: float, width_of: Callable[[str], float]) -> str:
    """``text`` if it fits ``room`` px (``width_of``: a text's width as drawn), else its
    first shorter form that does: without a parenthetical that says who ("windows (all
    sessions)" → "windows"), or with a unit's noun only ("share of batches (%)" →
    "batches (%)"); else that cut short with "…" (none when not even a word's start fits)."""
    forms = [text]
    head, paren, inner = text.rstrip(")").partition(" (")
    if paren:
        if len(inner) <= 3:  # a unit: keep it
            forms.append(f"{head.split()[-1]} ({inner})")
        else:
            forms.append(head)
    for form in forms:
        if width_of(form) <= room:
            return form
    cut = forms[-1]
    while cut and width_of(cut.rstrip() + "…") > room:
        cut = cut[:-1]
    # a stub says nothing ("wi…" on a projector): no label then, the title says what it is
    return cut.rstrip() + "…" if len(cut.rstrip()) >= MIN_CUT_CHARS else ""


class PlotCard(QFrame):
    """A titled frame holding one pyqtgraph plot, styled by the current look."""

    def __init__(
        self,
        title: str,
        look: Look,
        x_label: str,
        y_label: str,
        header_extra: QWidget | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        # its width set (a key or a long title must never widen the window), its height
        # the layout's (minimumSizeHint)
        self.setMinimumWidth(MIN_CARD_PX[0])
        self.look = look
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 4)
        layout.setSpacing(2)
        head = QHBoxLayout()
        self.title = CardTitle(title)
        self.title.setObjectName("cardTitle")
        # a long live title must never widen the window: it is fitted (ui/plain_text.py)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        head.addWidget(self.title, 1)
        if header_extra is not None:
            head.addWidget(header_extra)
        layout.addLayout(head)
        self.widget = pg.PlotWidget()
        self.plot = self.widget.getPlotItem()
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.setClipToView(True)
        self._labels = (x_label, y_label)
        for name in ("left", "bottom"):
            self.plot.getAxis(name).enableAutoSIPrefix(False)
        layout.addWidget(self.widget, 1)
        self._title_text = title
        self._measure: QGraphicsTextItem | None = None  # for the axis labels' lengths
        self.set_look(look)
        self.plot.getViewBox().sigResized.connect(self._fit_axis_labels)

    def minimumSizeHint(self) -> QSize:
        """MIN_CARD_PX, or taller where the title, its key and the plot need it (a set
        minimum height would override what the layout needs: Qt takes it over the hint)."""
        return super().minimumSizeHint().expandedTo(QSize(*MIN_CARD_PX))

    def set_title(self, text: str, keep: int = 1) -> None:
        """``text``: "Name — figure · figure · …"; the name and the first ``keep``
        figures always show (:class:`~batchscope.ui.plain_text.CardTitle`)."""
        self._title_text = text
        self.title.set_title(text, keep)

    def set_axis_label(self, axis: str, text: str) -> None:
        """Change the label of the "bottom" or "left" axis (styled; no-op if unchanged)."""
        index = ("bottom", "left").index(axis)
        if self._labels[index] != text:
            self._labels = (text, self._labels[1]) if index == 0 else (self._labels[0], text)
            self._fit_axis_label(axis)

    def _fit_axis_label(self, name: str) -> None:
        """The axis's label as long as the axis lets it be (the left axis of a short pane
        cut "windows (all sessions)" at both ends): whole, else a shorter form of it."""
        axis = self.plot.getAxis(name)
        text = self._labels[("bottom", "left").index(name)]
        view = self.plot.getViewBox()  # the axis runs along it (laid out in the same pass)
        room = view.height() if name == "left" else view.width()
        style = {"color": self.look.theme.muted, "font-size": f"{self.look.axis_pt}pt"}
        shown = fitted_axis_text(
            text, room - AXIS_LABEL_AIR_PX, lambda t: self._drawn_width(axis, t, style)
        )
        if axis.labelText != shown:
            axis.setLabel(shown, **style)

    def _drawn_width(self, axis: pg.AxisItem, text: str, style: dict[str, str]) -> float:
        """How long ``text`` is as ``axis`` draws its label: its own markup (pyqtgraph adds
        a space for the units), its item's font and margins, on a text item of our own
        (measured with metrics alone it came out 2-5 px short)."""
        if self._measure is None:
            self._measure = QGraphicsTextItem()
        kept = axis.labelText, axis.labelStyle
        axis.labelText, axis.labelStyle = text, style
        try:
            html = axis.labelString()
        finally:
            axis.labelText, axis.labelStyle = kept
        self._measure.setFont(axis.label.font())
        self._measure.setHtml(html)
        return float(self._measure.boundingRect().width())

    def _fit_axis_labels(self) -> None:
        for name in ("bottom", "left"):
            self._fit_axis_label(name)
        band = self.widget.height() - self.plot.getViewBox().height()
        if band > 0:
            self._set_plot_least_height(band)

    def _set_plot_least_height(self, band: float) -> None:
        """The plot widget at least MIN_VIEW_PX of data area plus ``band`` px (its axes'
        and margins'); the pane holding the card (a tab, a splitter) is asked again."""
        least = math.ceil(MIN_VIEW_PX + band)
        if least != self.widget.minimumHeight():
            self.widget.setMinimumHeight(least)
            self.updateGeometry()

    def set_look(self, look: Look) -> None:
        self.look = look
        t = look.theme
        self.widget.setBackground(t.plot)
        font = QFont("DejaVu Sans")
        font.setPointSize(look.axis_pt)
        for name in ("bottom", "left"):
            axis = self.plot.getAxis(name)
            axis.setPen(pg.mkPen(t.grid))
            axis.setTextPen(pg.mkPen(t.muted))
            axis.setStyle(tickFont=font, tickTextOffset=4)
            axis.labelText = None  # restyled: set again in the new colour and size
            self._fit_axis_label(name)
        # the data area keeps MIN_VIEW_PX over the bottom axis's ticks and label, so the
        # card's least height (its layout's) grows with the look's type: a first guess
        # from the type, then what the plot's axes and margins take once laid out
        self._set_plot_least_height(2 * QFontMetrics(font).height() + AXIS_BAND_AIR_PX)
        self.plot.showGrid(x=True, y=True, alpha=0.18 if t.name == "dark" else 0.3)
        self.restyle()

    def restyle(self) -> None:
        """Re-create pens after a look change (subclasses)."""


WHOLE_RUN_TIP = (
    "Show the whole run (since it, or the experiment playing, started), its segments "
    "marked; click again to follow the last {span:g} s live"
)
SEGMENT_GAP_PX = 6  # the least air between two segment numbers along the time axis


class TimePlot(PlotCard):
    """A plot over the last ``SPAN_S`` seconds, or the whole run, with event markers
    (``notes.py``) and the segments' boundaries; "Whole run" in its header switches."""

    #: the user asked for the whole run (True) or the live span (False)
    whole_run_toggled = Signal(bool)

    def __init__(
        self,
        title: str,
        look: Look,
        y_label: str,
        labelled: bool = True,
    ) -> None:
        self.whole_button = QToolButton()
        self.whole_button.setObjectName("wholeRun")
        self.whole_button.setText("Whole run")
        self.whole_button.setCheckable(True)
        self.whole_button.setToolTip(WHOLE_RUN_TIP.format(span=SPAN_S))
        super().__init__(title, look, "time (s)", y_label, self.whole_button)
        self.whole_button.toggled.connect(self.whole_run_toggled)
        self.markers = EventMarkers(self.plot, look, labelled)
        # segment index -> its boundary (a thin line at its start, its number at the foot)
        self._segment_lines: dict[int, pg.InfiniteLine] = {}
        self._segment_labels: dict[int, pg.InfLineLabel] = {}
        self._x_range: tuple[float, float] | None = None
        # a note's height is a fraction of the plot's: lay them out again when it resizes,
        # from the event loop (a resize may come while the scene paints). The plot calls
        # the markers and hands them what to keep clear; the markers holding this plot's
        # bound method crashed painting ("Cannot destroy paint device that is being
        # painted", then QPainter::restore)
        self._refit_soon = QTimer(self)
        self._refit_soon.setSingleShot(True)
        self._refit_soon.setInterval(0)
        self._refit_soon.timeout.connect(self._refit)
        self.plot.getViewBox().sigResized.connect(self._refit_soon.start)
        self.plot.enableAutoRange(x=False)
        self.plot.setXRange(0, SPAN_S, padding=0)

    def add_events(self, events: Sequence[Event]) -> None:
        self.markers.add(events)

    @property
    def whole_run(self) -> bool:
        return self.whole_button.isChecked()

    def show_whole_run(self, whole: bool) -> None:
        """Check or uncheck "Whole run" without saying so (the window keeps them alike)."""
        if self.whole_button.isChecked() != whole:
            self.whole_button.blockSignals(True)
            self.whole_button.setChecked(whole)
            self.whole_button.blockSignals(False)

    def set_segments(self, starts: Sequence[tuple[int, float]]) -> None:
        """The segments' boundaries to draw: (index, start s) each, in order; those gone
        (before the plots' start) are removed."""
        wanted = dict(starts)
        for index in [i for i in self._segment_lines if i not in wanted]:
            # its label's wrapper first: dropped after its line (which deletes the label
            # with it), it crashed the process (a segfault at an experiment's start)
            del self._segment_labels[index]
            self.plot.removeItem(self._segment_lines.pop(index))
        for index, start in wanted.items():
            if index in self._segment_lines:
                continue
            line = pg.InfiniteLine(pos=start, angle=90, movable=False)
            line.setZValue(-0.5)  # under the curves and the event markers
            label = pg.InfLineLabel(line, f"#{index}", position=0.04, anchors=[(0, 1), (0, 1)])
            label.setToolTip(f"segment {index} starts at {start:.1f} s (the Segments table)")
            self._segment_lines[index] = line
            self._segment_labels[index] = label
            self._style_segment(line)
            self.plot.addItem(line, ignoreBounds=True)

    @property
    def segment_lines(self) -> dict[int, pg.InfiniteLine]:
        return self._segment_lines

    def _style_segment(self, line: pg.InfiniteLine) -> None:
        colour = pg.mkColor(self.look.theme.muted)
        colour.setAlpha(150)
        line.setPen(pg.mkPen(colour, width=1))
        style_labels(line, self.look.theme.muted, self.look)

    def _fit_segment_labels(self, x_range: tuple[float, float]) -> None:
        """In the whole run's view, a segment's number where it has room: from the left,
        each right of its line and clear of the last one shown by SEGMENT_GAP_PX (a 2-hour
        run has many boundaries)."""
        width = self.plot.getViewBox().width()
        x0, x1 = x_range
        if width <= 0 or x1 <= x0:
            return
        if not self.whole_run:  # live, the change notes name each boundary: no numbers
            for label in self._segment_labels.values():  # over them (the fit check saw it)
                label.setVisible(False)
            return
        free = -np.inf  # where the next label may start (px from the plot's left)
        for index in sorted(self._segment_labels):
            label = self._segment_labels[index]
            x = (self._segment_lines[index].value() - x0) * width / (x1 - x0)
            need = label.textItem.boundingRect().width()
            show = max(0.0, free) <= x and x + need <= width
            if show:
                free = x + need + SEGMENT_GAP_PX
            if label.isVisible() != show:
                label.setVisible(show)

    def keep_clear(self) -> list[QRectF]:
        """Scene rects of the plot's own labels, which the notes must not cover."""
        return []

    def set_look(self, look: Look) -> None:
        super().set_look(look)
        if hasattr(self, "markers"):
            self.markers.set_look(look)
            for line in self._segment_lines.values():
                self._style_segment(line)

    def scroll(self, window: TimeWindow) -> None:
        self.plot.setXRange(*window.x_range, padding=0)
        # the markers before the plots' start go (an event's time is rounded to the ms: the
        # change that opened an experiment's segment stays); older ones stay for the whole run
        self.markers.prune(window.since - 1e-3)
        self._x_range = window.x_range
        self._refit()

    def _refit(self) -> None:
        if self._x_range is not None:
            self.markers.fit(self._x_range, self.keep_clear())
            self._fit_segment_labels(self._x_range)


TARGET_AT = 0.98  # where the "target" label sits along its line (0: left, 1: right)
BAND_ABOVE = 12  # sessions: above this the fps plot draws a band, not one line each


@dataclass(frozen=True)
class FpsBand:
    """Per timeline sample, the min, median and max fps over the sessions (NaN: none)."""

    lo: np.ndarray
    mid: np.ndarray
    hi: np.ndarray


def fps_band(series: Sequence[np.ndarray]) -> FpsBand:
    stack = np.vstack(series)
    seen = np.isfinite(stack).any(axis=0)
    lo, mid, hi = (np.full(stack.shape[1], np.nan) for _ in range(3))
    if seen.any():
        cols = stack[:, seen]
        lo[seen], mid[seen], hi[seen] = (
            np.nanmin(cols, axis=0),
            np.nanmedian(cols, axis=0),
            np.nanmax(cols, axis=0),
        )
    return FpsBand(lo, mid, hi)


def slowest(snap: Snapshot) -> int | None:
    """The running session with the lowest fps now (ties: the lowest id); None if none runs."""
    running = [s for s in snap.sessions if s.state == "running"]
    return min(running, key=lambda s: (s.fps, s.id)).id if running else None


class FpsPlot(TimePlot):
    """Frames per second per session and the target fps.

    Up to ``BAND_ABOVE`` sessions: one line each, in its colour. Above, 64 or 256
    lines would only tangle: the sessions' min–max is a shaded band with the
    median through it, and the slowest session (the one a user waits on) is
    drawn on top in its colour and named in the key under the title and in the title.
    """

    def __init__(self, look: Look) -> None:
        self._curves: dict[int, pg.PlotCurveItem] = {}
        self.target = pg.InfiniteLine(pos=30, angle=0, movable=False)
        self.band_lo = pg.PlotCurveItem(connect="finite")
        self.band_hi = pg.PlotCurveItem(connect="finite")
        self.band = pg.FillBetweenItem(self.band_lo, self.band_hi)
        self.median = pg.PlotCurveItem(connect="finite")
        self.slow = pg.PlotCurveItem(connect="finite")
        self.slowest_id: int | None = None
        self.slowest_label = ""  # the key's text for the slowest session
        super().__init__("Frames per second, per session", look, "fps")
        self.target_label = pg.InfLineLabel(
            self.target, "target", position=TARGET_AT, anchors=[(1, 1), (1, 1)]
        )
        self.plot.addItem(self.target, ignoreBounds=True)
        for item in (self.band_lo, self.band_hi, self.band, self.median, self.slow):
            self.plot.addItem(item)
            item.setVisible(False)
        self.band.setZValue(-1)
        self.slow.setZValue(2)
        # the key to the band, under the title: a legend box inside the plot sat on the
        # data of a short pane (at 64 sessions the fps are low, where its corner was)
        self.key = QLabel()
        self.key.setObjectName("plotKey")
        self.key.setTextFormat(Qt.TextFormat.RichText)  # its chips; no user text in it
        self.key.setWordWrap(True)  # between chips on a narrow card
        self.key.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.layout().insertWidget(1, self.key)
        self.key.setVisible(False)
        self._show_key()
        self.plot.enableAutoRange(y=False)
        self.plot.setYRange(0, 35, padding=0)
        self.restyle()

    def keep_clear(self) -> list[QRectF]:
        """The "target" label's rect, from the view's geometry and range now (its own
        scene rect follows them only once the event loop has run). It sits above its
        line, or under it when the line is too near the top of a low plot to have room;
        in a plot too short for either (its line midway, the range grown past the target)
        it straddles its line, inside the plot."""
        view = self.plot.getViewBox()
        box, (y0, y1) = view.sceneBoundingRect(), view.viewRange()[1]
        text = self.target_label.textItem.boundingRect()  # its text and margins, px
        right = box.left() + TARGET_AT * box.width()
        line_y = box.top() + box.height() * (y1 - self.target.value()) / max(1e-9, y1 - y0)
        tall = max(1e-9, text.height())
        if line_y - tall >= box.top():
            top = line_y - tall  # above its line
        elif line_y + tall <= box.bottom():
            top = line_y  # under it
        else:
            top = max(box.top(), box.bottom() - tall)
        anchor = (1, min(1.0, max(0.0, (line_y - top) / tall)))  # the line's point on it
        if tuple(self.target_label.anchor) != anchor:
            self.target_label.anchors = [anchor, anchor]
            self.target_label.setAnchor(anchor)
            self.target_label.setPosition(TARGET_AT)
        top = line_y - anchor[1] * tall
        rect = QRectF(right - text.width(), top, text.width(), text.height())
        return [rect.adjusted(-2, -2, 2, 2)]  # and a little air: the line's pen, rounding

    @property
    def banded(self) -> bool:
        return self.band.isVisible()

    def restyle(self) -> None:
        lw = self.look.line_width
        t = self.look.theme
        for sid, curve in self._curves.items():
            curve.setPen(pen(session_colour(sid), lw))
        self.target.setPen(pen(t.text, max(1.0, lw * 0.6), dashed=True))
        style_labels(self.target, t.text, self.look)
        fill = pg.mkColor(t.accent)
        fill.setAlpha(70)
        self.band.setBrush(pg.mkBrush(fill))
        self.band.setPen(pg.mkPen(None))
        edge = pg.mkColor(t.accent)
        edge.setAlpha(120)
        for curve in (self.band_lo, self.band_hi):
            curve.setPen(pg.mkPen(edge, width=1))
        self.median.setPen(pen(t.accent, lw))
        if self.slowest_id is not None:
            self.slow.setPen(pen(session_colour(self.slowest_id), lw * 1.3))
        if hasattr(self, "key"):
            self._show_key()

    def _show_key(self) -> None:
        """The key's chips in the look's colours: the band, the median, the slowest."""
        t = self.look.theme
        slow = session_colour(self.slowest_id) if self.slowest_id is not None else t.muted
        chips = (
            (t.accent, "▆", "min–max"),
            (t.accent, "━", "median"),
            (slow, "━", self.slowest_label or "slowest"),
        )
        self.key.setText(
            " &nbsp; ".join(
                f'<span style="color:{colour}">{mark}</span>&nbsp;{text.replace(" ", "&nbsp;")}'
                for colour, mark, text in chips
            )
        )
        self.key.setStyleSheet(f"color: {t.muted}; font-size: {self.look.axis_pt}pt;")

    @property
    def curves(self) -> dict[int, pg.PlotCurveItem]:
        return self._curves

    def update_from(self, snap: Snapshot, window: TimeWindow) -> None:
        target = snap.config.fps or 30.0
        if self.target.value() != target:
            self.target.setValue(target)
        active = {s.id for s in snap.sessions}
        shown = {sid: v for sid, v in window.fps.items() if sid in active}
        banded = len(active) > BAND_ABOVE
        top = target
        for sid, values in shown.items() if not banded else ():
            curve = self._curves.get(sid)
            if curve is None:
                curve = self._curves[sid] = pg.PlotCurveItem(
                    pen=pen(session_colour(sid), self.look.line_width), connect="finite"
                )
                self.plot.addItem(curve)
            curve.setData(window.t, values)
            curve.setVisible(True)
            if len(values) and np.isfinite(values).any():
                top = max(top, float(np.nanmax(values)))
        for sid, curve in self._curves.items():
            if banded or sid not in shown:
                curve.setVisible(False)
        for item in (self.band_lo, self.band_hi, self.band, self.median, self.slow):
            item.setVisible(banded)
        if self.key.isVisibleTo(self) != banded:
            self.key.setVisible(banded)
        title = "Frames per second, per session"
        if banded and shown and len(window.t):
            band = fps_band(list(shown.values()))
            self.band_lo.setData(window.t, band.lo)
            self.band_hi.setData(window.t, band.hi)
            self.median.setData(window.t, band.mid)
            if np.isfinite(band.hi).any():
                top = max(top, float(np.nanmax(band.hi)))
            title = f"fps of {len(active)} sessions: min–median–max"
            sid = slowest(snap)
            if sid is not None and sid in shown:
                if sid != self.slowest_id:
                    self.slowest_id = sid
                    self.slow.setPen(pen(session_colour(sid), self.look.line_width * 1.3))
                self.slow.setData(window.t, shown[sid])
                fps = next(s.fps for s in snap.sessions if s.id == sid)
                label = f"slowest: S{sid} ({fps:.1f} fps)"
                if label != self.slowest_label:
                    self.slowest_label = label
                    self._show_key()
                title = f"Slowest S{sid} {fps:.1f} fps · {title}"  # first: a cut keeps it
            else:
                self.slow.setVisible(False)
        self.set_title(title)
        self.plot.setYRange(0, top * 1.15, padding=0)
        self.scroll(window)


class ThroughputPlot(TimePlot):
    """Windows processed per second, against what the sessions offer (sessions × fps)."""

    def __init__(self, look: Look) -> None:
        self.curve = pg.PlotCurveItem(connect="finite")
        self.offered = pg.InfiniteLine(pos=0, angle=0, movable=False)
        super().__init__("Throughput", look, "windows/s", labelled=False)
        pg.InfLineLabel(
            # under its line: the line sits near the top, and a short plot has no room above
            self.offered,
            "offered (sessions × fps)",
            position=0.98,
            anchors=[(1, 0), (1, 0)],
        )
        self.plot.addItem(self.curve)
        self.plot.addItem(self.offered, ignoreBounds=True)
        self.plot.enableAutoRange(y=False)
        self.restyle()

    def restyle(self) -> None:
        self.curve.setPen(pen(self.look.theme.accent, self.look.line_width))
        self.offered.setPen(
            pen(self.look.theme.text, max(1.0, self.look.line_width * 0.6), dashed=True)
        )
        style_labels(self.offered, self.look.theme.text, self.look)

    def update_from(self, snap: Snapshot, window: TimeWindow) -> None:
        offered = sum(1 for s in snap.sessions if s.state == "running") * (snap.config.fps or 30)
        if self.offered.value() != offered:
            self.offered.setValue(offered)
        self.curve.setData(window.t, window.throughput)
        seen = window.throughput[np.isfinite(window.throughput)]
        top = max(offered, float(seen.max()) if len(seen) else 0.0)
        self.plot.setYRange(0, max(1.0, top) * 1.15, padding=0)
        self.set_title(f"Throughput — {snap.throughput_wps:.0f} w/s (offered {offered:.0f})")
        self.scroll(window)


class MemoryPlot(TimePlot):
    """Device and process memory over time; the device total as a dashed ceiling."""

    def __init__(self, look: Look) -> None:
        self._curves: dict[str, pg.PlotCurveItem] = {}
        self.ceiling = pg.InfiniteLine(pos=0, angle=0, movable=False)
        # under the line, at the left: the plot's top edge leaves no room above it in a
        # short pane, and the legend holds the top right
        self._ceiling_label = pg.InfLineLabel(
            self.ceiling, "", position=0.02, anchors=[(0, 0), (0, 0)]
        )
        super().__init__("Memory", look, "MB", labelled=False)
        self.legend = self.plot.addLegend(offset=(-10, 10), labelTextSize=f"{look.axis_pt}pt")
        self.plot.addItem(self.ceiling, ignoreBounds=True)
        self.ceiling.setVisible(False)
        self.plot.enableAutoRange(y=False)
        self.restyle()

    def restyle(self) -> None:
        for key, curve in self._curves.items():
            curve.setPen(pen(MEMORY_SERIES[key][1], self.look.line_width))
        self.ceiling.setPen(
            pen(self.look.theme.error, max(1.0, self.look.line_width * 0.6), dashed=True)
        )
        style_labels(self.ceiling, self.look.theme.error, self.look)
        if hasattr(self, "legend"):
            style_legend(self.legend, self.look.theme.text)

    def update_from(self, snap: Snapshot, window: TimeWindow) -> None:
        top = 1.0
        for key in MEMORY_SERIES:
            values = window.memory.get(key)
            if values is None or not np.isfinite(values).any():
                continue
            curve = self._curves.get(key)
            if curve is None:
                curve = self._curves[key] = pg.PlotCurveItem(
                    pen=pen(MEMORY_SERIES[key][1], self.look.line_width), connect="finite"
                )
                self.plot.addItem(curve)
                self.legend.addItem(curve, MEMORY_SERIES[key][0])
            curve.setData(window.t, values)
            top = max(top, float(np.nanmax(values)))
        total = snap.memory.get("device_total_mb")
        off_scale = ""
        if total:
            on_scale = top > 0.2 * total
            # visible first: a hidden InfLineLabel ignores a new format until the value moves
            self.ceiling.setVisible(on_scale)
            self.ceiling.setValue(total)
            self._ceiling_label.setFormat(f"device total {total:,.0f} MB")
            top = max(top, total) if on_scale else top
            off_scale = "" if on_scale else f" (device {total / 1024:.0f} GB)"
        now = [
            f"{MEMORY_SERIES[k][2]} {snap.memory[k]:,.0f}"
            for k in MEMORY_SERIES
            if k in snap.memory
        ]
        self.set_title("Memory — " + " · ".join(now) + " MB" + off_scale if now else "Memory")
        self.plot.setYRange(0, top * 1.12, padding=0)
        self.scroll(window)
