"""Add stream…: a network stream's URL typed or picked from the recent ones.

The recent URLs are kept in the app's settings (QSettings, as the sources of the last
run are) so that a stream with a password can be opened again without typing it; the
list shows them masked (``rtsp://user:***@host/…``), never the password, and the
dialog hands the real URL to the engine. A text that is no stream URL is refused in
the dialog, with the reason, before anything opens.
"""

from __future__ import annotations

import json

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QVBoxLayout,
    QWidget,
)

from batchscope.config import RunConfig
from batchscope.ui.plain_text import plain_label
from batchscope.urls import is_stream, mask_credentials

RECENT_KEY = "recent_streams"
MAX_RECENT = 8

EXAMPLES = (
    "rtsp://user:password@camera.local:554/stream1\n"
    "http://camera.local/video.mjpg  ·  udp://@:5000  ·  https://host/live/index.m3u8"
)


def recent_streams(settings: QSettings | None) -> list[str]:
    """The URLs added last, newest first (as typed: they may carry a password)."""
    if settings is None:
        return []
    try:
        data = json.loads(str(settings.value(RECENT_KEY, "") or "[]"))
    except json.JSONDecodeError:
        return []
    return [str(u) for u in data if isinstance(u, str) and is_stream(u)][:MAX_RECENT]


def remember_stream(settings: QSettings | None, url: str) -> None:
    """Put ``url`` first in the recent list (once), keeping :data:`MAX_RECENT`."""
    if settings is None:
        return
    urls = [url, *(u for u in recent_streams(settings) if u != url)][:MAX_RECENT]
    settings.setValue(RECENT_KEY, json.dumps(urls))


def stream_settings_line(config: RunConfig) -> str:
    """How streams connect in this run, in one line (the flags that set it)."""
    transport = config.stream_transport
    over = "UDP, then TCP (auto)" if transport == "auto" else transport.upper()
    return (
        f"RTSP over {over} · connect timeout {config.stream_timeout_s:g} s · read timeout "
        f"{config.stream_read_timeout_s:g} s (batchscope gui --stream-transport, "
        "--stream-timeout, --stream-read-timeout)"
    )


class StreamDialog(QDialog):
    """A URL box (editable, with the recent URLs masked), examples, and how it connects."""

    def __init__(
        self, recent: list[str], settings_line: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add network stream")
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Stream URL (RTSP, HTTP/MJPEG, HLS, UDP/RTP):"))
        self.box = QComboBox()
        self.box.setEditable(True)
        self.box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.box.setMinimumContentsLength(48)
        for url in recent:  # shown masked; the real URL is the item's data
            self.box.addItem(mask_credentials(url), url)
        self.box.setCurrentIndex(-1)
        self.box.setEditText("")
        self.box.lineEdit().setPlaceholderText("rtsp://…")
        layout.addWidget(self.box)
        examples = plain_label(EXAMPLES)
        examples.setEnabled(False)  # greyed: a hint, not a setting
        layout.addWidget(examples)
        how = plain_label(settings_line)
        how.setWordWrap(True)
        how.setEnabled(False)
        layout.addWidget(how)
        self.error = plain_label("")
        self.error.setObjectName("dialogError")
        self.error.setWordWrap(True)
        self.error.hide()
        layout.addWidget(self.error)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add stream")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def url(self) -> str:
        """The URL to open: a recent one's real URL when its masked text is chosen."""
        text = self.box.currentText().strip()
        index = self.box.findText(text)
        if index >= 0 and self.box.itemData(index):
            return str(self.box.itemData(index))
        return text

    def accept(self) -> None:
        url = self.url()
        if not url:
            return self._refuse("Type a stream URL, or pick a recent one.")
        if not is_stream(url):
            return self._refuse(
                f"{mask_credentials(url)}: not a stream URL. Use rtsp://, rtsps://, "
                "http(s)://, udp://, rtp:// or an .m3u8 playlist (files: Add videos…)."
            )
        super().accept()

    def _refuse(self, message: str) -> None:
        self.error.setText(message)
        self.error.show()
