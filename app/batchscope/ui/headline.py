"""Headline numbers in large type (readable from the back of a room) and the status bar."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QStatusBar,
    QVBoxLayout,
    QWidget,
)

from batchscope.engine.snapshot import SCOPE_LABELS, SCOPES, Snapshot
from batchscope.engine.stats import fps_figures, latency_summary, served
from batchscope.ui.plain_text import plain_label, plain_tip
from batchscope.ui.theme import Look

KPIS = (
    ("throughput", "throughput (windows/s)"),
    ("mean_fps", "mean fps"),
    ("min_fps", "min fps"),
    ("jain", "fairness (Jain)"),
    ("p50", "p50 latency (ms)"),
    ("p99", "p99 latency (ms)"),
    ("busy", "device busy"),
)


SETTLING = "settling…"


def headline_numbers(snap: Snapshot) -> dict[str, str]:
    """The headline figures, formatted (same definitions as the report).

    While the current segment settles (its first second after a change) every
    figure reads "settling…": the old setting's numbers would be stale, and the
    new one's do not exist yet.
    """
    if snap.settling:
        return dict.fromkeys((key for key, _ in KPIS), SETTLING)
    fleet = fps_figures((s.state, s.fps) for s in snap.sessions)
    any_served = any(served(s.state) for s in snap.sessions)
    parts = list(snap.recent_latency_ms.values())
    ms = np.concatenate(parts) if parts else np.empty(0)
    lat = latency_summary(ms)
    dash = "–"
    return {
        "throughput": f"{snap.throughput_wps:.0f}",
        "mean_fps": f"{fleet['mean_fps']:.1f}" if any_served else dash,
        "min_fps": f"{fleet['min_fps']:.1f}" if any_served else dash,
        "jain": f"{fleet['jain']:.2f}" if any_served else dash,
        "p50": f"{lat['p50']:.0f}" if ms.size else dash,
        "p99": f"{lat['p99']:.0f}" if ms.size else dash,
        "busy": f"{100 * snap.busy:.0f}%",
    }


def scope_text(snap: Snapshot) -> str:
    """What the figures cover, in a few words: "segment 2 · since 10.4 s"."""
    if snap.scope == "segment" and snap.segment is not None:
        return f"segment {snap.segment.index} · since {snap.segment.start_s:.1f} s"
    return SCOPE_LABELS[snap.scope]


class HeadlineStrip(QFrame):
    """The big numbers, with the scope selector they (and the distribution plots) follow."""

    scope_changed = Signal(str)  # one of SCOPES

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("kpis")
        # the big numbers (26 pt in presentation mode) must never widen the window past the screen
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 4, 10, 4)
        self.scope = QComboBox()
        for key in SCOPES:
            self.scope.addItem(SCOPE_LABELS[key], key)
        self.scope.setToolTip(
            "What the latency figures, histogram, stage bars and batch sizes cover"
        )
        self.scope.currentIndexChanged.connect(
            lambda _: self.scope_changed.emit(self.scope.currentData())
        )
        self.scope_label = QLabel()
        self.scope_label.setObjectName("kpiName")
        box = QVBoxLayout()
        box.setSpacing(2)
        box.addWidget(self.scope)
        box.addWidget(self.scope_label)
        row.addLayout(box)
        row.addStretch(1)
        self.values: dict[str, QLabel] = {}
        for key, name in KPIS:
            box = QVBoxLayout()
            box.setSpacing(0)
            value = QLabel("–")
            value.setObjectName("kpiValue")
            label = QLabel(name)
            label.setObjectName("kpiName")
            box.addWidget(value)
            box.addWidget(label)
            row.addLayout(box)
            row.addStretch(1)
            self.values[key] = value

    def update_from(self, snap: Snapshot) -> None:
        label = scope_text(snap) + (" · newest windows only" if snap.truncated else "")
        if self.scope_label.text() != label:
            self.scope_label.setText(label)
        for key, text in headline_numbers(snap).items():
            if self.values[key].text() != text:
                self.values[key].setText(text)


class StatusLine(QStatusBar):
    """Device and memory, weights, throughput, busy, policy; plus the latest apply message."""

    def __init__(self, look: Look, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._look = look
        # file names, experiment names and errors: drawn as they are (ui/plain_text.py)
        self.message = plain_label()
        self.device = plain_label()
        self.weights = plain_label()
        self.rate = plain_label()
        self.policy = plain_label()
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.message.setMinimumWidth(40)
        self.addWidget(self.message, 1)
        for w in (self.device, self.weights, self.rate, self.policy):
            self.addPermanentWidget(w)
        self._level = "info"

    def set_look(self, look: Look) -> None:
        self._look = look
        self.show_message(self.message.text(), self._level)

    def show_message(self, text: str, level: str = "info") -> None:
        t = self._look.theme
        colour = {"error": t.error, "ok": t.ok, "busy": t.accent}.get(level, t.text)
        self._level = level
        self.message.setStyleSheet(f"color: {colour};")
        self.message.setText(text)
        self.message.setToolTip(plain_tip(text))

    def update_from(self, snap: Snapshot) -> None:
        total = snap.memory.get("device_total_mb")
        device = snap.device + (f" · {total / 1024:.0f} GB" if total else "")
        texts = (
            (self.device, device),
            (self.weights, snap.weights),
            (
                self.rate,
                f"{snap.throughput_wps:.0f} w/s · busy {100 * snap.busy:.0f}%"
                + (" · paused" if snap.paused else ""),
            ),
            (self.policy, snap.config.policy_phrase()),
        )
        for label, text in texts:
            if label.text() != text:
                label.setText(text)
