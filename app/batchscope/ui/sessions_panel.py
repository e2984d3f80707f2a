"""The sessions panel: one row per session, source buttons and the session-count slider."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from superqt import QLabeledSlider
from superqt.utils import qdebounced

from batchscope.config import KNOBS
from batchscope.engine.snapshot import SessionView
from batchscope.ui.theme import Look, session_colour

COLUMNS = ("", "Source", "State", "fps", "p50 ms", "Overwr.", "Expired")
#: header tooltips
COLUMN_TIPS = {
    "Overwr.": "windows replaced in the mailbox before the worker took them",
    "Expired": "windows dropped for waiting longer than Drop after ms (deadline drop)",
}
VIDEO_FILTER = "Videos (*.mp4 *.avi *.mov *.mkv *.webm *.m4v);;All files (*)"
SESSIONS = KNOBS["sessions"]


class SessionsPanel(QWidget):
    add_files = Signal(list)  # paths
    add_source = Signal(str)  # spec (camera:N, synthetic)
    remove_source = Signal(int)  # session id whose source to remove; -1: none selected
    sessions_changed = Signal(int)

    def __init__(self, look: Look, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._look = look
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)

        count_row = QHBoxLayout()
        count_row.addWidget(QLabel("Sessions"))
        self.count = QLabeledSlider(Qt.Orientation.Horizontal)
        self.count.setRange(int(SESSIONS.slider[0]), int(SESSIONS.slider[1]))
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
        header = self.table.horizontalHeader()
        # fixed number columns: resize-to-contents would re-measure every row on each update
        header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self._size_columns()
        layout.addWidget(self.table, 1)

        buttons = QHBoxLayout()
        self.files_button = QPushButton("Add videos…")
        self.camera_button = QToolButton()
        self.camera_button.setText("Add camera")
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
        self._emit_count = qdebounced(
            lambda: self.sessions_changed.emit(self.count.value()), timeout=250
        )
        self.count.valueChanged.connect(self._emit_count)
        self._rows: list[tuple] = []

    def show_count(self, n: int) -> None:
        self._emit_count.cancel()
        self.count.blockSignals(True)
        # a count past the slider's usual range widens it: shown as it is, never clamped
        if n > self.count.maximum():
            self.count.setMaximum(min(int(SESSIONS.hi), n))
        self.count.setValue(n)
        self.count.blockSignals(False)

    def set_look(self, look: Look) -> None:
        self._look = look
        self._rows = [()] * self.table.rowCount()  # repaint state colours
        self._size_columns()

    def _size_columns(self) -> None:
        fm = self.table.fontMetrics()
        for col, sample in (
            (0, "S00"),
            (3, "000.0"),
            (4, "p50 ms"),
            (5, "Overwr."),
            (6, "Expired"),
        ):
            self.table.setColumnWidth(col, fm.horizontalAdvance(sample) + 18)

    def update_sessions(self, sessions: list[SessionView]) -> None:
        """Refresh the rows; only cells whose text changed are touched."""
        t = self._look.theme
        if self.table.rowCount() != len(sessions):
            self.table.setRowCount(len(sessions))
            self._rows = [()] * len(sessions)
        for row, s in enumerate(sessions):
            state = s.state if s.state != "error" else f"error: {s.error or 'unknown'}"
            cells = (
                f"S{s.id}",
                s.source,
                state,
                f"{s.fps:.1f}",
                f"{s.latency_ms['p50']:.0f}" if s.latency_ms.get("max", 0.0) > 0 else "–",
                str(s.overwritten),
                str(s.expired),
            )
            key = (*cells, t.name)
            old = self._rows[row]
            if old == key:
                continue
            self._rows[row] = key
            colour = {"running": t.ok, "error": t.error}.get(s.state, t.muted)
            for col, text in enumerate(cells):
                if old and old[col] == text and old[-1] == t.name:
                    continue
                item = self.table.item(row, col)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, col, item)
                item.setText(text)
                if col == 0:
                    item.setBackground(QColor(session_colour(s.id)))
                    item.setForeground(QColor("#101010"))
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                elif col == 2:
                    item.setForeground(QColor(colour))
                    item.setToolTip(s.error or "")
                elif col >= 3:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )

    def selected_session(self) -> int | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        return int(item.text()[1:]) if item else None

    def _remove_selected(self) -> None:
        sid = self.selected_session()
        self.remove_source.emit(-1 if sid is None else sid)

    def _choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add video files", "", VIDEO_FILTER)
        if paths:
            self.add_files.emit(paths)

    def _fill_cameras(self) -> None:
        from batchscope.engine.sources import list_cameras

        self.camera_menu.clear()
        cameras = list_cameras()
        if not cameras:
            self.camera_menu.addAction("no camera found").setEnabled(False)
        for cam in cameras:
            action = self.camera_menu.addAction(f"{cam.name}  (camera:{cam.index})")
            action.triggered.connect(
                lambda _=False, i=cam.index: self.add_source.emit(f"camera:{i}")
            )
