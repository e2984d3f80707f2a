"""Faults on cue: the Faults menu and its small dialog (session, factor, seconds).

Each item asks for what its fault takes (``experiment.FAULT_FIELDS``), with
defaults, checks it as an experiment step's fault is checked
(``experiment.make_fault``: one line naming the field and the value), and hands
``Engine.inject`` to the presenter's command thread, so the GUI never waits on
the engine. The engine then opens a segment and sends ``fault`` events, which the
time plots mark, when it starts and when it ends by itself; at the end the status
line's "Fault: …" goes (:func:`ended_fault`), so it never says a fault that is over.
"""

from __future__ import annotations

from typing import Any, Protocol

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QMenuBar,
    QWidget,
)

from batchscope.engine.faults import ENDED
from batchscope.engine.report.phrases import fault_phrase
from batchscope.experiment import FAULT_FIELDS, ExperimentError, Fault, make_fault
from batchscope.ui.plain_text import plain_label

#: menu text and tooltip of each fault kind, in the menu's order
KINDS = {
    "stall": ("Stall session…", "The session's source sends nothing for a while, then resumes"),
    "burst": ("Burst…", "The session sends factor × its fps for a while"),
    "slow_device": ("Slow device…", "Every batch takes factor × longer for a while"),
    "source_error": ("Source error…", "The session's source fails, shows the error, recovers"),
}
DEFAULTS = {"session": "0", "for_s": "5"}
DEFAULT_FACTOR = {"burst": "3", "slow_device": "2"}
LABELS = {"session": "Session", "factor": "Factor (×)", "for_s": "For (s)"}
WHERE = "fault"  # how errors name the place: "fault: burst: factor = 0.0: …"
ERROR_MIN_PX = 320  # the dialog's error wraps at this width at least


class FaultTarget(Protocol):
    """What the dialog needs of the presenter: the engine's session count and a job queue."""

    @property
    def engine(self) -> Any: ...

    @property
    def commands(self) -> Any: ...

    @property
    def status(self) -> Any: ...


def parse_fault(kind: str, texts: dict[str, str], sessions: int) -> Fault:
    """The fault from the dialog's texts; ExperimentError (one line) if a value is wrong,
    worded for a fault on the run (an experiment file's says "this step has sessions…")."""
    table: dict[str, Any] = {}
    for name in FAULT_FIELDS[kind]:
        text = texts.get(name, "").strip()
        try:
            table[name] = int(text) if name == "session" else float(text)
        except ValueError:
            words = "a whole number" if name == "session" else "a number"
            raise ExperimentError(f"{WHERE}: {kind}: {name} = {text!r}: expected {words}") from None
    session = table.get("session")
    if session is not None and not 0 <= session < sessions:
        raise ExperimentError(
            f"{WHERE}: {kind}: session = {session}: no such session (the run has "
            + (f"sessions 0 to {sessions - 1})" if sessions > 1 else "session 0 only)")
        )
    return make_fault(kind, table, WHERE, sessions)


def dialog_error(kind: str, message: str) -> str:
    """``message`` (``parse_fault``'s) as the dialog says it: without the "fault: kind:"
    its title says already, each field by its label ("For (s) = -1.0: must be …")."""
    text = message.removeprefix(f"{WHERE}: {kind}: ")
    for name, label in LABELS.items():
        if text.startswith(f"{name} = "):
            return label + text[len(name) :]
    return text


def fault_status(description: str) -> str:
    """The status line's message while the fault ``description`` (``fault_phrase``) is on."""
    return f"Fault: {description}"


def ended_fault(message: str) -> str | None:
    """The description of the fault that a ``fault`` event's ``message`` says ended, or None
    (the event of its start)."""
    return message.removeprefix(ENDED) if message.startswith(ENDED) else None


def inject(target: FaultTarget, fault: Fault) -> None:
    """Start ``fault`` on the command thread; the status line says so (or the error)."""
    engine = target.engine
    target.status.emit(fault_status(fault_phrase(fault)), "info")
    target.commands.submit(f"fault {fault.kind}", lambda: engine.inject(fault))


class FaultDialog(QDialog):
    """Asks for one fault's fields; OK only once they are valid (the error shows in one line)."""

    def __init__(self, kind: str, sessions: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kind = kind
        self.sessions = sessions
        self.setWindowTitle(KINDS[kind][0].rstrip("…"))
        form = QFormLayout(self)
        form.addRow(QLabel(KINDS[kind][1]))
        self.fields: dict[str, QLineEdit] = {}
        for name in FAULT_FIELDS[kind]:
            edit = QLineEdit(DEFAULT_FACTOR[kind] if name == "factor" else DEFAULTS[name])
            if name == "session":
                edit.setToolTip(f"0 to {sessions - 1}")
            self.fields[name] = edit
            form.addRow(LABELS[name], edit)
        self.error = plain_label()  # the error quotes what was typed
        self.error.setObjectName("controlError")
        self.error.setWordWrap(True)  # whole, on as many lines as it takes (it was cut)
        self.error.setMinimumWidth(ERROR_MIN_PX)
        self.error.hide()
        form.addRow(self.error)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.result_fault: Fault | None = None

    def fault(self) -> Fault:
        texts = {name: edit.text() for name, edit in self.fields.items()}
        return parse_fault(self.kind, texts, self.sessions)

    def accept(self) -> None:
        try:
            self.result_fault = self.fault()
        except ExperimentError as exc:
            self.error.setText(dialog_error(self.kind, str(exc)))
            self.error.show()
            # as tall as the wrapped error needs at the dialog's width
            self.layout().activate()
            width = max(self.width(), self.sizeHint().width())
            self.resize(width, max(self.height(), self.layout().totalHeightForWidth(width)))
            return
        super().accept()


def add_faults_menu(bar: QMenuBar, target: FaultTarget, parent: QWidget) -> QMenu:
    """The Faults menu: one item per kind, each opening its dialog, then injecting."""
    menu = bar.addMenu("F&aults")
    menu.setToolTipsVisible(True)
    for kind, (text, tip) in KINDS.items():
        action = menu.addAction(text)
        action.setToolTip(tip)
        action.setObjectName(f"fault-{kind}")
        action.triggered.connect(lambda _=False, k=kind: ask_and_inject(k, target, parent))
    return menu


def ask_and_inject(kind: str, target: FaultTarget, parent: QWidget) -> Fault | None:
    dialog = FaultDialog(kind, target.engine.config.sessions, parent)
    if dialog.exec() != QDialog.DialogCode.Accepted or dialog.result_fault is None:
        return None
    inject(target, dialog.result_fault)
    return dialog.result_fault
