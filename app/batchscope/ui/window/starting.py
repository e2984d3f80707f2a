"""What the app shows while it starts: a title and one line of what it is doing, centred.

Why it exists (issue 16, "start-up speed"): the window stayed black for about 3 s while
the app imported torch, pyqtgraph and the engine and built the dashboard, then showed
empty plots until the sources were decoded. ``batchscope.ui.window.app`` now shows this view as
the first window, on the theme's palette, before anything heavy is imported; the main
window then shows it in place of the plots until the engine runs. Plain Qt widgets only,
so it can paint before pyqtgraph or the engine load.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPaintEvent
from PySide6.QtWidgets import QVBoxLayout, QWidget

from batchscope.ui.plain_text import plain_label

#: The main window's title; the starting window has the same, as it stands in for it.
WINDOW_TITLE = "BatchScope — live batching lab"


class StartingView(QWidget):
    """A centred title ("Starting the demo…") and a detail line, on the window's palette.

    ``painted`` is emitted after its first paint: the app waits for it before it imports
    the rest.
    """

    painted = Signal()

    def __init__(self, title: str = "Starting BatchScope…", parent: QWidget | None = None):
        super().__init__(parent)
        self.was_painted = False
        self.setAutoFillBackground(True)  # the palette's window colour, also as a top level
        # an experiment's name, file names, errors: drawn as they are
        self.title = plain_label(title)
        self.title.setObjectName("startingTitle")
        self.detail = plain_label()
        self.detail.setObjectName("startingDetail")
        self.detail.setWordWrap(True)
        self.detail.setProperty("level", "busy")
        lay = QVBoxLayout(self)
        lay.addStretch(1)
        for label in (self.title, self.detail):
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            lay.addWidget(label)
        lay.addStretch(1)

    def set_title(self, text: str) -> None:
        self.title.setText(text)

    def say(self, text: str, level: str = "busy") -> None:
        """The detail line: what is happening (``busy``) or why it stopped (``error``)."""
        self.detail.setText(text)
        if self.detail.property("level") != level:
            self.detail.setProperty("level", level)
            self.detail.style().unpolish(self.detail)  # the style sheet's [level=…] rule
            self.detail.style().polish(self.detail)

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if not self.was_painted:
            self.was_painted = True
            self.painted.emit()
