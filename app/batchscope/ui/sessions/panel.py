"""The sessions panel: one row per session, source buttons and the session-count slider."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QModelIndex, QSettings, Qt, Signal
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from superqt import QLabeledSlider
from superqt.utils import qdebounced

from batchscope.config import KNOBS
from batchscope.engine.roster import SourceSlot
from batchscope.engine.snapshot import SessionView
from batchscope.engine.stats import RECONNECTING
from batchscope.engine.streams import StreamSource
from batchscope.render.palette import session_colour
from batchscope.ui.plain_text import menu_text, plain_tip
from batchscope.ui.sessions.stream_dialog import StreamDialog, recent_streams, remember_stream
from batchscope.ui.theme import Look
from batchscope.urls import mask_credentials

COLUMNS = ("", "Source", "State", "fps", "p50 ms", "Overwr.", "Expired")
#: header tooltips
COLUMN_TIPS = {
    "Overwr.": "windows replaced in the mailbox before the worker took them",
    "Expired": "windows dropped for waiting longer than Drop after ms (deadline drop)",
}
VIDEO_FILTER = "Videos (*.mp4 *.avi *.mov *.mkv *.webm *.m4v);;All files (*)"
SESSIONS = KNOBS["sessions"]
NOT_PLAYED_TIP = "opened, but no session plays it: raise the session count to play it"
NOTE_MARK = " *"  # after the state of a session whose source has a note: see the tooltip
MIN_ROWS = 4  # the sessions table shows at least this many rows
EXPIRED = COLUMNS.index("Expired")
STATE = COLUMNS.index("State")
SOURCE = COLUMNS.index("Source")
#: The State column's widest (in its font): a longer state (an error) is cut, whole in
#: its tip; the Source column has the rest of the row
STATE_SAMPLE = "reconnecting (9) *"
#: File extensions a Source cell leaves out ("rally_a", not "ral…mp4" three times over:
#: cut in the middle, three clips that differ by one letter read the same)
VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v")


def source_cell(name: str) -> str:
    """A source's name as its cell shows it: a video file without its extension."""
    stem, dot, suffix = name.rpartition(".")
    return stem if dot and stem and f".{suffix.lower()}" in VIDEO_SUFFIXES else name


@dataclass(frozen=True)
class _Row:
    """One table row: a session, or a source that no session plays."""

    cells: tuple[str, ...]
    key: int  # session id, or the slot index for a source row (session i plays slot i mod k)
    path: str  # the full source spec, the source cell's tooltip
    tip: str  # the state cell's tooltip (the error)
    colour: str  # the state's colour
    badge: str | None  # the session colour; None for a source row (greyed)
    note: str = ""  # the source's note ("long file: looping…"), also the source cell's tip


def _note(slot: SourceSlot | None) -> str:
    """What the user should know about a slot's source ("long file: looping…"), or ""."""
    source = slot.source if slot is not None else None
    if isinstance(source, StreamSource):  # its live figures: rate, jitter, age, reconnects
        return source.describe()
    return getattr(source, "note", "") or ""


class _ElideMiddle(QStyledItemDelegate):
    """Cuts a cell's text in the middle ("camera-nor…take-2.mp4"), not at its end."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideMiddle


class SessionsPanel(QWidget):
    add_files = Signal(list)  # paths
    add_source = Signal(str)  # spec (camera:N, synthetic, a stream URL)
    remove_source = Signal(int)  # session id whose source to remove; -1: none selected
    sessions_changed = Signal(int)

    def __init__(self, look: Look, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._look = look
        # where Add stream… keeps its recent URLs, and how streams connect (the window sets)
        self.settings: QSettings | None = None
        self.stream_line: Callable[[], str] = lambda: ""
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)

        count_row = QHBoxLayout()
        count_row.addWidget(QLabel("Sessions"))
        self.count = QLabeledSlider(Qt.Orientation.Horizontal)
        # the engine's whole range: its spin box takes an exact count, the slider sweeps
        self.count.setRange(int(SESSIONS.lo), int(SESSIONS.hi))
        count_row.addWidget(self.count, 1)
        layout.addLayout(count_row)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        for col, name in enumerate(COLUMNS):
            if name in COLUMN_TIPS:
                self.table.horizontalHeaderItem(col).setToolTip(COLUMN_TIPS[name])
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        # file names that share a prefix or a suffix stay apart; the full path is the tooltip
        self.table.setItemDelegateForColumn(1, _ElideMiddle(self.table))
        header = self.table.horizontalHeader()
        # fixed number columns: resize-to-contents would re-measure every row on each update
        header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        # the state as wide as its words (the source takes the rest): two stretched
        # columns cut both ("ral…mp4", "runnin…") in a 400 px panel
        self._size_columns()
        # no deadline drop has expired a window: the column would read 0s
        self.table.setColumnHidden(EXPIRED, True)
        layout.addWidget(self.table, 1)

        buttons = QHBoxLayout()
        self.files_button = QPushButton("Add videos…")
        self.camera_button = QToolButton()
        self.camera_button.setText("Add camera")
        self.camera_button.setToolTip(
            "An IP camera or network stream by its URL (RTSP, HTTP, HLS, UDP), "
            "or a camera on this machine"
        )
        self.camera_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.camera_menu = QMenu(self.camera_button)
        self.camera_menu.aboutToShow.connect(self._fill_cameras)
        self.camera_button.setMenu(self.camera_menu)
        self.synthetic_button = QPushButton("Add synthetic")
        self.remove_button = QPushButton("Remove source")
        self.remove_button.setToolTip("Remove the source of the selected session")
        for b in (self.files_button, self.camera_button, self.synthetic_button, self.remove_button):
            buttons.addWidget(b)
        layout.addLayout(buttons)

        self.files_button.clicked.connect(self._choose_files)
        self.synthetic_button.clicked.connect(lambda: self.add_source.emit("synthetic"))
        self.remove_button.clicked.connect(self._remove_selected)
        self._emit_count = qdebounced(self._send_count, timeout=250)
        self._count_unsent = False  # moved by the user, not yet sent
        self.count.valueChanged.connect(self._count_moved)
        self._rows: list[tuple] = []

    def _count_moved(self) -> None:
        self._count_unsent = True
        self._emit_count()

    def _send_count(self) -> None:
        self._count_unsent = False
        self.sessions_changed.emit(self.count.value())

    def show_count(self, n: int) -> None:
        """Show the engine's count, unless the user has moved the slider since the last
        send: the engine's is then the change before's, and the move is still to go."""
        if self._count_unsent:
            return
        self.count.blockSignals(True)
        self.count.setValue(n)
        self.count.blockSignals(False)

    def set_look(self, look: Look) -> None:
        self._look = look
        self._rows = [()] * self.table.rowCount()  # repaint state colours
        self._size_columns()

    def _size_columns(self) -> None:
        """The narrow columns' widths, and the table's least height, in the look's type."""
        # never fewer rows than MIN_ROWS in view: in a short window the panel scrolls
        # instead (at 1280x800 with the Segments dock open the table showed one row)
        t = self.table
        t.setMinimumHeight(
            t.horizontalHeader().sizeHint().height()
            + MIN_ROWS * t.verticalHeader().defaultSectionSize()
            + 2 * t.frameWidth()
        )
        fm = self.table.fontMetrics()
        for col, sample in (
            (0, "S00"),
            (3, "000.0"),
            (4, "p50 ms"),
            (5, "Overwr."),
            (EXPIRED, "Expired"),
        ):
            self.table.setColumnWidth(col, fm.horizontalAdvance(sample) + 18)
        self._fit_state()

    def _fit_state(self) -> None:
        """The State column as wide as STATE_SAMPLE where the row has room, else what
        leaves the Source column its header ("Source" whole): at 1280x800 with 16
        sessions' scroll bar the full State width left Source 46 px."""
        t = self.table
        fm = t.fontMetrics()
        fixed = sum(
            t.columnWidth(c)
            for c in range(t.columnCount())
            if c not in (SOURCE, STATE) and not t.isColumnHidden(c)
        )
        room = t.viewport().width() - fixed - (fm.horizontalAdvance(COLUMNS[SOURCE]) + 24)
        least = fm.horizontalAdvance("running") + 18
        t.setColumnWidth(STATE, max(least, min(fm.horizontalAdvance(STATE_SAMPLE) + 18, room)))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_state()

    def update_sessions(
        self, sessions: list[SessionView], slots: Sequence[SourceSlot] = ()
    ) -> None:
        """Refresh the rows; only cells whose text changed are touched.

        Session ``i`` plays ``slots[i % len(slots)]``; a source that no session
        plays (more sources than sessions, e.g. a bad file past the count) gets
        a greyed row of its own, with its error, so every opened source shows.
        """
        rows = [self._session_row(s, slots) for s in sessions]
        played = {s.id % len(slots) for s in sessions} if slots else set()
        rows += [self._slot_row(i, slot) for i, slot in enumerate(slots) if i not in played]
        if any(s.expired for s in sessions) and self.table.isColumnHidden(EXPIRED):
            self.table.setColumnHidden(EXPIRED, False)  # once a window expired, it stays
        if self.table.rowCount() != len(rows):
            self.table.setRowCount(len(rows))
            self._fit_state()  # a scroll bar may have come or gone
            self._rows = [()] * len(rows)
        for row, spec in enumerate(rows):
            self._paint_row(row, spec)

    def _session_row(self, s: SessionView, slots: Sequence[SourceSlot]) -> _Row:
        t = self._look.theme
        errored = s.state == "error"
        state = f"error: {s.error or 'unknown'}" if errored else s.state
        # an errored session's latencies are of no window it could deliver: no number
        measured = not errored and s.latency_ms.get("max", 0.0) > 0
        cells = (
            f"S{s.id}",
            source_cell(s.source),
            state,
            f"{s.fps:.1f}",
            f"{s.latency_ms['p50']:.0f}" if measured else "–",
            str(s.overwritten),
            str(s.expired),
        )
        slot = slots[s.id % len(slots)] if slots else None
        path = mask_credentials(slot.spec) if slot is not None else s.source
        note = _note(slot)
        tip = "\n".join(t for t in (s.error or "", note) if t)
        if note:
            cells = (*cells[:2], state + NOTE_MARK, *cells[3:])
        colour = {"running": t.ok, "error": t.error, "stalled": t.warn}.get(s.state, t.muted)
        if s.state.startswith(RECONNECTING):
            colour = t.warn
        return _Row(cells, s.id, path, tip, colour, session_colour(s.id), note)

    def _slot_row(self, index: int, slot: SourceSlot) -> _Row:
        t = self._look.theme
        shown = mask_credentials(slot.spec)
        name = slot.source.name if slot.source is not None else Path(shown).name or shown
        if slot.error:
            state, tip, colour = f"error: {slot.error}", slot.error, t.error
        else:
            state, tip, colour = "not played", NOT_PLAYED_TIP, t.muted
        if _note(slot):
            state, tip = state + NOTE_MARK, f"{tip}\n{_note(slot)}"
        cells = ("–", source_cell(name), state, "–", "–", "–", "–")
        return _Row(cells, index, shown, tip, colour, None, _note(slot))

    def _paint_row(self, row: int, spec: _Row) -> None:
        t = self._look.theme
        n = len(spec.cells)
        key = (*spec.cells, spec.path, spec.tip, spec.colour, spec.badge, spec.note, t.name)
        old = self._rows[row]
        if old == key:
            return
        self._rows[row] = key
        # same source, kind and look: only the cells whose text changed are touched
        same = bool(old) and old[n:] == key[n:]
        for col, text in enumerate(spec.cells):
            if same and old[col] == text:
                continue
            item = self.table.item(row, col)
            if item is None:
                item = QTableWidgetItem()
                self.table.setItem(row, col, item)
            item.setText(text)
            item.setData(Qt.ItemDataRole.UserRole, spec.key)
            if col == 0:
                item.setBackground(QColor(spec.badge or t.plot))
                item.setForeground(QColor("#101010" if spec.badge else t.muted))
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
            elif col == 1:
                item.setToolTip(plain_tip(spec.path + (f"\n{spec.note}" if spec.note else "")))
                item.setForeground(QColor(t.text if spec.badge else t.muted))
            elif col == 2:
                item.setForeground(QColor(spec.colour))
                item.setToolTip(plain_tip("\n".join(filter(None, (text, spec.tip)))))
            else:
                item.setForeground(QColor(t.text if spec.badge else t.muted))
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def selected_session(self) -> int | None:
        """The selected session's id; a source row's slot index (which maps to that slot)."""
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        return int(item.data(Qt.ItemDataRole.UserRole)) if item else None

    def _remove_selected(self) -> None:
        sid = self.selected_session()
        self.remove_source.emit(-1 if sid is None else sid)

    def _choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add video files", "", VIDEO_FILTER)
        if paths:
            self.add_files.emit(paths)

    def ask_stream(self) -> None:
        """Add stream…: the dialog; a URL it accepts is added and remembered."""
        dialog = StreamDialog(recent_streams(self.settings), self.stream_line(), self)
        if dialog.exec() == StreamDialog.DialogCode.Accepted:
            self._add_stream(dialog.url())

    def _add_stream(self, url: str) -> None:
        remember_stream(self.settings, url)
        self.add_source.emit(url)

    def _fill_cameras(self) -> None:
        from batchscope.engine.sources import list_cameras

        self.camera_menu.clear()
        self.camera_menu.addAction("IP camera or network stream (URL)…").triggered.connect(
            self.ask_stream
        )
        for url in recent_streams(self.settings):
            action = self.camera_menu.addAction(menu_text(f"   {mask_credentials(url)}"))
            action.setToolTip("added before: open it again")
            action.triggered.connect(lambda _=False, u=url: self._add_stream(u))
        self.camera_menu.addSeparator()
        cameras = list_cameras()
        if not cameras:
            self.camera_menu.addAction("no camera found on this machine").setEnabled(False)
        for cam in cameras:
            action = self.camera_menu.addAction(menu_text(f"{cam.name}  (camera:{cam.index})"))
            action.triggered.connect(
                lambda _=False, i=cam.index: self.add_source.emit(f"camera:{i}")
            )
