"""The segment table: one row per segment, and the plots of the rows selected.

A dumb view: :class:`~batchscope.ui.segment_table.feed.SegmentFeed` hands it the
report's segments once a second, the main window hands it the segment-scope
snapshots it takes anyway. The report carries percentiles, not histograms,
so the table keeps, per segment, the newest segment-scope snapshot taken in
it (its latencies and stage means, the timeline dropped): selecting a row
draws that segment's histogram and stage bars from it, selecting two shows
both side by side with the figures' ratios.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from batchscope.config import RunConfig
from batchscope.engine.report.host import host_verdict
from batchscope.engine.report.rows import ACCURACY_KEYS, TEXT_KEYS, has_accuracy, has_figures
from batchscope.engine.snapshot import Snapshot
from batchscope.sim.planner.verdict import figures_verdict
from batchscope.ui.plain_text import plain_label, plain_tip
from batchscope.ui.plots import LatencyHistogram, StageBars
from batchscope.ui.segment_table.cells import COLUMNS, compare, host_marked, segment_row
from batchscope.ui.segment_table.feed import SegmentUpdate
from batchscope.ui.theme import Look

RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
CHANGED = [c.key for c in COLUMNS].index("changed")
CHANGED_CHARS = 34  # the changed column's widest, in "x" widths of the table's font


class SegmentPlots(QWidget):
    """One segment's latency histogram and stage bars, under a line saying which."""

    def __init__(self, look: Look) -> None:
        super().__init__()
        self.heading = plain_label()  # the changes quote the step's caption
        self.heading.setObjectName("cardTitle")
        self.heading.setWordWrap(True)
        self.latency = LatencyHistogram(look)
        self.latency.which.hide()  # all sessions: the row is the whole segment
        self.stages = StageBars(look)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.heading)
        lay.addWidget(self.latency, 3)
        lay.addWidget(self.stages, 2)

    def show_segment(self, row: Mapping[str, str], snap: Snapshot | None) -> None:
        """Draw one segment: ``row`` is its cells in the table, ``snap`` what was kept."""
        self.heading.setText(f"segment {row['index']} · {row['span']} s · {row['changed']}")
        if snap is None:
            snap = _empty()
        self.latency.update_from(snap, "")  # the heading says which segment
        self.stages.update_from(snap, "")


class SegmentTable(QWidget):
    export_requested = Signal(str)  # "csv" | "json"

    def __init__(self, look: Look, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.segments: list[dict[str, Any]] = []
        self.open_index: int | None = None
        self.kept: dict[int, Snapshot] = {}  # per segment: its newest segment-scope snapshot
        self.rows: list[dict[str, str]] = []  # each segment's cells, as shown
        self._cells: list[dict[str, str]] = []  # what each table row holds now
        self._look = look

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([c.header for c in COLUMNS])
        for i, c in enumerate(COLUMNS):
            self.table.horizontalHeaderItem(i).setToolTip(c.tip)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # the changed cell says in words what opened the segment: as wide as its phrases
        # (up to CHANGED_CHARS; the tip says a longer one whole), the user may widen it,
        # and the table scrolls sideways rather than squeeze it to "sessions 5, …"
        header.setSectionResizeMode(CHANGED, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self._changed_width = 0
        self.table.itemSelectionChanged.connect(self._show_selection)

        self.hint = QLabel("Select a row for its plots, two rows to compare them.")
        self.hint.setObjectName("kpiName")
        csv_button = QPushButton("Export CSV…")
        json_button = QPushButton("Export JSON…")
        csv_button.clicked.connect(lambda: self.export_requested.emit("csv"))
        json_button.clicked.connect(lambda: self.export_requested.emit("json"))
        bar = QHBoxLayout()
        bar.addWidget(self.hint, 1)
        bar.addWidget(csv_button)
        bar.addWidget(json_button)

        self.plots = (SegmentPlots(look), SegmentPlots(look))
        # figures as columns and A, B, B ÷ A as rows: three rows fit under the table
        self.comparison = QTableWidget(3, 0)
        self.comparison.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.comparison.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.comparison.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        self.comparison.hide()
        # under the comparison: each segment against the budget (the Capacity tab's)
        self.verdict = plain_label()
        self.verdict.setObjectName("verdict")
        self.verdict.setWordWrap(True)
        self.verdict.hide()
        self.budget: tuple[float, float] | None = None  # (p99 ms, min fps ratio)
        self.detail = QSplitter(Qt.Orientation.Horizontal)
        for w in self.plots:
            self.detail.addWidget(w)
            w.hide()

        left = QWidget()
        llay = QVBoxLayout(left)
        llay.setContentsMargins(0, 0, 0, 0)
        llay.addLayout(bar)
        llay.addWidget(self.table, 1)
        llay.addWidget(self.comparison)
        llay.addWidget(self.verdict)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.detail)
        split.setSizes([900, 700])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(split)
        self._size_to(look)

    # -- data ------------------------------------------------------------------------------

    def keep(self, snap: Snapshot) -> None:
        """Keep ``snap`` as its segment's newest measured snapshot (segment scope only)."""
        if snap.scope == "segment" and snap.segment is not None and not snap.settling:
            # what its plots draw (latencies, stages), without the frames and records a
            # snapshot carries: one kept per segment must not hold ~0.4 MB a session
            sessions = [replace(v, latest=None, scored_items=None) for v in snap.sessions]
            self.kept[snap.segment.index] = replace(snap, timeline=[], sessions=sessions)

    def update_from(self, update: SegmentUpdate) -> None:
        if update.snapshot is not None:
            self.keep(update.snapshot)
        self.segments = update.segments
        self.open_index = update.open_index
        follow = not self.table.selectedItems()
        cells = [
            segment_row(s, s["index"] == update.open_index, p)
            for p, s in zip([None, *update.segments], update.segments, strict=False)
        ]
        self.rows = cells
        scored = has_accuracy(update.segments)
        for col, column in enumerate(COLUMNS):
            if column.key in ACCURACY_KEYS:
                self.table.setColumnHidden(col, not scored)
        if self.table.rowCount() != len(cells):
            self.table.setRowCount(len(cells))
            self._cells.extend([{}] * (len(cells) - len(self._cells)))
            del self._cells[len(cells) :]
        for row, (seg, texts) in enumerate(zip(update.segments, cells, strict=True)):
            if texts == self._cells[row]:
                continue
            self._fill(row, seg, texts)
            self._cells[row] = texts
        self._size_changed(cells)
        if follow and cells:
            self.table.scrollToBottom()
        self._show_selection()

    def _size_changed(self, cells: list[dict[str, str]]) -> None:
        """The changed column as wide as its longest phrase, at most CHANGED_CHARS."""
        metrics = QFontMetrics(self.table.font())
        need = max((metrics.horizontalAdvance(r["changed"]) for r in cells), default=0)
        width = min(need + 16, metrics.horizontalAdvance("x" * CHANGED_CHARS))
        head = metrics.horizontalAdvance(COLUMNS[CHANGED].header) + 16
        width = max(width, head)
        if width != self._changed_width:  # else a user's own width stays
            self._changed_width = width
            self.table.setColumnWidth(CHANGED, width)

    def _fill(self, row: int, segment: Mapping[str, Any], texts: dict[str, str]) -> None:
        modelled = (segment.get("predicted") or {}).get("host_jitter")
        said = (
            f"predicted with this machine's measured delays (publishes p99 "
            f"{modelled['publish_ms']['p99']:.1f} ms late, the worker's wake-ups p99 "
            f"{modelled['wake_ms']['p99']:.1f} ms): the host is busy"
            if modelled
            else host_verdict(segment)
        )
        tip = "\n".join(filter(None, (segment.get("caption"), segment.get("error"), said)))
        error = QColor(self._look.theme.error) if segment.get("error") else None
        for col, column in enumerate(COLUMNS):
            item = self.table.item(row, col)
            if item is None:
                item = QTableWidgetItem()
                self.table.setItem(row, col, item)
            item.setText(texts[column.key])
            # the changed cell may be cut in a narrow dock: its tip says it whole
            whole = texts["changed"] if column.key == "changed" else ""
            item.setToolTip(plain_tip("\n".join(filter(None, (whole, tip)))))
            if column.key not in TEXT_KEYS:
                item.setTextAlignment(RIGHT)
            if error is not None and column.key == "changed":
                item.setForeground(error)
            if column.key == "ratio_p99":  # the host's, in the warning colour (tip: why)
                marked = host_marked(segment)
                item.setForeground(QColor(self._look.theme.warn) if marked else QBrush())

    def select(self, *indices: int) -> None:
        """Select the rows of these segments (what a click does)."""
        self.table.clearSelection()
        mode = self.table.selectionMode()
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.MultiSelection)
        for index in indices:
            self.table.selectRow(index)
        self.table.setSelectionMode(mode)

    def _show_selection(self) -> None:
        rows = sorted({i.row() for i in self.table.selectedItems()})
        rows = [r for r in rows if r < len(self.rows)][-2:]
        chosen = [self.segments[r] for r in rows]
        for plots, r in zip(self.plots, rows, strict=False):
            plots.show_segment(self.rows[r], self.kept.get(self.segments[r]["index"]))
        for i, plots in enumerate(self.plots):
            plots.setVisible(i < len(chosen))
        self.comparison.setVisible(len(chosen) == 2)
        self.verdict.setVisible(len(chosen) == 2 and self.budget is not None)
        if len(chosen) == 2 and self.budget is not None:
            self.verdict.setText(verdict_lines(chosen, *self.budget))
        if len(chosen) == 2:
            figures = compare(*chosen)
            self.comparison.setColumnCount(len(figures))
            self.comparison.setHorizontalHeaderLabels([f[0] for f in figures])
            a, b = (seg["index"] for seg in chosen)
            self.comparison.setVerticalHeaderLabels([f"A: seg {a}", f"B: seg {b}", "B ÷ A"])
            for c, figure in enumerate(figures):
                for r, text in enumerate(figure[1:]):
                    item = QTableWidgetItem(text)
                    item.setTextAlignment(RIGHT)
                    self.comparison.setItem(r, c, item)
            view = self.comparison
            view.resizeRowsToContents()
            rows = sum(view.rowHeight(r) for r in range(view.rowCount()))
            head = view.horizontalHeader().sizeHint().height()
            view.setFixedHeight(head + rows + 2 * view.frameWidth() + 4)  # all three rows

    def set_budget(self, p99_ms: float, min_fps_ratio: float) -> None:
        """The budget two compared segments are judged against (the Capacity tab's)."""
        self.budget = (p99_ms, min_fps_ratio)
        self._show_selection()

    def set_look(self, look: Look) -> None:
        """Recolour the rows and size them for the look's font (F11 makes them readable
        from the back of a room); the window restyles every plot card, these included."""
        self._look = look
        self._cells = [{}] * len(self._cells)
        self._size_to(look)
        self._changed_width = 0  # the font changed: measure again
        self._size_changed(self.rows)
        self._show_selection()

    def _size_to(self, look: Look) -> None:
        """The tables in the look's font (set, not inherited: a dock may keep an old
        font), their rows as tall as it needs, room for the header and at least three rows
        (one in presentation mode, where a 1280×800 window with the dock open has no more:
        the table scrolls, the plots above keep a readable height)."""
        for view in (self.table, self.comparison):
            font = QFont(view.font())
            font.setPointSize(look.font_pt)
            view.setFont(font)
            view.horizontalHeader().setFont(font)
            view.verticalHeader().setFont(font)
            row = QFontMetrics(font).height() + (10 if look.presentation else 6)
            view.verticalHeader().setDefaultSectionSize(row)
            view.verticalHeader().setMinimumSectionSize(row)
        row = self.table.verticalHeader().defaultSectionSize()
        rows = 2 if look.presentation else 4  # the header and one or three rows
        scroll = self.table.horizontalScrollBar().sizeHint().height()
        self.table.setMinimumHeight(rows * row + scroll)
        line = QFontMetrics(font).height()
        for plots in self.plots:  # a histogram and stage bars one can read, not slivers
            plots.latency.setMinimumHeight(7 * line)
            plots.stages.setMinimumHeight(6 * line)

    def dock_height(self, look: Look, window_height: int) -> int:
        """How tall the dock is shown: its rows (at least four), the hint and the buttons,
        within a third of the window; with a segment's plots under them, a third, and in
        presentation mode (larger rows, a comparison under them) nearly half."""
        share = int(window_height * (0.45 if look.presentation else 1 / 3))
        if any(p.isVisible() for p in self.plots):
            return share
        row = self.table.verticalHeader().defaultSectionSize()
        rows = max(3, self.table.rowCount()) * row
        chrome = self.sizeHint().height() - self.table.sizeHint().height()
        head = self.table.horizontalHeader().sizeHint().height()
        scroll = self.table.horizontalScrollBar().sizeHint().height()
        return min(share, chrome + head + rows + scroll + 2 * self.table.frameWidth() + 24)


def verdict_lines(segments: Sequence[Mapping[str, Any]], p99_ms: float, ratio: float) -> str:
    """One line per segment (A, B): pass or fail against the budget, with the margins;
    a segment with no figures yet says so."""
    lines = []
    for name, seg in zip("AB", segments, strict=False):
        said = (
            figures_verdict(seg["overall"], seg["config"].get("fps"), p99_ms, ratio)
            if has_figures(seg)
            else "no figures yet: nothing to judge"
        )
        lines.append(f"{name}: seg {seg['index']} {said}")
    return "\n".join(lines)


def _empty() -> Snapshot:
    """A snapshot with no windows, for a segment the table kept nothing of."""
    return Snapshot(
        t=0.0,
        config=RunConfig(),
        running=False,
        paused=False,
        device="",
        weights="",
        draws_detections=False,
        policy="",
        oom_cap=None,
        sessions=[],
        recent_latency_ms={},
        batch_sizes={},
        throughput_wps=0.0,
        busy=0.0,
        memory={},
        timeline=[],
    )
