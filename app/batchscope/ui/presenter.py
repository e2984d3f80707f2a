"""The dashboard's presenter: turns user actions into engine commands, and back.

Views stay dumb: they emit what the user asked for and show what the
presenter says. The presenter validates every config change on the GUI
thread (a ConfigError is shown, never applied), hands valid changes to the
command thread, drives the demo scenarios, and collects engine events for
the plots. It needs no window: it talks to the engine through ``LiveEngine``
(what it uses of ``Engine``) and to the command thread through
``EngineCommands``, so tests drive it with a fake engine and no screen.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, Signal

from batchscope.config import BACKEND_FIELDS, ConfigError, RunConfig
from batchscope.engine.metrics import Event
from batchscope.engine.recorder import RecordingError
from batchscope.ui.commands import ConfigurableEngine, EngineCommands
from batchscope.ui.scenarios import Scenario, ScenarioRunner, Step

if TYPE_CHECKING:
    from batchscope.engine.roster import SourceSlot
    from batchscope.engine.snapshot import Snapshot


class Labelled(Protocol):
    label: str  # e.g. "emulated:laptop-8gb · fp16 · 512x288"


class LiveEngine(ConfigurableEngine, Protocol):
    """What the presenter uses of ``batchscope.engine.engine.Engine``."""

    recorder: object | None

    @property
    def sources(self) -> Sequence[SourceSlot]: ...

    @property
    def backend(self) -> Labelled: ...

    def open(self) -> None: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 2.0) -> None: ...

    def snapshot(self) -> Snapshot: ...

    def subscribe(self, listener: Callable[[Event], None]) -> None: ...

    def add_source(self, spec: str) -> SourceSlot: ...

    def remove_source(self, spec: str) -> None: ...

    def set_paused(self, paused: bool) -> None: ...

    def reset_stats(self, announce: bool = True) -> None: ...

    def start_recording(self, folder: str | Path) -> Path: ...

    def stop_recording(self) -> Path | None: ...


class Presenter(QObject):
    status = Signal(str, str)  # (message, level: info | busy | error | ok)
    config_shown = Signal(object)  # RunConfig the controls should show
    started = Signal(object)  # None, or the error that kept the engine from starting
    caption = Signal(str)  # scenario banner text; "" hides it

    def __init__(
        self,
        engine: LiveEngine,
        parent: QObject | None = None,
        commands: EngineCommands | None = None,
    ) -> None:
        super().__init__(parent)
        self.engine = engine
        self.commands = commands if commands is not None else EngineCommands(engine)
        self.commands.finished.connect(self._on_finished)
        self.scenarios = ScenarioRunner(self)
        self.scenarios.step_due.connect(self._on_step)
        self.scenarios.caption_changed.connect(self.caption)
        self._events: deque[Event] = deque(maxlen=1000)
        engine.subscribe(self._events.append)  # any thread; deque.append is atomic
        self._pending_scenario: Scenario | None = None
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

    def start_engine(self, scenario: Scenario | None = None) -> None:
        """Open the sources and start the threads on the command thread; then ``started``."""
        self._pending_scenario = scenario
        self.status.emit(
            f"Opening {len(self.engine.config.sources) or 'the'} source(s) and "
            f"{self.engine.config.device_label}…",
            "busy",
        )

        def job() -> str | None:
            self.engine.open()
            if self.commands.terminating:
                return "closed before start"
            self.engine.start()
            return None

        self.commands.submit("start", job)

    @property
    def running(self) -> bool:
        return self.engine.running

    def shutdown(self) -> None:
        """Stop the scenario, the command thread and every engine thread (once)."""
        if self._closed:
            return
        self._closed = True
        self.scenarios.cancel()
        self.commands.terminate()  # no job starts after this
        self.engine.stop()  # ends what a running job waits for (a build, an open)
        self.commands.stop()

    # -- reading ---------------------------------------------------------------------------

    def snapshot(self) -> Snapshot | None:
        return self.engine.snapshot() if self.engine.running else None

    def drain_events(self) -> list[Event]:
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    # -- user actions ----------------------------------------------------------------------

    def change(self, changes: dict[str, Any], by_user: bool = True) -> bool:
        """Validate and apply RunConfig changes; False (and an error status) if invalid."""
        if by_user:
            self.scenarios.cancel()
        try:
            new = self.engine.config.with_changes(**changes)
        except ConfigError as exc:
            self.status.emit(f"Not applied: {exc}", "error")
            return False
        if not self.engine.config.diff(new) and not self.commands.busy:
            return True  # nothing to do, and nothing queued that this would override
        self.commands.apply_changes(changes)
        if set(BACKEND_FIELDS) & self.engine.config.diff(new).keys():
            self.status.emit("Applying: building the new backend…", "busy")
        return True

    def load_checkpoint(self, path: str | None) -> bool:
        """Use a BlurBall checkpoint (None: back to untrained weights) on the real model.

        A bad file is refused by the worker with one line naming it and why; the
        running model stays.
        """
        if self.engine.config.backend != "torch":
            self.status.emit(
                "A checkpoint is for the real model: pick CPU or a CUDA GPU under Device first",
                "error",
            )
            return False
        return self.change({"checkpoint": path})

    def set_sessions(self, n: int) -> bool:
        return self.change({"sessions": int(n)})

    def add_sources(self, specs: Iterable[str]) -> None:
        """Open sources on the command thread; a bad one shows its error on its sessions."""
        for spec in specs:
            self.status.emit(f"Opening {spec}…", "busy")
            self.commands.submit(f"add {spec}", lambda s=spec: self._add(s))

    def _add(self, spec: str) -> str | None:
        slot = self.engine.add_source(spec)
        return f"{spec}: {slot.error}" if slot.error else None

    def remove_source(self, spec: str) -> None:
        if len(self.engine.sources) <= 1:
            self.status.emit("Keep at least one source (add another first).", "error")
            return
        self.commands.submit(f"remove {spec}", lambda: self.engine.remove_source(spec))

    def set_paused(self, paused: bool) -> None:
        if self.engine.running:
            self.engine.set_paused(paused)
            self.status.emit("Paused" if paused else "Running", "info")

    def reset_stats(self) -> None:
        if self.engine.running:
            self.engine.reset_stats()
            self.status.emit("Statistics reset", "info")

    def toggle_recording(self, parent: str | Path) -> Path | None:
        """Start recording into a new ``run-YYYYmmdd-HHMMSS`` folder under ``parent``, or stop.

        Returns the folder while recording, None once stopped. Files are appended
        every second, and closing the window finishes the recording (report.json).
        """
        if self.engine.recorder is not None:
            folder = self.engine.stop_recording()
            self.status.emit(f"Recorded to {folder}", "ok")
            return None
        folder = Path(parent) / time.strftime("run-%Y%m%d-%H%M%S")
        try:
            self.engine.start_recording(folder)
        except RecordingError as exc:
            self.status.emit(str(exc), "error")
            return None
        self.status.emit(f"Recording to {folder}", "info")
        return folder

    def start_scenario(self, scenario: Scenario) -> None:
        if not self.engine.running:
            self._pending_scenario = scenario
            return
        self.scenarios.start(scenario)

    # -- results from the command thread (GUI thread) --------------------------------------

    def _on_finished(self, label: str, error: str | None) -> None:
        if label == "start":
            if error:
                self.status.emit(f"Could not start: {error}", "error")
                self.started.emit(error)
                return
            self.config_shown.emit(self.engine.config)
            self.status.emit(f"Running on {self.engine.backend.label}", "ok")
            self.started.emit(None)
            if self._pending_scenario is not None:
                self.scenarios.start(self._pending_scenario)
                self._pending_scenario = None
            return
        if error:
            self.status.emit(f"Not applied: {error}" if label == "apply" else error, "error")
            self.config_shown.emit(self.engine.config)
        elif label == "apply" and not self.commands.busy:
            self.status.emit(
                f"Applied: {self.engine.config.policy_phrase()} on {self.engine.backend.label}",
                "ok",
            )
        elif label.startswith(("add ", "remove ")) and not self.commands.busy:
            self.status.emit(f"Sources: {', '.join(s.spec for s in self.engine.sources)}", "ok")

    def _on_step(self, step: Step, index: int) -> None:
        changes = step.as_dict()
        self.change(changes, by_user=False)
        self.config_shown.emit(_preview(self.engine.config, changes))
        if index == 0:
            # a clean start for the plots once the first step has been applied
            self.commands.submit("reset", lambda: self.engine.reset_stats(announce=False))


def _preview(config: RunConfig, changes: dict[str, Any]) -> RunConfig:
    """What the config will be once ``changes`` are applied (for the controls)."""
    try:
        return config.with_changes(**changes)
    except ConfigError:
        return config
