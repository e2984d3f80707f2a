"""The bus view: the device's last seconds, batch by batch (the picture behind batching).

Each batch is a bar from its start to its end in the device band, stacked from one
cell per window it carried, in its session's colour; under it each session's lane
shows how long its windows waited for the bus and the windows overwritten before it
came (×); under that, the policy's state per batch where it has one (the adaptive
cap, the dynamic and fixed policies' deadline). Hovering a bar says why it left;
the title counts the reasons. The layout is :func:`batchscope.engine.report.bus_layout.bus_layout`.

Cheap by construction (pyqtgraph as its examples teach): every item is made once
and fed with ``setData``/``setOpts`` each tick; one ``BarGraphItem`` per session
colour, so each paints its few hundred rectangles with one ``drawRects`` call, and
one ``PlotCurveItem`` (``connect="pairs"``) per session for the waits.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QComboBox, QToolTip

from batchscope.engine.report.bus_layout import BusLayout, bus_layout, reasons_text
from batchscope.engine.report.phrases import segment_phrase
from batchscope.engine.snapshot import BUS_S, Snapshot, slowest_sessions
from batchscope.policy_kinds import KINDS
from batchscope.render.palette import SESSION_COLOURS, session_colour
from batchscope.ui.plots.time_plots import PlotCard, pen, style_labels
from batchscope.ui.theme import Look

SPANS_S = (2.0, 5.0, 10.0)  # what the span selector offers (the snapshot keeps BUS_S)


def state_of(policy: str) -> str:
    """Which state of ``policy`` the strip under the bus shows: its moving cap, its
    deadline, or nothing ("")."""
    kind = KINDS.get(policy)
    if kind is None:
        return ""
    return "cap" if kind.learns_cap else "deadline" if kind.waits else ""


class BusView(PlotCard):
    """The bus view card: device band, session lanes, and the policy's state strip."""

    def __init__(self, look: Look) -> None:
        self.span = QComboBox()
        for s in SPANS_S:
            self.span.addItem(f"last {s:g} s", s)
        self.span.setCurrentIndex(SPANS_S.index(BUS_S))
        self.span.setToolTip("How many seconds of the device the bus view shows")
        self.cells = [pg.BarGraphItem(x0=[], x1=[], y0=[], height=[]) for _ in SESSION_COLOURS]
        self.waits = [pg.PlotCurveItem(connect="pairs") for _ in SESSION_COLOURS]
        self.overwrites = pg.ScatterPlotItem(symbol="x")
        self.expiries = pg.ScatterPlotItem(symbol="t1")  # a window dropped as too old
        self.band_edge = pg.InfiniteLine(angle=0, movable=False)
        self.state_widget = pg.PlotWidget()
        self.state = self.state_widget.getPlotItem()
        self.cap_curve = pg.PlotCurveItem()
        self.wait_points = pg.ScatterPlotItem(symbol="o")
        self.deadline = pg.InfiniteLine(angle=0, movable=False)
        self._deadline_label = pg.InfLineLabel(
            self.deadline, "", position=0.02, anchors=[(0, 1), (0, 1)]
        )
        super().__init__("Bus", look, "time (s)", "", header_extra=self.span)
        for item in (*self.cells, self.overwrites, self.expiries, *self.waits):
            self.plot.addItem(item)
        self.plot.addItem(self.band_edge, ignoreBounds=True)
        self.plot.enableAutoRange(x=False, y=False)
        self.plot.getAxis("left").setWidth(self._axis_width())
        st = self.state
        st.setMenuEnabled(False)
        st.hideButtons()
        st.setMouseEnabled(x=False, y=False)
        st.enableAutoRange(x=False, y=False)
        st.setXLink(self.plot)
        st.getAxis("bottom").hide()
        st.getAxis("left").enableAutoSIPrefix(False)
        for item in (self.cap_curve, self.wait_points):
            st.addItem(item)
        st.addItem(self.deadline, ignoreBounds=True)
        self.layout().addWidget(self.state_widget)
        self.state_widget.setVisible(False)
        self.layout_now: BusLayout | None = None
        # the lanes, bands and every how many lanes a name was ticked
        self._lanes: tuple[tuple[int, ...], int, int] = ((), 0, 0)
        self._state_kind = ""
        self.plot.scene().sigMouseMoved.connect(self._hover)

    # -- look -------------------------------------------------------------------------

    def _axis_width(self, labelled: bool = False) -> int:
        """The left axes' width (px): the lanes' names, and the axis label when one is."""
        label = (24 if self.look.presentation else 18) if labelled else 0
        return (64 if self.look.presentation else 44) + label

    def restyle(self) -> None:
        t, lw = self.look.theme, self.look.line_width
        if not hasattr(self, "cells"):
            return
        for k, item in enumerate(self.cells):
            item.setOpts(brush=pg.mkBrush(session_colour(k)), pen=pg.mkPen(None))
        for k, curve in enumerate(self.waits):
            curve.setPen(pen(session_colour(k), max(1.5, lw * 0.55)))
        size = 11 if self.look.presentation else 7
        self.overwrites.setSize(size)
        self.overwrites.setPen(pg.mkPen(t.muted, width=1.0))
        self.overwrites.setBrush(pg.mkBrush(t.muted))
        self.expiries.setSize(size)
        self.expiries.setPen(pg.mkPen(t.error, width=1.0))
        self.expiries.setBrush(pg.mkBrush(t.error))
        self.band_edge.setPen(pen(t.grid, 1.0, dashed=True))
        self.state_widget.setBackground(t.plot)
        font = pg.QtGui.QFont("DejaVu Sans")
        font.setPointSize(self.look.axis_pt)
        for name in ("left", "bottom"):
            axis = self.state.getAxis(name)
            axis.setPen(pg.mkPen(t.grid))
            axis.setTextPen(pg.mkPen(t.muted))
            axis.setStyle(tickFont=font)
        labelled = bool(getattr(self, "_labels", ("", ""))[1])
        self.state.getAxis("left").setWidth(self._axis_width(labelled))
        self.plot.getAxis("left").setWidth(self._axis_width(labelled))
        self.state.showGrid(x=True, y=True, alpha=0.18 if t.name == "dark" else 0.3)
        self.cap_curve.setPen(pen(t.accent, lw))
        self.wait_points.setPen(None)
        self.wait_points.setBrush(pg.mkBrush(t.accent))
        self.wait_points.setSize(size * 0.7)
        self.deadline.setPen(pen(t.error, max(1.0, lw * 0.6), dashed=True))
        style_labels(self.deadline, t.error, self.look)
        self.state_widget.setFixedHeight(150 if self.look.presentation else 100)
        self._lanes = ((), 0, 0)  # re-make the lane ticks in the new font

    def _label_px(self) -> float:
        """The height a lane's name takes on the left axis (px), with a little air."""
        font = pg.QtGui.QFont("DejaVu Sans")
        font.setPointSize(self.look.axis_pt)
        return pg.QtGui.QFontMetricsF(font).height() * LABEL_AIR

    # -- data -------------------------------------------------------------------------

    def update_from(self, snap: Snapshot) -> None:
        if snap.bus is None:
            return
        span = float(self.span.currentData())
        singled = slowest_sessions(snap.sessions)  # the video wall's tiles
        few = len(singled) < len(snap.sessions)
        lay = bus_layout(
            snap.bus,
            snap.t,
            (s.id for s in snap.sessions),
            span,
            lanes_for=[s.id for s in singled] if few else None,
            devices=snap.config.devices,
        )
        self.layout_now = lay
        label = f"lanes: the {len(singled)} slowest of {len(snap.sessions)}" if few else ""
        if label != self._labels[1]:
            self.set_axis_label("left", label)
            for plot in (self.plot, self.state):  # the two stay aligned (x linked)
                plot.getAxis("left").setWidth(self._axis_width(bool(label)))
        groups = _by_colour(lay)
        # a pixel of background between cells and between back-to-back buses, where a
        # bar is wide enough to keep it (a 1-pixel bar keeps its colour instead)
        px = (lay.t_max - lay.t_min) / max(1.0, self.plot.getViewBox().width())
        for k, item in enumerate(self.cells):
            x0, x1, y0 = groups.get(k, (_E, _E, _E))
            wide = x1 - x0 > 4 * px
            item.setOpts(
                x0=x0,
                x1=np.where(wide, x1 - px, x1),
                y0=y0,
                height=np.where(wide, lay.cell_h * 0.92, lay.cell_h),
            )
        for k, curve in enumerate(self.waits):
            xs, ys = _waits_of_colour(lay, k)
            curve.setData(xs, ys)
        mark = (lay.t_max - lay.t_min) * self.overwrites.opts["size"] / max(1.0, vb_px(self))
        self.overwrites.setData(*thin_marks(lay.overwrites[0], lay.overwrites[1], mark))
        self.expiries.setData(*thin_marks(lay.expiries[0], lay.expiries[1], mark))
        every = lane_label_step(lay, self.plot.getViewBox().height(), self._label_px())
        if (lay.lanes, lay.devices, every) != self._lanes:
            self._lanes = (lay.lanes, lay.devices, every)
            self.band_edge.setValue(lay.band[1])
            self.plot.getAxis("left").setTicks(_lane_ticks(lay, every))
        self.plot.setXRange(lay.t_min, lay.t_max, padding=0)
        self.plot.setYRange(*lay.y_range, padding=0.02)
        self._update_state(snap, lay)
        counts = lay.reason_counts()
        busy = "device busy" if lay.devices == 1 else f"{lay.devices} devices busy"
        self.set_title(
            f"Bus — why batches left: {reasons_text(counts)} · {busy} {100 * lay.busy():.0f}%"
        )
        seg = snap.segment
        now = f"Segment {seg.index}: {segment_phrase(asdict(seg))}. " if seg is not None else ""
        self.title.setToolTip(
            f"{now}The device's last {span:g} s: {len(lay.batches)} batches (bars, one cell "
            "per window in its session's colour"
            + ("; one band per device, D0 at the bottom" if lay.devices > 1 else "")
            + "), each session's waits (lines on its lane) "
            "and overwritten windows (×; where they come closer than a mark's width, one × "
            "stands for all of them there). Hover a bar for why it left."
        )

    def _update_state(self, snap: Snapshot, lay: BusLayout) -> None:
        kind = state_of(snap.config.policy)
        if kind == "cap" and not lay.batches["cap"].any():
            kind = ""
        if kind != self._state_kind:
            self._state_kind = kind
            self.state_widget.setVisible(bool(kind))
            label = {"cap": "cap (windows)", "deadline": "oldest wait (ms)"}.get(kind, "")
            self.state.getAxis("left").setLabel(
                label, color=self.look.theme.muted, **{"font-size": f"{self.look.axis_pt}pt"}
            )
        b = lay.batches
        if kind == "cap":
            x = np.repeat(np.r_[b["start"], lay.t_max], 2)[1:-1]
            y = np.repeat(b["cap"].astype(float), 2)
            self.cap_curve.setData(x, y)
            self.wait_points.setData(x=[], y=[])
            self.deadline.setVisible(False)
            self.state.setYRange(0, max(1, int(b["cap"].max())) * 1.15, padding=0)
        elif kind == "deadline":
            self.cap_curve.setData([], [])
            self.wait_points.setData(x=b["start"], y=b["wait_ms"])
            limit = snap.config.max_delay_ms
            self.deadline.setVisible(True)
            self.deadline.setValue(limit)
            self._deadline_label.setFormat(f"deadline {limit:g} ms")
            top = max(limit, float(b["wait_ms"].max()) if len(b) else 0.0)
            self.state.setYRange(0, top * 1.25, padding=0)

    # -- hover ------------------------------------------------------------------------

    def describe_at(self, t: float, y: float | None = None) -> str:
        """The tooltip text for time ``t`` (s since start) at height ``y`` (the band of
        one device): the batch running then, or idle."""
        lay = self.layout_now
        if lay is None:
            return ""
        device = 0 if y is None else lay.device_at(y)
        i = lay.batch_at(t, device)
        if i is not None:
            return lay.describe(i)
        return f"{t:.3f} s: device {device} idle" if lay.devices > 1 else f"{t:.3f} s: device idle"

    def _hover(self, pos: QPointF) -> None:
        vb = self.plot.getViewBox()
        if not vb.sceneBoundingRect().contains(pos):
            return
        point = vb.mapSceneToView(pos)
        if self.layout_now is None or point.y() < self.layout_now.band[0]:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), self.describe_at(point.x(), point.y()), self.widget)


_E = np.empty(0)


def vb_px(card: PlotCard) -> float:
    """The width of the card's plot area (px)."""
    return float(card.plot.getViewBox().width())


def thin_marks(x: np.ndarray, y: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """One mark per ``step`` (x units: a mark's width) on each lane (y): overwrites come
    at the source's rate, 20-odd a second a session, and as ×s 7 px wide they ran into
    one solid row. A kept mark is the first of those in its step-wide cell of its lane:
    no × where none happened, and every overwrite within a mark's width of a drawn ×."""
    if len(x) == 0 or step <= 0:
        return x, y
    cell = np.floor(x / step)
    _, first = np.unique(np.stack([y, cell]), axis=1, return_index=True)
    keep = np.sort(first)
    return x[keep], y[keep]


def _by_colour(lay: BusLayout) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Cells grouped by palette slot (sessions 0 and 16 share a colour, so one item)."""
    out: dict[int, list] = {}
    for sid, cell in lay.cells.items():
        out.setdefault(sid % len(SESSION_COLOURS), []).append(cell)
    return {
        k: tuple(np.concatenate(parts) for parts in zip(*v, strict=True)) for k, v in out.items()
    }


def _waits_of_colour(lay: BusLayout, k: int) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for sid, (arrival, start) in lay.waits.items():
        if sid % len(SESSION_COLOURS) != k:
            continue
        pairs = np.empty(2 * len(arrival))
        pairs[0::2], pairs[1::2] = arrival, start
        xs.append(pairs)
        ys.append(np.full(len(pairs), lay.lane_y(sid)))
    if not xs:
        return _E, _E
    return np.concatenate(xs), np.concatenate(ys)


LABEL_AIR = 1.25  # a lane's name needs its text's height and a quarter more


def lane_label_step(lay: BusLayout, view_px: float, label_px: float) -> int:
    """Name every how many lanes on the axis: every lane where a lane is as tall as a
    name, else every k-th, so that no two names meet (16 lanes in a short pane overlapped
    when a fixed count was named whatever the height)."""
    lanes = lay.lanes
    if len(lanes) < 2 or view_px <= 0:
        return 1
    lo, hi = lay.y_range
    lane_px = abs(lay.lane_y(lanes[1]) - lay.lane_y(lanes[0])) * view_px / max(1e-9, hi - lo)
    return max(1, int(np.ceil(label_px / max(1e-9, lane_px))))


def _lane_ticks(lay: BusLayout, step: int) -> list[list[tuple[float, str]]]:
    if lay.devices == 1:
        ticks = [((lay.band[0] + lay.band[1]) / 2, "device")]
    else:  # a band per device, device 0 at the bottom
        every = max(1, int(np.ceil(lay.devices / 4)))
        ticks = [
            (lay.band[0] + lay.device_h * (d + 0.5), f"D{d}") for d in range(0, lay.devices, every)
        ]
    ticks += [(lay.lane_y(sid), f"S{sid}") for sid in lay.lanes[::step]]
    return [ticks]
