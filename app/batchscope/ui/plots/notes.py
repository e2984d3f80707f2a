"""The notes on a time plot: a dashed line at each change, fault, out-of-memory or error,
and its label laid out so that no two labels, nor a label and the plot's own ("target"),
overlap.

Why (issue 27): the labels sat at three fixed heights in turn, so two events half a
second apart wrote over each other ("session 0 bursts at session 0 bursts at 4×…") and
over the target line's label. Now every tick the labels are laid out in pixels
(:func:`place_notes`, pure, tested without a screen): in time order, each takes the
highest row where its text, right of its line (left of it near the live edge), meets no
label already there and nothing the plot keeps clear; when every row is taken it folds
into the label before it, which then reads "… +1" and lists both in its tooltip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QFontMetricsF

from batchscope.engine.metrics import Event
from batchscope.ui.plain_text import plain_tip
from batchscope.ui.plots.lines import pen, style_labels
from batchscope.ui.theme import Look

MARKED_KINDS = ("config", "oom", "error", "fault")
RIGHT, LEFT = (0.0, 0.0), (1.0, 0.0)  # label anchors: text right / left of its line
GAP_PX = 6.0  # air between two labels in a row, and between a label and the plot's edge
TOP_PX = 4.0  # the first row's distance from the plot's top
ROW_AIR_PX = 2.0  # between two rows of labels
MAX_ROWS = 4  # rows of labels at most, and never more than fill half the plot's height
MARKER_Z = 5.0  # the lines' stacking order: above the curves (0 to 2)
MIN_ROOM_PX = 48.0  # a label is not cut narrower than this against the plot's edge
MAX_MARKERS = 1000  # the newest kept (a plot shows the whole run: its markers stay)


@dataclass(frozen=True)
class Note:
    """One label to place, in pixels from the plot's left edge."""

    x: float  # its line
    need: float  # the width its whole text takes (margins included)


@dataclass(frozen=True)
class Placed:
    """Where a note went: a row, and a side of its line, or folded into another note."""

    row: int | None = None  # 0: the top row; None: folded into ``host``
    left: bool = False  # drawn left of its line
    room: float = 0.0  # the width it may take (its text cut to it with "…")
    host: int | None = None  # the note it is folded into (an index into the notes)

    def extent(self, x: float) -> tuple[float, float]:
        return (x - self.room, x) if self.left else (x, x + self.room)


def place_notes(
    notes: Sequence[Note],
    width: float,
    rows: int,
    clear: Sequence[tuple[int, float, float]] = (),
) -> list[Placed]:
    """Lay ``notes`` (in time order) out in ``rows`` rows of a plot ``width`` px wide.

    ``clear``: (row, x0, x1) spans that no label may cover (another label of the plot).
    Each note takes the first row where its text fits, right of its line when it fits
    there, else left of it; one that fits on neither side is cut to the wider side (but
    to no less than MIN_ROOM_PX). With no free row, a note is made room for by cutting
    the note before it in a row to end at its line (when that one keeps MIN_ROOM_PX), or
    else folded into the nearest note placed before it.
    """
    taken: list[list[tuple[float, float, int | None]]] = [[] for _ in range(max(1, rows))]
    for row, x0, x1 in clear:
        if 0 <= row < len(taken):
            taken[row].append((x0, x1, None))
    out: list[Placed] = []
    last: int | None = None  # the last note placed in a row
    for i, note in enumerate(notes):
        right_room, left_room = width - note.x - GAP_PX, note.x - GAP_PX
        sides = [
            (left, min(note.need, room))
            for left, room in ((False, right_room), (True, left_room))
            if note.need <= room
        ]
        if not sides:  # it fits on neither side: cut it on the wider one
            left = left_room > right_room
            sides = [(left, max(MIN_ROOM_PX, left_room if left else right_room))]
        tries = [Placed(row, left, room) for row in range(len(taken)) for left, room in sides]
        spot = next((t for t in tries if _free(taken[t.row], t.extent(note.x))), None)
        if spot is None:
            spot = next((t for t in tries if _cut_for(t, note.x, notes, out, taken)), None)
        if spot is None:  # cut short of what it meets, right of its line (the target label)
            spot = next(
                (
                    t
                    for row in range(len(taken))
                    if (t := _short_of(row, note.x, taken[row], width)) is not None
                ),
                None,
            )
        if spot is None and last is not None:
            out.append(Placed(host=last))
            continue
        spot = spot or tries[0]  # nothing placed yet: the top row anyway
        taken[spot.row].append((*spot.extent(note.x), i))
        out.append(spot)
        last = i
    return out


def _short_of(
    row: int, x: float, spans: list[tuple[float, float, int | None]], width: float
) -> Placed | None:
    """A spot in ``row`` right of the line at ``x``, cut to end before the first span
    there, if that leaves MIN_ROOM_PX (and the line itself is clear)."""
    if any(x0 - GAP_PX < x < x1 + GAP_PX for x0, x1, _ in spans):
        return None
    end = min((x0 for x0, _, _ in spans if x0 > x), default=width)
    room = end - GAP_PX - x
    return Placed(row, False, room) if room >= MIN_ROOM_PX else None


def _free(spans: list[tuple[float, float, int | None]], extent: tuple[float, float]) -> bool:
    a, b = extent
    return all(b + GAP_PX <= x0 or a >= x1 + GAP_PX for x0, x1, _ in spans)


def _cut_for(
    spot: Placed,
    x: float,
    notes: Sequence[Note],
    out: list[Placed],
    taken: list[list[tuple[float, float, int | None]]],
) -> bool:
    """Make room for ``spot`` (a note at ``x``) by cutting the notes in its row that it
    meets: each must read right of a line before ``spot`` starts and keep MIN_ROOM_PX
    when cut to end there. True (and cut) if that frees the row."""
    start, end = spot.extent(x)
    spans = taken[spot.row]
    blocking = [
        k for k, (x0, x1, _) in enumerate(spans) if not (end + GAP_PX <= x0 or start >= x1 + GAP_PX)
    ]
    cuts = []
    for k in blocking:
        owner = spans[k][2]
        if owner is None or out[owner].left:
            return False
        room = start - GAP_PX - notes[owner].x
        if room < MIN_ROOM_PX:
            return False
        cuts.append((k, owner, room))
    for k, owner, room in cuts:
        out[owner] = Placed(spot.row, False, room)
        spans[k] = (notes[owner].x, notes[owner].x + room, owner)
    return True


def _clear_spans(
    rects: Sequence[QRectF], view: pg.ViewBox, row_h: float, rows: int
) -> list[tuple[int, float, float]]:
    """The rows and x spans (px from the plot's left) that the scene ``rects`` cover."""
    box = view.sceneBoundingRect()
    spans = []
    for rect in rects:
        top, bottom = rect.top() - box.top(), rect.bottom() - box.top()
        for row in range(rows):
            y0 = TOP_PX + row * row_h
            if top < y0 + row_h and bottom > y0:
                spans.append((row, rect.left() - box.left(), rect.right() - box.left()))
    return spans


@dataclass
class _Marker:
    event: Event
    line: pg.InfiniteLine
    label: pg.InfLineLabel | None
    shown: tuple = ()  # what the label shows now: (text, left, row, visible, tip)
    laid: tuple[float, float] = (0.0, 0.0)  # the row height and plot height it was placed at


class EventMarkers:
    """Labelled vertical lines at changes, faults, out-of-memory and errors on a time plot.

    A marker sits at its event's own time ``ev.t`` (a ``config`` event is raised
    when the change took effect, not when it was asked for). Its label is laid out
    by :func:`place_notes` on every :meth:`fit`; the full text is always the tooltip
    (of the label it folded into, when it folded).
    """

    def __init__(self, plot: pg.PlotItem, look: Look, labelled: bool = True) -> None:
        self._plot = plot
        self._look = look
        self._labelled = labelled
        self._markers: list[_Marker] = []

    @property
    def markers(self) -> list[_Marker]:
        return self._markers

    def add(self, events: Sequence[Event]) -> None:
        for ev in events:
            if ev.kind not in MARKED_KINDS:
                continue
            line = pg.InfiniteLine(pos=ev.t, angle=90, movable=False)
            # above the data; an earlier line above a later one, so that a label (its
            # line's child) reads over the next line its text crosses
            line.setZValue(MARKER_Z - ev.t * 1e-6)
            label = None
            if self._labelled:
                label = pg.InfLineLabel(line, "", position=0.9, anchors=[RIGHT, RIGHT])
                label.setToolTip(plain_tip(ev.message))  # may name a file, quote an error
            marker = _Marker(ev, line, label)
            self._style(marker)
            self._plot.addItem(line, ignoreBounds=True)
            self._markers.append(marker)

    def prune(self, t_min: float) -> None:
        """Remove the markers before ``t_min`` (the plots' start), and the oldest beyond
        MAX_MARKERS."""
        while self._markers and (
            self._markers[0].event.t < t_min or len(self._markers) > MAX_MARKERS
        ):
            self._plot.removeItem(self._markers.pop(0).line)

    def fit(self, x_range: tuple[float, float], keep_clear: Sequence[QRectF] = ()) -> None:
        """Lay the labels out for the visible span (s) and the plot's size (px), covering
        none of ``keep_clear`` (scene rects: the plot's own labels)."""
        view = self._plot.getViewBox()
        width, height = view.width(), view.height()
        x0, x1 = x_range
        labelled = []
        for m in sorted(self._markers, key=lambda m: m.event.t):
            if m.label is None:
                continue
            if x0 <= m.event.t <= x1:
                labelled.append(m)
            elif m.shown[3:4] != (False,):  # out of view (the whole run kept it): no label
                self._show(m, ("", False, None, False, ""))
        if width <= 0 or height <= 0 or x1 <= x0 or not labelled:
            return
        text_item = labelled[0].label.textItem
        metrics = QFontMetricsF(text_item.font())
        margin = 2 * text_item.document().documentMargin()
        row_h = metrics.height() + margin + ROW_AIR_PX
        rows = max(1, min(MAX_ROWS, int(0.5 * height // row_h)))
        px_per_s = width / (x1 - x0)
        notes = [
            Note((m.event.t - x0) * px_per_s, metrics.horizontalAdvance(m.event.message) + margin)
            for m in labelled
        ]
        placed = place_notes(notes, width, rows, _clear_spans(keep_clear, view, row_h, rows))
        folded: dict[int, list[int]] = {}
        for i, spot in enumerate(placed):
            if spot.host is not None:
                folded.setdefault(spot.host, []).append(i)
        for i, (marker, spot) in enumerate(zip(labelled, placed, strict=True)):
            if spot.row is None:
                self._show(marker, ("", False, None, False, ""))
                continue
            guests = folded.get(i, [])
            text = marker.event.message
            suffix = f" +{len(guests)}" if guests else ""
            room = spot.room - margin - metrics.horizontalAdvance(suffix)
            if metrics.horizontalAdvance(text) > room:
                text = metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(0.0, room))
            tip = marker.event.message
            if guests:
                tip = "\n".join(
                    f"{m.event.t:.1f} s: {m.event.message}"
                    for m in [marker, *(labelled[g] for g in guests)]
                )
            self._show(marker, (text + suffix, spot.left, spot.row, True, tip), row_h, height)

    def _show(self, marker: _Marker, shown: tuple, row_h: float = 0.0, height: float = 1.0) -> None:
        # its place is a fraction of the plot's height: placed again when that changes
        # (a shorter plot, same rows, kept the old fractions and the rows ran together)
        if marker.shown == shown and marker.laid == (row_h, height):
            return
        marker.shown, marker.laid = shown, (row_h, height)
        text, left, row, visible, tip = shown
        label = marker.label
        assert label is not None
        label.setVisible(visible)
        if not visible:
            return
        anchor = LEFT if left else RIGHT
        label.anchors = [anchor, anchor]
        label.setAnchor(anchor)
        label.setToolTip(plain_tip(tip))
        # a vertical line's label: 0 is the bottom of the view, 1 its top
        label.setPosition(1.0 - (TOP_PX + row * row_h) / height)
        # the label's text is a format string: braces in a message stay braces
        label.setFormat(text.replace("{", "{{").replace("}", "}}"))

    def set_look(self, look: Look) -> None:
        self._look = look
        for marker in self._markers:
            self._style(marker)
            marker.shown = ()  # the font changed: measure again

    def _style(self, marker: _Marker) -> None:
        t = self._look.theme
        colour = {"config": t.event, "oom": t.warn, "error": t.error, "fault": t.warn}.get(
            marker.event.kind, t.muted
        )
        marker.line.setPen(pen(colour, max(1.0, self._look.line_width * 0.6), dashed=True))
        style_labels(marker.line, colour, self._look)
        if marker.label is not None:
            fill = pg.mkColor(t.plot)
            fill.setAlpha(200)
            marker.label.fill = pg.mkBrush(fill)
            marker.label.update()
