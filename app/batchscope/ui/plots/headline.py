"""Headline numbers in large type (readable from the back of a room) and the status bar."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from PySide6.QtCore import QSize, Signal
from PySide6.QtGui import QResizeEvent
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

from batchscope.engine.host_check import OTHERS_BUSY
from batchscope.engine.report.host import BUSY_MS, host_word
from batchscope.engine.snapshot import SCOPE_LABELS, SCOPES, SessionView, Snapshot
from batchscope.engine.stats import fps_figures, served
from batchscope.ui.plain_text import ElidedLabel
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
PENDING = "…"  # a figure while its segment settles
MIN_SCALE = 0.7  # the figures' type shrinks to fit a narrow strip, down to this share

#: How the headline names a session state other than running (``SessionView.state``).
STATE_WORDS = {"error": "in error", "stalled": "stalled"}


def headline_numbers(snap: Snapshot) -> dict[str, str]:
    """The headline figures, formatted (same definitions as the report).

    While the current segment settles (its first second after a change) every
    figure reads "…" and the scope under the selector says "settling…": the old
    setting's numbers would be stale, and the new one's do not exist yet. (The
    word itself in the figures' 26 pt type would not fit seven times in a 1280 px
    window.)
    """
    if snap.settling:
        return dict.fromkeys((key for key, _ in KPIS), PENDING)
    fleet = fps_figures((s.state, s.fps) for s in snap.sessions)
    any_served = any(served(s.state) for s in snap.sessions)
    lat = snap.latency_ms
    windows = sum(len(ms) for ms in snap.recent_latency_ms.values())
    dash = "–"
    return {
        "throughput": f"{snap.throughput_wps:.0f}",
        "mean_fps": f"{fleet['mean_fps']:.1f}" if any_served else dash,
        "min_fps": f"{fleet['min_fps']:.1f}" if any_served else dash,
        "jain": f"{fleet['jain']:.2f}" if fleet["jain"] is not None else dash,
        "p50": f"{lat['p50']:.0f}" if windows else dash,
        "p99": f"{lat['p99']:.0f}" if windows else dash,
        "busy": f"{100 * snap.busy:.0f}%",
    }


def session_summary(sessions: Sequence[SessionView]) -> tuple[str, str, str]:
    """The headline's sessions figure: (value, name, level "warn" | "error"); all ""
    while every session runs (then the strip shows no such figure).

    Why: the fps figures cover the sessions being served (``engine.stats.served``),
    so a session in error is left out of mean, min fps and Jain, and with S2's
    source failed they read min fps 26.0, fairness 1.00 as if all were well. This
    figure names every session that is not running ("1 in error", "1 stalled") and
    how many sessions the fps figures cover ("fps over 2 of 3").
    """
    # "reconnecting (3)" and "(1)" are one kind here: the attempt is each session's own
    others = Counter(s.state.split(" (")[0] for s in sessions if s.state != "running")
    if not others:
        return "", "", ""
    value = " · ".join(f"{k} {STATE_WORDS.get(state, state)}" for state, k in others.items())
    covered = sum(served(s.state) for s in sessions)
    name = f"fps over {covered} of {len(sessions)}" if covered else "no fps figures"
    return value, name, "error" if "error" in others else "warn"


NBSP = "\u00a0"


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
        # never narrower than what it says: the selector and its scope keep their room
        self.scope.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.scope.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.scope_label = QLabel()
        self.scope_label.setObjectName("kpiName")
        self.scope_label.setWordWrap(True)
        box = QVBoxLayout()
        box.setSpacing(2)
        box.addWidget(self.scope)
        box.addWidget(self.scope_label)
        row.addLayout(box)
        row.addStretch(1)
        # live states, not a scope's figure: never "settling…", so not among ``values``;
        # shown only while a session is not running
        self.sessions_value, self.sessions_name = _figure(row, "", "")
        for label in (self.sessions_value, self.sessions_name):
            label.hide()
        pairs = {key: _figure(row, "–", name) for key, name in KPIS}
        self.values: dict[str, QLabel] = {key: pair[0] for key, pair in pairs.items()}
        #: every (figure, name) in the strip, the sessions' own first
        self._pairs = [(self.sessions_value, self.sessions_name), *pairs.values()]
        self._scale = 1.0  # the figures' type, × the look's (below 1: a narrow strip)
        self._room_share = 1.0  # of the estimated room the figures may take (learnt)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_figures()

    def minimumSizeHint(self) -> QSize:
        """As tall as its wrapped names and scope need at its width: the window's least
        height then counts them (the hint alone took one line each, and at 1280×800 in
        presentation mode the Segments dock kept room the plots under the strip needed)."""
        hint = super().minimumSizeHint()
        layout = self.layout()
        if self.width() > 0 and layout is not None and layout.hasHeightForWidth():
            hint.setHeight(max(hint.height(), layout.totalHeightForWidth(self.width())))
        return hint

    def restyle(self) -> None:
        """The look changed: the figures at its type again, then fitted."""
        self._scale = self._room_share = 1.0
        self.scope_label.setMinimumHeight(0)
        for value, _ in self._pairs:
            value.setStyleSheet("")
            value.setMinimumWidth(0)
        self._fit_figures()

    def _fit_figures(self) -> None:
        """Every figure whole: on a strip too narrow for them at the look's size (a 1280 px
        window with the panel open) their type shrinks, to no less than MIN_SCALE of it.

        A figure keeps the widest width it has had at this type: fps going "9.5" ↔ "12.0"
        from one tick to the next would otherwise make the strip twitch, and lay it out
        again every tick (a tick drawn before that layout shows the wider figure cut)."""
        shown = [(v, n) for v, n in self._pairs if v.isVisibleTo(self)]
        if not shown or self.width() <= 0:
            return
        layout = self.layout()
        margins = layout.contentsMargins()
        room = self.width() - margins.left() - margins.right() - self.scope.sizeHint().width()
        room -= 3 * layout.spacing() * (len(shown) + 1)
        figure = shown[0][0].fontMetrics()  # at the current scale
        need = 0.0
        for value, name in shown:
            word = max(map(name.fontMetrics().horizontalAdvance, name.text().split() or [""]))
            held = max(figure.horizontalAdvance(value.text()), value.minimumWidth())
            need += max(held / self._scale, word)
        if any(v.fontMetrics().horizontalAdvance(v.text()) > v.width() for v, _ in shown):
            self._room_share = max(0.5, self._room_share - 0.03)  # the estimate was short
        scale = min(1.0, room * self._room_share / need) if need > 0 else 1.0
        scale = max(MIN_SCALE, round(scale, 2))
        if scale != self._scale:
            base = shown[0][0].font().pointSizeF() / self._scale
            self._scale = scale
            sheet = "" if scale == 1.0 else f"font-size: {base * scale:.1f}pt;"
            for value, _ in self._pairs:
                value.setStyleSheet(sheet)
                value.setMinimumWidth(0)  # held at the old type
        for value, _ in self._pairs:
            width = value.fontMetrics().horizontalAdvance(value.text())
            if width > value.minimumWidth():
                value.setMinimumWidth(width)

    def update_from(self, snap: Snapshot) -> None:
        label = scope_text(snap) + (" · newest windows only" if snap.truncated else "")
        if snap.settling:
            label += f" · {SETTLING}"
        # wrapped between its parts, never inside one ("since 0.0" over a lone "s")
        label = " · ".join(part.replace(" ", NBSP) for part in label.split(" · "))
        if self.scope_label.text() != label:
            self.scope_label.setText(label)
            # as tall as it has been: "· settling…" for a second after each change must
            # not move everything under the strip down a line and back
            lines = self.scope_label.heightForWidth(self.scope_label.width())
            if lines > self.scope_label.minimumHeight():
                self.scope_label.setMinimumHeight(lines)
        for key, text in headline_numbers(snap).items():
            if self.values[key].text() != text:
                self.values[key].setText(text)
        value, name, level = session_summary(snap.sessions)
        for label, text in ((self.sessions_value, value), (self.sessions_name, name)):
            if label.text() != text:
                label.setText(text)
                label.setVisible(bool(text))
        self._fit_figures()
        if self.sessions_value.property("level") != level:
            self.sessions_value.setProperty("level", level)  # the style sheet's [level=…] rule
            self.sessions_value.style().unpolish(self.sessions_value)
            self.sessions_value.style().polish(self.sessions_value)


def _figure(row: QHBoxLayout, value: str, name: str) -> tuple[QLabel, QLabel]:
    """A big ``value`` over its small ``name``, added to ``row``: (value, name) labels.

    A strip too narrow for all (a 1280 px window with the panel open) cuts the
    names before the numbers: a name may shrink to nothing, a number keeps its width.
    """
    box = QVBoxLayout()
    box.setSpacing(0)
    big, small = QLabel(value), QLabel(name)
    big.setObjectName("kpiValue")
    small.setObjectName("kpiName")
    small.setWordWrap(True)  # "throughput (windows/s)" on two lines when narrow
    box.addWidget(big)
    box.addWidget(small)
    row.addLayout(box)
    row.addStretch(1)
    return big, small


class StatusLine(QStatusBar):
    """Device and memory, weights, throughput, busy, policy; plus the latest apply message."""

    def __init__(self, look: Look, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._look = look
        # file names, experiment names and errors: drawn as they are (ui/plain_text.py)
        # each part shrinks to a few characters, cut with "…", whole in its tooltip
        self.message = ElidedLabel(min_chars=12)
        # the device, weights and policy are on screen elsewhere (the controls, the
        # titles): they give way furthest, so the whole host warning fits at 1280 px
        self.device = ElidedLabel(min_chars=4)
        self.weights = ElidedLabel(min_chars=4)
        self.rate = ElidedLabel()
        self.host = ElidedLabel(whole=True)  # a warning: the other parts give way first
        self.policy = ElidedLabel(min_chars=4)
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.addWidget(self.message, 1)
        for w in (self.device, self.weights, self.rate, self.host, self.policy):
            self.addPermanentWidget(w)
        self._host_word = ""
        self._probe: dict | None = None  # the start's timer probe (engine/host_check.py)
        self._probe_phrase = ""
        self._level = "info"
        self._replaced = ""  # the message before this one

    def set_look(self, look: Look) -> None:
        self._look = look
        self.show_message(self.message.text(), self._level)

    def show_message(self, text: str, level: str = "info") -> None:
        t = self._look.theme
        colour = {"error": t.error, "ok": t.ok, "busy": t.accent}.get(level, t.text)
        if text != self.message.text():
            self._replaced = self.message.text()
        self._level = level
        self.message.setStyleSheet(f"color: {colour};")
        self.message.setText(text)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._share()

    def _share(self) -> None:
        """The message keeps a third of the line; the permanent parts share the rest. Never
        more than what their least widths leave (the whole host warning among them), on a
        resize and whenever a part's text changes: a third of 1280 px beside a longer host
        warning asked 1,294 px, and the window grew past the screen."""
        message = self.message
        held = max(message.minimumWidth(), message.minimumSizeHint().width())
        others = self.minimumSizeHint().width() - held  # every part's least, the grip's
        room = self.width() - others
        message.setMinimumWidth(max(0, min(self.width() // 3, room)))

    def clear_message(self, text: str) -> None:
        """Clear the message ``text`` once what it says is over; also the error that
        replaced it (a fault's own: "session 2: source error"). A later message stays."""
        current = self.message.text()
        if current == text or (self._replaced == text and self._level == "error"):
            self.show_message("")

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
        changed = False
        for label, text in texts:
            if label.text() != text:
                label.setText(text)
                changed = True
        if changed:
            self._share()
        p99 = snap.host_late_ms["p99"]
        if p99 == 0.0 and self._probe is not None:  # no window measured yet: the probe's
            p99 = self._probe["p99_ms"]
        self._show_host(p99, snap.host_load.get("others"))

    def show_probe(self, result: dict, phrase: str) -> None:
        """The start's timer probe: shown in the host part until windows measure it."""
        self._probe, self._probe_phrase = result, phrase
        self.host.setText("")  # the next update redraws it with the probe's words

    def _show_host(self, p99_ms: float, others: float | None = None) -> None:
        """``host: quiet``, ``host: busy · late 7 ms`` (other work on the machine), or
        ``host: late 7 ms (this app)`` (no other load: BatchScope's own work delays it)."""
        word = host_word(p99_ms)
        own = others is not None and others < OTHERS_BUSY
        if word == "quiet":
            text = "host: quiet"
        elif own:
            text = f"host: late {p99_ms:.0f} ms (this app)"
        else:
            text = f"host: busy · late {p99_ms:.0f} ms"
        if text == self.host.text():
            return
        self.host.setText(text)
        self._share()
        t = self._look.theme
        self.host.setStyleSheet(f"color: {t.warn};" if word == "busy" else "")
        whose = (
            "No other load on the machine: BatchScope's own work (drawing this window, "
            "decoding) delays them."
            if own
            else "Other work on the machine delays them."
            if word == "busy"
            else ""
        )
        self.host.setToolTip(
            f"How late this machine woke BatchScope's threads over the last 5 s (p99 "
            f"{p99_ms:.1f} ms): the feeder publishing frames, the worker starting batches, "
            f"the emulated device's timer. {whose} From {BUSY_MS:g} ms latency tails include "
            "the machine's delay, not only the policy's (the report's host_late_ms; the "
            "stage 'host')."
            + (f"\nAt the start, {self._probe_phrase}" if self._probe_phrase else "")
        )
