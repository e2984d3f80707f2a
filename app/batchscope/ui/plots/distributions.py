"""The distribution plots: latency histogram, overwritten frames, batch sizes, stages."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QFontMetricsF
from PySide6.QtWidgets import QComboBox

from batchscope.config import POLICY_PARAMS
from batchscope.engine.snapshot import Snapshot
from batchscope.engine.stats import STAGES, latency_summary
from batchscope.render.palette import session_colour
from batchscope.ui.plain_text import CardTitle
from batchscope.ui.plots.notes import LEFT, RIGHT, ROW_AIR_PX, TOP_PX
from batchscope.ui.plots.time_plots import PlotCard, pen, style_labels
from batchscope.ui.theme import STAGE_COLOURS, Look

BINS = 60
PERCENTILES = ("p50", "p95", "p99")  # marked on the histogram (from latency_summary)
#: The labels shown on 1, 2 and 3 rows (or more), top row first
STAIRS = (("p99",), ("p50", "p99"), PERCENTILES)
EMPTY_RANGE_MS = 100.0  # the latency axis before any window came back, ms
SETTLING = "settling…"  # shown instead of figures while a new segment settles
RANK_ABOVE = 12  # sessions: above this the overwritten bars are sorted, by rank


def nice_ceiling(x: float) -> float:
    """The next round value at or above ``x`` (keeps the histogram range steady)."""
    if x <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(x))
    return next(m * base for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * base >= x)


def _after(scope: str) -> str:
    """ " · segment 2" to end a title with what it covers ("" for none)."""
    return f" · {scope}" if scope else ""


class ScopedCard(PlotCard):
    """A card whose title is figures, then what they cover: the figures always show.

    On a narrow card (a third of a projector's width, presentation fonts) the scope
    goes first, then the figures take a second line; the tooltip and
    ``_title_text`` keep the whole title.
    """

    def set_scoped_title(self, figures: str, scope: str, keep: int | None = None) -> None:
        """``keep``: how many of the figures must show (None: all); the others go, whole,
        before one is cut."""
        kept = len(figures.partition(CardTitle.SEP)[2].split(CardTitle.PART))
        self.set_title(figures + _after(scope), keep=kept if keep is None else keep)


def session_ticks(ids: list[int]) -> list[list[tuple[float, str]]]:
    step = max(1, math.ceil(len(ids) / 10))
    return [[(float(i), f"S{i}") for i in ids[::step]]]


class LatencyHistogram(ScopedCard):
    """End-to-end latency of the recent windows, with p50/p95/p99 and the objective."""

    def __init__(self, look: Look) -> None:
        self.which = QComboBox()
        self.which.addItem("All", -1)
        self.curve = pg.PlotCurveItem(
            np.array([0.0, 1.0]), np.array([0.0]), stepMode="center", fillLevel=0
        )
        self.markers = {name: pg.InfiniteLine(angle=90, movable=False) for name in PERCENTILES}
        self.objective = pg.InfiniteLine(angle=90, movable=False)
        super().__init__("Latency", look, "latency (ms)", "windows", header_extra=self.which)
        self.plot.addItem(self.curve)
        for i, (name, line) in enumerate(self.markers.items()):
            pg.InfLineLabel(line, name, position=0.93 - 0.1 * i, anchors=[(0, 0), (0, 0)])
            self.plot.addItem(line, ignoreBounds=True)
        pg.InfLineLabel(self.objective, "objective", position=0.6, anchors=[(1, 0), (1, 0)])
        self.plot.addItem(self.objective, ignoreBounds=True)
        self.plot.enableAutoRange(x=False, y=False)
        self.plot.getViewBox().sigResized.connect(self._stack_labels)  # px between lines
        self.objective.setVisible(False)
        self._show_empty()
        self.restyle()

    def _show_empty(self) -> None:
        """No latencies yet: a flat zero on a 0–1 axis, no percentile lines, no labels."""
        self.curve.setData(np.array([0.0, 1.0]), np.array([0.0]))
        for line in self.markers.values():
            line.setVisible(False)
        self.plot.setYRange(0, 1, padding=0)
        self.plot.setXRange(0, EMPTY_RANGE_MS, padding=0)

    def _stack_labels(self) -> None:
        """Place the percentile labels in a staircase: p50 on the top row, p95 on the
        next, p99 on the one under it, each right of its line where the plot has room,
        else left of it. Top to bottom reads as left to right, in order, and no two
        labels share a row, so none covers another (placed where each found room, p99
        went above p95 and p50 beside p99). A plot too low for three rows drops p95,
        then p50 (the title says p50 and p99; its tooltip all three); a label with no
        room on either side of its line is hidden.
        """
        view = self.plot.getViewBox()
        width, height = view.width(), view.height()
        (x_lo, x_hi), _ = view.viewRange()
        labels = {
            name: child
            for name, line in self.markers.items()
            for child in line.childItems()
            if isinstance(child, pg.InfLineLabel)
        }
        if width <= 0 or height <= 0 or x_hi <= x_lo or not labels:
            return
        text_item = labels["p50"].textItem
        metrics = QFontMetricsF(text_item.font())
        margin = 2 * text_item.document().documentMargin()
        row_h = metrics.height() + margin + ROW_AIR_PX
        rows = max(1, int((height - TOP_PX) // row_h))
        shown = STAIRS[min(rows, len(STAIRS)) - 1]
        for name, label in labels.items():
            x = (self.markers[name].value() - x_lo) / (x_hi - x_lo) * width
            need = metrics.horizontalAdvance(label.textItem.toPlainText()) + margin
            right, left = x + need <= width, x - need >= 0
            label.setVisible(name in shown and (right or left))
            if not label.isVisible():
                continue
            anchor = RIGHT if right else LEFT
            position = 1.0 - (TOP_PX + shown.index(name) * row_h) / height
            if (label.orthoPos, tuple(label.anchor)) != (position, anchor):
                label.anchors = [anchor, anchor]
                label.setAnchor(anchor)
                label.setPosition(position)

    def restyle(self) -> None:
        super().restyle()
        t, lw = self.look.theme, self.look.line_width
        colour = pg.mkColor(t.accent)
        self.curve.setPen(pen(t.accent, lw * 0.8))
        colour.setAlpha(90)
        self.curve.setBrush(colour)
        for line in self.markers.values():
            line.setPen(pen(t.text, max(1.0, lw * 0.5), dashed=True))
        self.objective.setPen(pen(t.error, lw))
        for line in self.markers.values():
            style_labels(line, t.text, self.look)
        style_labels(self.objective, t.error, self.look)

    def update_from(self, snap: Snapshot, scope: str | None = None) -> None:
        """Draw ``snap``'s latencies; ``scope`` names what they cover (default: the snap's)."""
        scope = snap.scope_label if scope is None else scope
        ids = [s.id for s in snap.sessions]
        if [self.which.itemData(i) for i in range(1, self.which.count())] != ids:
            current = self.which.currentData()
            self.which.blockSignals(True)
            while self.which.count() > 1:
                self.which.removeItem(1)
            for sid in ids:
                self.which.addItem(f"S{sid}", sid)
            self.which.setCurrentIndex(max(0, self.which.findData(current)))
            self.which.blockSignals(False)
        sid = self.which.currentData()
        if sid == -1:
            parts = list(snap.recent_latency_ms.values())
            ms = np.concatenate(parts) if parts else np.empty(0)
        else:
            ms = snap.recent_latency_ms.get(sid, np.empty(0))
        adaptive = "slo_ms" in POLICY_PARAMS[snap.config.policy]  # it has an objective
        self.objective.setVisible(adaptive)
        if self.objective.value() != snap.config.slo_ms:
            self.objective.setValue(snap.config.slo_ms)
            for child in self.objective.childItems():
                if isinstance(child, pg.InfLineLabel):
                    child.setFormat(f"objective {snap.config.slo_ms:g} ms")
        who = "all sessions" if sid == -1 else f"session {sid}"
        self.set_axis_label("left", f"windows ({who})")
        if ms.size == 0:
            self._show_empty()
            state = SETTLING if snap.settling else "no results yet"
            self.set_scoped_title(f"Latency — {state}", scope)
            return
        if sid == -1:
            p = snap.latency_ms  # the snapshot's, summed once a tick
        else:
            p = next((s.latency_ms for s in snap.sessions if s.id == sid), None)
            p = p if p is not None else latency_summary(ms)
        top = nice_ceiling(max(p["p99"] * 1.25, snap.config.slo_ms * 1.15 if adaptive else 0))
        counts, edges = np.histogram(np.clip(ms, 0, top), bins=BINS, range=(0, top))
        self.curve.setData(edges, counts.astype(float))
        for name, line in self.markers.items():
            line.setVisible(True)
            line.setValue(p[name])
            for child in line.childItems():
                if isinstance(child, pg.InfLineLabel):
                    child.setFormat(f"{name} {p[name]:.0f}")
        self.plot.setXRange(0, top, padding=0)
        self.plot.setYRange(0, max(1.0, float(counts.max())) * 1.1, padding=0)
        # the new range now, not at the next paint: the labels are placed on it, and the
        # lines (and their labels) would follow it one frame late
        self.plot.getViewBox().updateMatrix()
        for line in self.markers.values():
            line.viewTransformChanged()
        self._stack_labels()
        self.set_scoped_title(f"Latency — p50 {p['p50']:.0f} · p99 {p['p99']:.0f} ms", scope)
        newest = " (the newest only)" if snap.truncated else ""
        marks = " · ".join(f"{name} {p[name]:.0f}" for name in self.markers)
        self.title.setToolTip(
            f"{self._title_text}\n{marks} ms: end-to-end latency of {ms.size} windows"
            f"{newest} of {who}"
        )


class OverwrittenBars(PlotCard):
    """Windows replaced in a mailbox before the worker took them, per session."""

    def __init__(self, look: Look) -> None:
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        super().__init__("Overwritten frames", look, "session", "frames")
        self.plot.addItem(self.bars)
        self.plot.enableAutoRange(y=False)
        self._history: deque[tuple[float, int]] = deque()
        self._ids: tuple = ()  # the x layout drawn: (ranked, ids) or (ranked, count)
        self._brushes: dict[int, QBrush] = {}

    def rate(self, t: float, total: int) -> float:
        """Overwritten frames per second over about the last second."""
        if self._history and total < self._history[-1][1]:
            self._history.clear()  # statistics were reset
        self._history.append((t, total))
        while len(self._history) > 2 and self._history[1][0] <= t - 1.0:
            self._history.popleft()
        t0, n0 = self._history[0]
        return (total - n0) / (t - t0) if t > t0 else 0.0

    def update_from(self, snap: Snapshot) -> None:
        ids = [s.id for s in snap.sessions]
        counts = [s.overwritten for s in snap.sessions]
        ranked = len(ids) > RANK_ABOVE
        if ranked:
            # 64–256 bars by id are a comb nobody reads: most overwritten first, by rank
            order = sorted(range(len(ids)), key=lambda k: (-counts[k], ids[k]))
            ids, counts = [ids[k] for k in order], [counts[k] for k in order]
        x = list(range(len(ids))) if ranked else ids
        # ranked, the bars read as one distribution: one colour (256 would repeat the palette)
        colours = (
            {"brush": pg.mkBrush(self.look.theme.accent), "brushes": None}
            if ranked
            else {"brushes": [self._brush(i) for i in ids]}
        )
        self.bars.setOpts(
            x=x,
            height=counts,
            width=0.9 if ranked else 0.7,
            pen=pg.mkPen(None),
            pens=None,
            **colours,
        )
        layout = (ranked, len(ids)) if ranked else (ranked, ids)
        if layout != self._ids:
            self._ids = layout
            axis = self.plot.getAxis("bottom")
            axis.setTicks(None if ranked else session_ticks(ids))
            self.set_axis_label(
                "bottom", "sessions, most overwritten first" if ranked else "session"
            )
            self.plot.setXRange(-0.6, max(x, default=0) + 0.6, padding=0)
        self.plot.setYRange(0, max(1, max(counts, default=0)) * 1.08, padding=0)
        total = sum(counts)
        expired = sum(s.expired for s in snap.sessions)
        dropped = (
            f" · expired {expired:,}" if expired or snap.config.drop_after_ms is not None else ""
        )
        most = f" · most S{ids[0]} ({counts[0]:,})" if ranked and counts and counts[0] else ""
        self.set_title(
            f"Overwritten — total {total:,} · {self.rate(snap.t, total):.1f}/s{dropped}{most}"
        )

    def _brush(self, sid: int) -> QBrush:
        brush = self._brushes.get(sid)
        if brush is None:
            brush = self._brushes[sid] = pg.mkBrush(session_colour(sid))
        return brush


MIN_BAR_PX = 6.0  # a lone bar no thinner than this, where its neighbours leave room


def bar_width(x: np.ndarray, span: float, view_px: float) -> float:
    """The bars' width (x units) for bars at the sorted or unsorted integer sizes ``x`` on
    an axis ``span`` units over ``view_px`` pixels: 0.7 of a unit, widened to
    ``MIN_BAR_PX`` where no two bars would then touch (at 64 sessions a unit is ~4 px and
    a lone bar at 64 was a 1-2 px sliver)."""
    width = 0.7
    if view_px > 0 and span > 0:
        wanted = MIN_BAR_PX * span / view_px
        gaps = np.diff(np.unique(x))
        room = 0.8 * float(gaps.min()) if len(gaps) else wanted
        width = max(width, min(wanted, room))
    return width


def nice_step(right: int, fits: int) -> int:
    """The tick step for sizes 1..``right`` when ``fits`` labels fit: 1, 2, 4, 8, 16, 32…
    (batch sizes are powers of two so often; at 64 sessions a step of 5 wrote
    "6 1116212631…" in one run)."""
    step = 1
    while right / step > fits:
        step *= 2
    return step


class BatchSizeBars(ScopedCard):
    """Share of batches of each size over the recent batches."""

    def __init__(self, look: Look) -> None:
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        super().__init__("Batch sizes", look, "batch size (windows)", "share of batches (%)")
        self.plot.addItem(self.bars)
        self._right: tuple[int, int] = (0, 0)

    def restyle(self) -> None:
        super().restyle()
        self.bars.setOpts(brush=pg.mkBrush(self.look.theme.accent), pen=pg.mkPen(None))

    def _view_px(self) -> float:
        return float(self.plot.getViewBox().width())

    def update_from(self, snap: Snapshot) -> None:
        sizes = snap.batch_sizes
        total = sum(sizes.values())
        if not total:
            self.bars.setOpts(x=[], height=[], width=0.7)
            state = SETTLING if snap.settling else "no batches yet"
            self.set_scoped_title(f"Batch size — {state}", snap.scope_label)
            return
        x = np.array(list(sizes), float)
        share = np.array(list(sizes.values()), float) * 100.0 / total
        right = max(4, int(x.max()))
        self.plot.setXRange(0.4, right + 0.6, padding=0)
        self.bars.setOpts(x=x, height=share, width=bar_width(x, right + 0.2, self._view_px()))
        mean = float((x * share).sum() / 100.0)
        fm = QFontMetricsF(self.plot.getAxis("bottom").style["tickFont"] or self.font())
        label_px = fm.horizontalAdvance(f"{right} ") + 6  # a tick's text and some air
        fits = max(2, int(self._view_px() // label_px))
        step = nice_step(right, fits)
        if (right, step) != self._right:
            self._right = (right, step)
            ticks = [1, *range(step, right + 1, step)] if step > 1 else range(1, right + 1)
            self.plot.getAxis("bottom").setTicks([[(i, str(i)) for i in ticks]])
        cap = f" · capped at {snap.oom_cap} after OOM" if snap.oom_cap else ""
        self.set_scoped_title(f"Batch size — mean {mean:.1f}{cap}", snap.scope_label)
        self.title.setToolTip(f"Share of the {total:,} batches of each size, {snap.scope_label}")


class StageBars(PlotCard):
    """Mean latency per session split into wait, prep, compute and post (stacked).

    The title is the legend: a coloured chip and the mean of each stage, so no legend box
    ever covers a bar. It wraps (between stages, never inside one) on a narrow card, such
    as a segment's plots side by side, so no stage is cut off.
    """

    def __init__(self, look: Look) -> None:
        self.bars = {stage: pg.BarGraphItem(x=[], height=[], width=0.7) for stage in STAGES}
        self._means: dict[str, int] | None = None
        self._scope = ""
        super().__init__("Latency by stage", look, "session", "mean latency (ms)")
        self.title.setTextFormat(Qt.TextFormat.RichText)  # its chips: no user text in it
        self.title.setWordWrap(True)
        for item in self.bars.values():
            self.plot.addItem(item)
        self._ids: list[int] = []
        self.restyle()

    def restyle(self) -> None:
        for stage, item in self.bars.items():
            item.setOpts(brush=pg.mkBrush(STAGE_COLOURS[stage]), pen=pg.mkPen(None))
        self._show_legend()

    def _show_legend(self) -> None:
        means = self._means or {}
        chips = " &nbsp;".join(
            f'<span style="color:{STAGE_COLOURS[st]}">■</span>&nbsp;{st}&nbsp;{means.get(st, "–")}'
            for st in STAGES
        )
        state = "" if self._means is not None else f" {SETTLING}"
        # what the means cover is in the tooltip: on a third of a 1280 px window the
        # legend then stays on one or two lines over a readable plot
        self.set_title(f'<span style="font-weight:normal">{chips}{state}</span>')
        self.title.setToolTip(f"Mean latency of each stage per session{_after(self._scope)}")

    def update_from(self, snap: Snapshot, scope: str | None = None) -> None:
        """Draw ``snap``'s stage means; ``scope`` names what they cover (default: the snap's)."""
        scope = snap.scope_label if scope is None else scope
        measured = [s for s in snap.sessions if s.latency_ms.get("max", 0.0) > 0]
        ids = [s.id for s in snap.sessions]
        base = np.zeros(len(ids))
        for stage, item in self.bars.items():
            h = np.array([s.stages_ms.get(stage, 0.0) for s in snap.sessions])
            item.setOpts(x=ids, height=h, y0=base.copy(), width=0.7)
            base += h
        if ids != self._ids:
            self._ids = ids
            self.plot.getAxis("bottom").setTicks(session_ticks(ids))
            self.plot.setXRange(-0.6, max(ids, default=0) + 0.6, padding=0)
        means = None
        if measured:
            means = {
                st: round(float(np.mean([s.stages_ms.get(st, 0.0) for s in measured])))
                for st in STAGES
            }
        if (means, scope) != (self._means, self._scope):
            self._means, self._scope = means, scope
            self._show_legend()
