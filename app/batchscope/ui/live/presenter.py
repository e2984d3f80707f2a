"""The dashboard's presenter: turns user actions into engine commands, and back.

Views stay dumb: they emit what the user asked for and show what the
presenter says. The presenter validates every config change on the GUI
thread (a ConfigError is shown, never applied), hands valid changes to the
command thread, plays experiment files (an ``ExperimentPlayer`` thread whose
callbacks reach the GUI thread through a queued signal), keeps the scope the
live views read, collects engine events for the plots and keeps the run's
history for them (``RunHistory``: the whole run, or since the experiment playing
started, as a fresh ``run --experiment`` plots it). It needs no
window: it talks to the engine through ``LiveEngine`` (what it uses of
``Engine``) and to the command thread through
``EngineCommands``, so tests drive it with a fake engine and no screen.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, Signal

from batchscope.config import BACKEND_FIELDS, ConfigError
from batchscope.engine.metrics import Event
from batchscope.engine.metrics_export import MetricsPortError, MetricsServer
from batchscope.engine.player import ExperimentPlayer, first_config
from batchscope.engine.recorder import RecordingError
from batchscope.engine.report.phrases import fault_phrase
from batchscope.engine.snapshot import SCOPES
from batchscope.experiment import Experiment, ExperimentError, load_experiment
from batchscope.ui.experiments_menu import on_sources
from batchscope.ui.live.commands import ConfigurableEngine, EngineCommands
from batchscope.ui.live.run_history import RunHistory
from batchscope.urls import mask_credentials

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

    def snapshot(self, scope: str = "segment") -> Snapshot: ...

    def report(self, kind: str = "run") -> dict[str, Any]: ...

    def subscribe(self, listener: Callable[[Event], None]) -> None: ...

    def add_source(self, spec: str) -> SourceSlot: ...

    def remove_source(self, spec: str) -> None: ...

    def set_paused(self, paused: bool) -> None: ...

    def reset_stats(self, announce: bool = True) -> None: ...

    def start_recording(self, folder: str | Path) -> Path: ...

    def stop_recording(self) -> Path | None: ...


class Player(Protocol):
    """What the presenter uses of ``ExperimentPlayer``."""

    experiment: Experiment

    def start(self) -> None: ...

    def stop(self, timeout: float = 2.0) -> None: ...

    def segments(self) -> tuple[int, int | None] | None: ...


PlayerFactory = Callable[..., Player]  # (engine, experiment, on_step=, on_end=)


class Presenter(QObject):
    status = Signal(str, str)  # (message, level: info | busy | error | ok)
    config_shown = Signal(object)  # RunConfig the controls should show
    started = Signal(object)  # None, or the error that kept the engine from starting
    caption = Signal(str)  # experiment banner text; "" hides it
    experiment_changed = Signal(str)  # the experiment playing now ("" when none)
    step_applied = Signal(int, object)  # (step index, error or None), on the GUI thread
    # from the player's thread to the GUI thread (queued: the emitter is another thread)
    _step_done = Signal(object, int, object)  # (player, step index, error)
    _ended = Signal(object)  # (player)

    def __init__(
        self,
        engine: LiveEngine,
        parent: QObject | None = None,
        commands: EngineCommands | None = None,
        make_player: PlayerFactory = ExperimentPlayer,
    ) -> None:
        super().__init__(parent)
        self.engine = engine
        self.commands = commands if commands is not None else EngineCommands(engine)
        self.commands.finished.connect(self._on_finished)
        self._make_player = make_player
        self.player: Player | None = None
        self.played: list[Player] = []  # every experiment started in this run, in order
        self._step_done.connect(self._on_step_done)
        self._ended.connect(self._on_ended)
        self.scope = "segment"
        # the time plots: the run since ``history.origin``; the last 60 s, or all of it
        self.history = RunHistory()
        self.whole_run = False
        self._plots_from: int | None = None  # the segment the plots start over at
        self._progress: str | None = None  # the engine's last progress line shown
        self._events: deque[Event] = deque(maxlen=1000)
        engine.subscribe(self._events.append)  # any thread; deque.append is atomic
        self._pending_experiment: Experiment | None = None
        self.metrics: MetricsServer | None = None  # View → Serve metrics… (loopback)
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

    def start_engine(self, experiment: Experiment | None = None) -> None:
        """Open the sources and start the threads on the command thread; then ``started``.

        With ``experiment``, the engine should be on its first config already
        (``first_config``): the player starts once the engine runs.
        """
        if experiment is not None:
            self._pending_experiment = experiment
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
        """Stop the experiment, the command thread and every engine thread (once)."""
        if self._closed:
            return
        self._closed = True
        player, self.player = self.player, None
        if player is not None:
            player.stop(0.0)  # flag it; a step blocked in apply ends with the engine
        self.commands.terminate()  # no job starts after this
        self.serve_metrics(None)
        self.engine.stop()  # ends what a running job waits for (a build, an open)
        if player is not None:
            player.stop()
        self.commands.stop()

    # -- reading ---------------------------------------------------------------------------

    def snapshot(self) -> Snapshot | None:
        progress = self.engine.progress  # a re-decode during a change: say how far
        if progress != self._progress:
            self._progress = progress
            if progress:
                self.status.emit(f"Applying: {progress}", "busy")
        if not self.engine.running:
            return None
        snap = self.engine.snapshot(self.scope)
        self._keep_history(snap)
        return snap

    def _keep_history(self, snap: Snapshot) -> None:
        """Note the segment the run is in and the timeline's new samples; once the segment
        an experiment started in is seen, the plots start over there."""
        seg = snap.segment
        if seg is not None:
            self.history.mark_segment(seg.index, seg.start_s)
        if self._plots_from is not None:
            start = self.history.segment_start(self._plots_from)
            if start is None and seg is not None and seg.index > self._plots_from:
                start = seg.start_s  # it came and went between two snapshots: the next one
            if start is not None:
                self._plots_from = None
                self.history.restart(start)
        self.history.add(snap.timeline)

    def set_whole_run(self, whole: bool) -> None:
        """The time plots show the whole run (True) or follow its last 60 s (False)."""
        self.whole_run = bool(whole)

    def set_scope(self, scope: str) -> None:
        """What the live views cover: "segment" (the default), "60s" or "run"."""
        if scope not in SCOPES:
            raise ValueError(f"scope {scope!r}: choose from {', '.join(SCOPES)}")
        self.scope = scope

    def drain_events(self) -> list[Event]:
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    # -- user actions ----------------------------------------------------------------------

    def change(self, changes: dict[str, Any], by_user: bool = True) -> bool:
        """Validate and apply RunConfig changes; False (and an error status) if invalid."""
        if by_user:
            self.stop_experiment()
        try:
            new = self.engine.config.with_changes(**changes)
        except ConfigError as exc:
            self.status.emit(f"Not applied: {exc}", "error")
            return False
        if not self.engine.config.diff(new) and not self.commands.busy:
            return True  # nothing to do, and nothing queued that this would override
        self.commands.apply_changes(changes)
        backend_changes = set(BACKEND_FIELDS) & self.engine.config.diff(new).keys()
        if new.compile and backend_changes:
            self.status.emit(
                "Applying: compiling the model (30–100 s the first time; the run goes on)…",
                "busy",
            )
        elif backend_changes:
            self.status.emit("Applying: building the new backend…", "busy")
        return True

    def load_checkpoint(self, path: str | None) -> bool:
        """Use a BlurBall checkpoint on the real model: a path, None for the demo weights,
        ``UNTRAINED`` for the untrained initial weights (timing only).

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

    def serve_metrics(self, port: int | None) -> str | None:
        """Serve the run's figures as a Prometheus endpoint on 127.0.0.1:``port`` (0: any
        free port), or stop serving (None). Returns the URL while serving; the status line
        says it, or why the port could not be served."""
        if self.metrics is not None:
            server, self.metrics = self.metrics, None
            server.stop()
            if port is None:
                self.status.emit(f"Metrics no longer served ({server.url})", "info")
        if port is None:
            return None
        try:
            self.metrics = MetricsServer(port, self.engine)
        except MetricsPortError as exc:
            self.status.emit(f"Cannot serve metrics: {exc}", "error")
            return None
        self.status.emit(f"Metrics at {self.metrics.url}", "ok")
        return self.metrics.url

    # -- experiments -----------------------------------------------------------------------

    def open_experiment(self, name_or_path: str) -> Experiment | None:
        """Load an experiment file (or a built-in by name) and play it.

        A bad file is one line in the status bar (the file, the step, the field);
        nothing else stops: the run and any experiment playing go on.
        """
        try:
            experiment = load_experiment(name_or_path)
        except ExperimentError as exc:
            self.status.emit(str(exc), "error")
            return None
        self.play_experiment(experiment)
        return experiment

    def play_experiment(self, experiment: Experiment) -> None:
        """Stop the experiment playing (if any) and play ``experiment`` from its 0 s.

        Its first config is applied as a step (a new segment, with its caption)
        on the command thread, and the player then applies the later steps at
        their times.
        """
        self.stop_experiment()
        if not self.engine.running:
            self._pending_experiment = experiment
            return
        experiment = on_sources(experiment, self.engine.config.sources)
        first = first_config(experiment)
        caption = self._first_caption(experiment)
        self.caption.emit(caption)
        self.experiment_changed.emit(experiment.name)
        self.status.emit(f"Experiment {experiment.name}: setting up…", "busy")
        player = self._new_player(experiment)
        self.player = player

        def job() -> str | None:
            # from its own base, always: nothing of what played before (a drifted phase,
            # a policy's state) carries into it, as in a fresh ``run --experiment``
            error = self.engine.apply(first, caption=caption, step=True, fresh=True)
            if error is None and self.player is player and not self.commands.terminating:
                player.start()
                self.played.append(player)
            return error

        self.commands.submit("experiment", job)

    def experiments_played(self) -> list[tuple[Experiment, tuple[int, int | None]]]:
        """Every experiment started in this run with the segments it played (first, last;
        last None while it plays), for the reports (``export.name_experiments``)."""
        out = []
        for player in list(self.played):
            segments = player.segments()
            if segments is not None:
                out.append((player.experiment, segments))
        return out

    def stop_experiment(self) -> None:
        """Stop the experiment playing; the run goes on with the setting it reached."""
        player, self.player = self.player, None
        if player is None:
            return
        player.stop(0.0)  # never wait on the GUI thread: a step in progress finishes alone
        self.caption.emit("")
        self.experiment_changed.emit("")
        self.status.emit(f"Experiment {player.experiment.name} stopped", "info")

    def _new_player(self, experiment: Experiment) -> Player:
        holder: list[Player] = []
        player = self._make_player(
            self.engine,
            experiment,
            on_step=lambda index, error: self._step_done.emit(holder[0], index, error),
            on_end=lambda: self._ended.emit(holder[0]),
        )
        holder.append(player)
        return player

    @staticmethod
    def _first_caption(experiment: Experiment) -> str:
        steps = experiment.steps
        if steps and steps[0].at == 0 and steps[0].caption:
            return steps[0].caption
        return experiment.caption or experiment.name

    # -- results from the command thread (GUI thread) --------------------------------------

    def _on_finished(self, label: str, error: str | None) -> None:
        if label == "start":
            if error:
                self.status.emit(f"Could not start: {error}", "error")
                self.started.emit(error)
                return
            self.config_shown.emit(self.engine.config)
            self.status.emit(f"Running on {self.engine.where}", "ok")
            self.started.emit(None)
            experiment, self._pending_experiment = self._pending_experiment, None
            if experiment is not None:
                experiment = on_sources(experiment, self.engine.config.sources)
                if self.engine.config == first_config(experiment):
                    self._start_player(experiment)
                else:
                    self.play_experiment(experiment)
            return
        if label == "experiment":
            self.config_shown.emit(self.engine.config)
            played = self.player.segments() if self.player is not None and not error else None
            if played is not None:  # its statistics were reset there (engine: fresh)
                self._plots_from = played[0]
            if error and self.player is not None:
                name, self.player = self.player.experiment.name, None
                self.caption.emit("")
                self.experiment_changed.emit("")
                self.status.emit(f"Experiment {name} not started: {error}", "error")
            return
        if error:
            self.status.emit(f"Not applied: {error}" if label == "apply" else error, "error")
            self.config_shown.emit(self.engine.config)
        elif label == "apply" and not self.commands.busy:
            # every control shows the run as it is now, also when the change came from
            # elsewhere (the Capacity tab's Apply recommended, Open settings)
            self.config_shown.emit(self.engine.config)
            self.status.emit(
                f"Applied: {self.engine.config.policy_phrase()} on {self.engine.where}",
                "ok",
            )
        elif label.startswith(("add ", "remove ")) and not self.commands.busy:
            shown = ", ".join(mask_credentials(s.spec) for s in self.engine.sources)
            self.status.emit(f"Sources: {shown}", "ok")

    def _start_player(self, experiment: Experiment) -> None:
        """Play ``experiment`` on an engine that started on its first config."""
        self.stop_experiment()
        self.caption.emit(self._first_caption(experiment))
        self.experiment_changed.emit(experiment.name)
        self.player = self._new_player(experiment)
        self.player.start()
        self.played.append(self.player)

    def _on_step_done(self, player: Player, index: int, error: str | None) -> None:
        if player is not self.player:
            return  # a step of an experiment stopped meanwhile
        experiment = player.experiment
        step = experiment.steps[index]
        if step.caption and index > 0:
            self.caption.emit(step.caption)
        self.config_shown.emit(self.engine.config)
        where = f"{experiment.name}, step {index + 1} of {len(experiment.steps)} at {step.at:g} s"
        if error:
            self.status.emit(f"{where}: not applied: {error}", "error")
        else:
            did = [*(f"{k} {v}" for k, v in step.changes.items()), *map(fault_phrase, step.faults)]
            self.status.emit(f"{where}: {', '.join(did) or 'no change'}", "ok")
        self.step_applied.emit(index, error)

    def _on_ended(self, player: Player) -> None:
        if player is not self.player:
            return
        self.player = None
        self.caption.emit("")  # its narration is over: the banner goes with it
        self.experiment_changed.emit("")
        self.status.emit(
            f"Experiment {player.experiment.name} finished ({player.experiment.duration:g} s); "
            "the run goes on",
            "ok",
        )
