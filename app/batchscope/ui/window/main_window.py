"""The main window: panels, plots, menus and the one timer that reads the engine.

Everything on screen is refreshed from one ``engine.snapshot(scope)`` per
tick (``TICK_HZ``); the segment table from the segment feed's thread, once a
second. Nothing else in the UI touches the engine's threads. Cards that are
hidden (other tabs) skip their update. Until the engine runs, the plots' place
shows what is starting (``StartingView``), or why it could not start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QByteArray, QRect, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QFrame,
    QGroupBox,
    QInputDialog,
    QMainWindow,
    QMenuBar,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from batchscope.config import UNTRAINED, drop_after_warning
from batchscope.engine.engine import Engine
from batchscope.engine.host_check import probe_phrase
from batchscope.engine.snapshot import Snapshot
from batchscope.experiment import Experiment
from batchscope.ui.capacity import CapacityPresenter, CapacityView
from batchscope.ui.controls import ControlsPanel, DeviceChoice, device_choices
from batchscope.ui.experiments_menu import menu_entries
from batchscope.ui.live import Presenter
from batchscope.ui.plain_text import menu_text, plain_label, plain_tip
from batchscope.ui.plots import (
    BatchSizeBars,
    BusView,
    DeviceBars,
    FpsPlot,
    HeadlineStrip,
    LatencyHistogram,
    MemoryPlot,
    OverwrittenBars,
    PlotCard,
    StageBars,
    StatusLine,
    ThroughputPlot,
    time_window,
    whole_window,
)
from batchscope.ui.segment_table import SegmentFeed, SegmentTable
from batchscope.ui.sessions import SessionsPanel, VideoWall, stream_settings_line
from batchscope.ui.theme import Look, apply_look
from batchscope.ui.window.export import (
    ExportError,
    export_html_report,
    export_png,
    export_report,
    export_segments,
    html_path,
    recordings_folder,
)
from batchscope.ui.window.faults_menu import add_faults_menu, ended_fault, fault_status
from batchscope.ui.window.settings import save_config
from batchscope.ui.window.starting import WINDOW_TITLE, StartingView
from batchscope.ui.window.startup_log import note

TICK_HZ = 15
#: In presentation mode an experiment opens the Segments dock only in a window this tall
#: (px): at 800 the dock, the banner and the larger type left the fps plot 55 px of data
PRESENTATION_DOCK_MIN_H = 1000
REPORT_JOB = "report"  # the command-thread label of an HTML report export (then its path)


@dataclass
class TickStats:
    """How often the UI timer fired and how much of the GUI thread it used."""

    ticks: int = 0
    busy_s: float = 0.0
    since: float = field(default_factory=time.perf_counter)

    def record(self, seconds: float) -> None:
        self.ticks += 1
        self.busy_s += seconds

    def reset(self) -> None:
        self.ticks, self.busy_s, self.since = 0, 0.0, time.perf_counter()

    @property
    def rate_hz(self) -> float:
        return self.ticks / max(1e-9, time.perf_counter() - self.since)

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / max(1e-9, time.perf_counter() - self.since)


class MainWindow(QMainWindow):
    #: what a slow start says (a serving engine's: "starting Triton on 127.0.0.1:…"), from
    #: the thread that builds the backend (``Engine.said``)
    progress_said = Signal(str)

    def __init__(
        self,
        engine: Engine,
        look: Look,
        settings: QSettings | None = None,
        devices: list[DeviceChoice] | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle(WINDOW_TITLE)
        self.engine = engine
        self.look = look
        app = QApplication.instance()
        if isinstance(app, QApplication):  # the widgets below take the look's type
            apply_look(app, look)
        self.settings = settings
        self._host_said = False  # the start's host probe said (once)
        self.presenter = Presenter(engine, self)
        engine.on_progress = self.progress_said.emit
        self.progress_said.connect(self._on_progress_said)
        self.tick_stats = TickStats()
        self._start_note: str | None = None
        self._noted: set[tuple[str, str]] = set()  # (spec, note) already said in the status line
        self._buses: dict = {}  # segment index -> its last seconds (Engine.keep_buses)
        self._buses_kept_at = -1.0
        self._first_result_shown = False  # for the start-up log (BATCHSCOPE_STARTUP_LOG)
        self.setAcceptDrops(True)

        self._make_widgets(look, settings, devices)
        self._build_layout()
        self._build_actions()
        self.controls.show_config(engine.config)
        self.sessions.show_count(engine.config.sessions)
        self._connect()

        self.timer = QTimer(self)
        self.timer.setInterval(1000 // TICK_HZ)
        self.timer.timeout.connect(self.tick)

    def _make_widgets(
        self, look: Look, settings: QSettings | None, devices: list[DeviceChoice] | None
    ) -> None:
        """The panels, the plots, the segment table, the Capacity tab, the caption and the
        status line."""
        self.controls = ControlsPanel(devices if devices is not None else device_choices())
        self.sessions = SessionsPanel(look)
        self.sessions.settings = settings  # Add stream…'s recent URLs
        self.sessions.stream_line = lambda: stream_settings_line(self.engine.config)
        self.video = VideoWall(look)
        self.fps_plot = FpsPlot(look)
        self.latency = LatencyHistogram(look)
        self.overwritten = OverwrittenBars(look)
        self.batches = BatchSizeBars(look)
        self.throughput = ThroughputPlot(look)
        self.stages = StageBars(look)
        self.memory = MemoryPlot(look)
        self.bus = BusView(look)
        self.devices = DeviceBars(look)
        self.headline = HeadlineStrip()
        self.segment_table = SegmentTable(look)
        self.capacity = CapacityView(CapacityPresenter(self.presenter), look)
        self.segment_feed: SegmentFeed | None = None  # started with the engine
        self.caption = plain_label()  # an experiment's own text, drawn as it is
        self.caption.setObjectName("caption")
        self.caption.setWordWrap(True)
        self.caption.hide()
        self.status_line = StatusLine(look)
        self.setStatusBar(self.status_line)

    def _connect(self) -> None:
        """The panels' and the presenter's signals to what handles them; the segment table
        judged against the Capacity tab's budget."""
        p = self.presenter
        self.controls.changed.connect(p.change)
        self.sessions.sessions_changed.connect(p.set_sessions)
        self.sessions.add_files.connect(self.add_files)
        self.sessions.add_source.connect(lambda spec: p.add_sources([spec]))
        self.sessions.remove_source.connect(self._remove_source)
        p.status.connect(self._on_status)
        p.config_shown.connect(self._show_config)
        p.caption.connect(self._show_caption)
        p.started.connect(self._on_started)
        p.experiment_changed.connect(self._on_experiment)
        p.step_applied.connect(lambda *_: self._refresh_segments())
        p.commands.finished.connect(self._on_command_done)
        self.headline.scope_changed.connect(self.set_scope)
        for plot in self.time_plots:
            plot.whole_run_toggled.connect(self.set_whole_run)
        self.segment_table.export_requested.connect(self._export_segments)
        # two segments compared are judged against the budget the Capacity tab asks for
        budget = self.capacity.presenter
        self.segment_table.set_budget(budget.p99_ms, budget.min_fps_ratio)
        budget.budget_changed.connect(self.segment_table.set_budget)

    # -- layout -----------------------------------------------------------------------------

    def _build_layout(self) -> None:
        left = QWidget()
        lay = QVBoxLayout(left)
        lay.setContentsMargins(6, 6, 0, 6)
        controls_box = QGroupBox("Controls")
        QVBoxLayout(controls_box).addWidget(self.controls)
        sessions_box = QGroupBox("Sessions")
        QVBoxLayout(sessions_box).addWidget(self.sessions)
        lay.addWidget(controls_box)
        lay.addWidget(sessions_box, 1)

        rows = self._build_plot_rows()

        self.dashboard = QWidget()
        dlay = QVBoxLayout(self.dashboard)
        dlay.setContentsMargins(4, 6, 6, 6)
        dlay.addWidget(self.caption)
        dlay.addWidget(self.headline)
        dlay.addWidget(rows, 1)
        # the starting view until the engine runs, then the dashboard (``_on_started``)
        self.starting = StartingView()
        self.pages = QStackedWidget()
        self.pages.addWidget(self.starting)
        self.pages.addWidget(self.dashboard)

        # the panel scrolls in a short window (1280×800 with the Segments dock open) rather
        # than set the window's height; it keeps its width
        self.panel = QScrollArea()
        self.panel.setWidget(left)
        self.panel.setWidgetResizable(True)
        self.panel.setFrameShape(QFrame.Shape.NoFrame)
        self.panel.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fit_panel()
        self.split = QSplitter(Qt.Orientation.Horizontal)
        self.split.addWidget(self.panel)
        self.split.addWidget(self.pages)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([400, 1200])
        self._panel_sizes = self.split.sizes()
        # the window before presentation mode: saved as settings keep it, and its rectangle
        self._normal_geometry: QByteArray | None = None
        self.screen_size: tuple[int, int] | None = None  # presentation fills it (--size)
        self._normal_rect = QRect()
        self.setCentralWidget(self.split)

        self._build_segments_dock()

    def _build_plot_rows(self) -> QSplitter:
        """The dashboard's two rows: the video wall beside the top tabs (fps and throughput
        over time, the bus, the devices, the Capacity tab); the latency histogram, the
        overwritten frames and the bottom tabs (batch sizes, stages, memory)."""
        video_card = QFrame()
        video_card.setObjectName("card")
        vlay = QVBoxLayout(video_card)
        vlay.setContentsMargins(6, 6, 6, 6)
        vlay.addWidget(self.video)
        # over time and the wide views in the top right; the bottom right's third of the
        # width holds only tabs whose names fit it at 1280 px (the fit check)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.batches, "Batch sizes")
        self.tabs.addTab(self.stages, "Stages")
        self.tabs.addTab(self.memory, "Memory")

        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(video_card)
        self.top_tabs = QTabWidget()
        self.top_tabs.addTab(self.fps_plot, "Frames per second")
        self.top_tabs.addTab(self.throughput, "Throughput")
        self.top_tabs.addTab(self.bus, "Bus")
        self.top_tabs.addTab(self.devices, "Devices")
        # the capacity view scrolls in a short pane rather than set the window's height
        capacity_pane = QScrollArea()
        capacity_pane.setWidget(self.capacity)
        capacity_pane.setWidgetResizable(True)
        capacity_pane.setFrameShape(QFrame.Shape.NoFrame)
        self.top_tabs.addTab(capacity_pane, "Capacity")
        top.addWidget(self.top_tabs)
        for tabs in (self.tabs, self.top_tabs):  # every tab name whole: the pane keeps room
            tabs.setUsesScrollButtons(False)
        top.setSizes([560, 640])
        bottom = QSplitter(Qt.Orientation.Horizontal)
        for w in (self.latency, self.overwritten, self.tabs):
            bottom.addWidget(w)
        bottom.setSizes([400, 400, 400])
        rows = QSplitter(Qt.Orientation.Vertical)
        rows.addWidget(top)
        rows.addWidget(bottom)
        rows.setSizes([520, 440])
        return rows

    def _build_segments_dock(self) -> None:
        """The Segments dock under the dashboard, hidden until an experiment or View ›
        Segments shows it."""
        self.segments_dock = QDockWidget("Segments", self)
        self.segments_dock.setObjectName("segments")
        self.segments_dock.setWidget(self.segment_table)
        self.segments_dock.setFont(QApplication.font())  # its title bar, too, in the look's
        self.segments_dock.setAllowedAreas(
            Qt.DockWidgetArea.BottomDockWidgetArea | Qt.DockWidgetArea.TopDockWidgetArea
        )
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.segments_dock)
        self.segments_dock.hide()  # shown by an experiment, or View → Segments

    def _build_actions(self) -> None:
        self.toolbar = bar = QToolBar("Run")  # hidden in presentation mode: the menus have all
        bar.setMovable(False)
        self.addToolBar(bar)
        self.pause_action = QAction("Pause", self, checkable=True)
        self.pause_action.setShortcut(QKeySequence(Qt.Key.Key_Space))
        self.pause_action.toggled.connect(self._on_pause)
        reset = QAction("Reset statistics", self)
        reset.triggered.connect(self.presenter.reset_stats)
        export_plots = QAction("Export plots (PNG)…", self)
        export_plots.triggered.connect(self._export_plots)
        export_numbers = QAction("Export numbers (JSON)…", self)
        export_numbers.triggered.connect(self._export_numbers)
        self.export_report_action = QAction("Export report…", self)
        self.export_report_action.setToolTip(
            "One self-contained HTML file: the segment table with the simulator's predictions, "
            "plots, config, device, events and the experiment file"
        )
        self.export_report_action.triggered.connect(self._export_html_report)
        self.record_action = QAction("Record…", self, checkable=True)
        self.record_action.setToolTip(
            "Record config, events, per-window timings and the timeline to a new folder "
            "(written every second)"
        )
        self.record_action.triggered.connect(self._toggle_recording)
        self.presentation_action = QAction("Presentation mode", self, checkable=True)
        self.presentation_action.setShortcut(QKeySequence(Qt.Key.Key_F11))
        self.presentation_action.toggled.connect(self.set_presentation)
        self.segments_action = self.segments_dock.toggleViewAction()
        self.segments_action.setText("Segments")
        # shown at its height, as show_segments does (the toggle alone left it at whatever
        # the layout gave it: at first, hardly more than its title bar)
        self.segments_action.triggered.connect(lambda on: on and self._size_segments_dock())
        self.segments_action.setToolTip(
            "The segment table: one row per setting, with the simulator's prediction"
        )
        for a in (self.pause_action, reset, self.record_action, export_plots, export_numbers):
            bar.addAction(a)
        bar.addAction(self.segments_action)

        menu = self.menuBar()
        self._build_file_menu(menu, export_plots, export_numbers)
        run_menu = menu.addMenu("&Run")
        run_menu.addAction(self.pause_action)
        run_menu.addAction(reset)
        run_menu.addAction(self.record_action)
        self._build_experiments_menu(menu)
        self.faults_menu = add_faults_menu(menu, self.presenter, self)
        self._build_view_menu(menu)

    def _build_file_menu(
        self, menu: QMenuBar, export_plots: QAction, export_numbers: QAction
    ) -> None:
        """File: add sources, choose the weights, open an experiment or a setting, export,
        quit."""
        file_menu = menu.addMenu("&File")
        add = file_menu.addAction("Add video files…")
        add.triggered.connect(self.sessions._choose_files)
        stream = file_menu.addAction("Add network stream…")
        stream.setShortcut("Ctrl+Shift+N")
        stream.triggered.connect(self.sessions.ask_stream)
        file_menu.addAction("Load BlurBall checkpoint…").triggered.connect(self._load_checkpoint)
        file_menu.addAction("Use the demo weights").triggered.connect(
            lambda: self.presenter.load_checkpoint(None)
        )
        file_menu.addAction("Use untrained weights (timing only)").triggered.connect(
            lambda: self.presenter.load_checkpoint(UNTRAINED)
        )
        file_menu.addSeparator()
        open_experiment = file_menu.addAction("Open experiment…")
        open_experiment.setShortcut(QKeySequence.StandardKey.Open)
        open_experiment.triggered.connect(self._open_experiment)
        file_menu.addAction("Open settings…").triggered.connect(self.capacity.choose_setting_file)
        file_menu.addSeparator()
        file_menu.addAction(self.export_report_action)
        file_menu.addAction(export_plots)
        file_menu.addAction(export_numbers)
        file_menu.addAction("Export setting…").triggered.connect(self.capacity.choose_export_folder)
        file_menu.addSeparator()
        quit_action = file_menu.addAction("Quit")
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)

    def _build_experiments_menu(self, menu: QMenuBar) -> None:
        """Experiments: every experiment file found (one that cannot be read greyed, its
        tip says why), open one from a file, stop the one playing."""
        self.experiments_menu = menu.addMenu("&Experiments")
        self.experiments_menu.setToolTipsVisible(True)
        for entry in menu_entries():
            action = self.experiments_menu.addAction(menu_text(entry.text))
            action.setToolTip(plain_tip(entry.tip))
            if entry.experiment is None:
                action.setEnabled(False)
            else:
                action.triggered.connect(
                    lambda _=False, e=entry.experiment: self.play_experiment(e)
                )
        self.experiments_menu.addSeparator()
        self.experiments_menu.addAction("Open experiment…").triggered.connect(self._open_experiment)
        self.stop_experiment_action = self.experiments_menu.addAction("Stop experiment")
        self.stop_experiment_action.setEnabled(False)
        self.stop_experiment_action.triggered.connect(self.presenter.stop_experiment)

    def _build_view_menu(self, menu: QMenuBar) -> None:
        """View: the theme, the Segments dock, presentation mode, the time plots' span and
        the metrics endpoint."""
        view = menu.addMenu("&View")
        group = QActionGroup(self)
        self.theme_actions = {}
        for name in ("dark", "light"):
            action = view.addAction(f"{name.title()} theme")
            action.setCheckable(True)
            action.setChecked(self.look.theme.name == name)
            action.triggered.connect(lambda _=False, n=name: self.set_look(self.look.with_theme(n)))
            group.addAction(action)
            self.theme_actions[name] = action
        view.addSeparator()
        view.addAction(self.segments_action)
        view.addAction(self.presentation_action)
        self.whole_run_action = view.addAction("Time plots: whole run")
        self.whole_run_action.setCheckable(True)
        self.whole_run_action.setShortcut(QKeySequence("Ctrl+H"))
        self.whole_run_action.setToolTip(
            "The time plots show the whole run, its segments marked (else its last 60 s)"
        )
        self.whole_run_action.toggled.connect(self.set_whole_run)
        view.addSeparator()
        self.metrics_action = view.addAction("Serve metrics…")
        self.metrics_action.setCheckable(True)
        self.metrics_action.setToolTip(
            "Serve the run's figures as a Prometheus endpoint on 127.0.0.1 (latency and "
            "batch-size histograms, fps, overwritten, expired, device busy)"
        )
        self.metrics_action.triggered.connect(self._toggle_metrics)

    # -- running ------------------------------------------------------------------------------

    def start(self, experiment: Experiment | None = None, note: str | None = None) -> None:
        """Start the engine in the background; the timer starts once it runs.

        With ``experiment`` (the engine on its first config) it plays once running.
        ``note`` (e.g. that no CUDA GPU was found) replaces the status message once running.
        """
        self._start_note = note
        if experiment is not None:
            self._segments_for_experiment()
        self.starting.say(self._starting_line())
        self.presenter.start_engine(experiment)

    def _starting_line(self) -> str:
        config = self.engine.config
        names = [Path(s).name for s in config.sources]
        sources = (
            f"{len(names)} source{'s' if len(names) != 1 else ''} ({', '.join(names)})"
            if names
            else "the sample videos"
        )
        return f"Opening {sources}\nand building the backend ({config.device_label})…"

    def _on_progress_said(self, message: str) -> None:
        """A slow start's step: on the starting view, or in the status line once running
        (a device change that builds a new deployment)."""
        if self.pages.currentWidget() is self.starting:
            self.starting.say(f"{self._starting_line()}\n{message}")
        else:
            self.status_line.show_message(message, "busy")

    def play_experiment(self, experiment: Experiment) -> None:
        self.presenter.play_experiment(experiment)

    def set_scope(self, scope: str) -> None:
        """What the live views cover ("segment", "60s" or "run"); redrawn at once."""
        self.presenter.set_scope(scope)
        if self.headline.scope.currentData() != scope:
            self.headline.scope.setCurrentIndex(self.headline.scope.findData(scope))
        if self.timer.isActive():
            self.tick()

    @property
    def time_plots(self) -> tuple[FpsPlot, ThroughputPlot, MemoryPlot]:
        return (self.fps_plot, self.throughput, self.memory)

    def set_whole_run(self, whole: bool) -> None:
        """The time plots show the whole run (its segments marked) or its last 60 s, live;
        every plot's "Whole run" and View's item say which. Redrawn at once."""
        self.presenter.set_whole_run(whole)
        for plot in self.time_plots:
            plot.show_whole_run(whole)
        if self.whole_run_action.isChecked() != whole:
            self.whole_run_action.blockSignals(True)
            self.whole_run_action.setChecked(whole)
            self.whole_run_action.blockSignals(False)
        if self.timer.isActive():
            self.tick()

    def add_files(self, paths: list[str]) -> None:
        """Add video files as sources (the file dialog and drag-and-drop both come here)."""
        self.presenter.add_sources([str(p) for p in paths])

    def _on_started(self, error: str | None) -> None:
        if error is not None:
            self.starting.say(f"Could not start: {error}", "error")
        else:
            self.pages.setCurrentWidget(self.dashboard)
            self.tick_stats.reset()
            self.timer.start()
            if self.segment_feed is None:
                self.segment_feed = SegmentFeed(self.engine)
                self.segment_feed.updated.connect(self.segment_table.update_from)
            if self._start_note:
                self.status_line.show_message(self._start_note, "info")

    def tick(self) -> None:
        t0 = time.perf_counter()
        snap = self.presenter.snapshot()
        events = self.presenter.drain_events()
        for plot in self.time_plots:
            plot.add_events(events)
        self._say_host_probe()
        for ev in events:
            if ev.kind in ("error", "oom"):
                self.status_line.show_message(f"{ev.kind}: {ev.message}", "error")
            elif ev.kind == "fault" and (ended := ended_fault(ev.message)) is not None:
                self.status_line.clear_message(fault_status(ended))
        if snap is not None and snap.fresh:  # paused: drawn once, then left as it is
            self._show(snap)
            self.segment_table.keep(snap)
            if snap.t - self._buses_kept_at >= 1.0:  # each segment's last seconds, for reports
                self.engine.keep_buses(self._buses, snap)
                self._buses_kept_at = snap.t
        self.tick_stats.record(time.perf_counter() - t0)

    def _show(self, snap: Snapshot) -> None:
        sizes = {
            s.source.name: s.source.placement for s in self.engine.sources if s.source is not None
        }
        self.sessions.update_sessions(snap.sessions, self.engine.sources)
        rates = [s.source.fps for s in self.engine.sources if s.source is not None]
        config = snap.config
        self.controls.show_drop_warning(drop_after_warning(config.drop_after_ms, config.fps, rates))
        self._say_notes()
        self.video.update_from(snap, sizes)
        self.headline.update_from(snap)
        self.status_line.update_from(snap)
        history = self.presenter.history  # since the plots' start: an experiment's, or 0
        if self.presenter.whole_run:
            window = whole_window(history, snap.t)
        else:
            window = time_window(snap.timeline, snap.t, since=history.origin)
        segments = history.segment_starts()
        for card in self.time_plots:
            if card.isVisible():
                card.set_segments(segments)
                card.update_from(snap, window)
        if self.bus.isVisible():
            self.bus.update_from(snap)
        cards = (self.latency, self.overwritten, self.batches, self.stages, self.devices)
        for card in (*cards, self.capacity):
            if card.isVisible():
                card.update_from(snap)
        if self.pause_action.isChecked() != snap.paused:
            self.pause_action.blockSignals(True)
            self.pause_action.setChecked(snap.paused)
            self.pause_action.setText("Resume" if snap.paused else "Pause")
            self.pause_action.blockSignals(False)
        if not self._first_result_shown and any(s.delivered for s in snap.sessions):
            self._first_result_shown = True
            note("first_result")

    # -- reactions ------------------------------------------------------------------------------

    def _say_host_probe(self) -> None:
        """Once the start's timer probe has its answer: the status bar's host part shows it
        until the run's own windows measure the host (its tooltip keeps the probe's words;
        the message line stays the user's actions' and faults')."""
        probe = self.engine.host_probe
        if self._host_said or probe is None or probe.result is None:
            return
        self._host_said = True
        self.status_line.show_probe(probe.result, probe_phrase(probe.result))

    def _say_notes(self) -> None:
        """Say each source's note ("long file: looping…") once in the status line, as it opens;
        the session rows keep it as a marker."""
        for slot in self.engine.sources:
            note = getattr(slot.source, "note", "") if slot.source is not None else ""
            if note and (slot.spec, note) not in self._noted:
                self._noted.add((slot.spec, note))
                self.status_line.show_message(f"{slot.source.name}: {note}", "info")

    def _on_status(self, message: str, level: str) -> None:
        self.status_line.show_message(message, level)
        if level == "error" and message.startswith("Not applied"):
            self.controls.show_error(message)

    def _show_config(self, config: object) -> None:
        self.controls.show_config(config)
        self.sessions.show_count(config.sessions)

    def _on_experiment(self, name: str) -> None:
        self.stop_experiment_action.setEnabled(bool(name))
        if name:
            self._segments_for_experiment()
        self._refresh_segments()

    def show_tab(self, view: QWidget) -> None:
        """Bring ``view`` (a plot or the capacity view) to the front of its tabs."""
        for tabs in (self.top_tabs, self.tabs):
            for i in range(tabs.count()):
                page = tabs.widget(i)
                if page is view or (isinstance(page, QScrollArea) and page.widget() is view):
                    tabs.setCurrentIndex(i)
                    return
        raise ValueError(f"{type(view).__name__} is not in a tab")

    def _segments_for_experiment(self) -> None:
        """An experiment opens the segment table where the window has room for it beside
        the plots; in presentation mode on a short screen (1280×800: the fps plot kept
        55 px of data) it stays shut, and View › Segments opens it."""
        if self.look.presentation and self.height() < PRESENTATION_DOCK_MIN_H:
            return
        self.show_segments()

    def show_segments(self) -> None:
        """Show the segment table at a height that leaves the plots most of the window."""
        if not self.segments_dock.isVisible():
            self.segments_dock.show()
            self._size_segments_dock()

    def _size_segments_dock(self) -> None:
        height = self.segment_table.dock_height(self.look, self.height())
        self.resizeDocks([self.segments_dock], [height], Qt.Orientation.Vertical)

    def _refresh_segments(self) -> None:
        if self.segment_feed is not None:
            self.segment_feed.refresh()

    def _open_experiment(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open experiment", str(Path.home()), "Experiments (*.toml);;All files (*)"
        )
        if path:
            self.presenter.open_experiment(path)

    def _show_caption(self, text: str) -> None:
        self.caption.setText(text)
        self.caption.setVisible(bool(text))

    def _on_pause(self, paused: bool) -> None:
        self.pause_action.setText("Resume" if paused else "Pause")
        self.presenter.set_paused(paused)

    def _remove_source(self, sid: int) -> None:
        slots = self.engine.sources
        if sid < 0 or not slots:
            self.status_line.show_message("Select a session whose source to remove.", "error")
            return
        self.presenter.remove_source(slots[sid % len(slots)].spec)

    def _load_checkpoint(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Load BlurBall checkpoint",
            str(Path.home()),
            "Checkpoints (*.pt *.pth *.tar);;All files (*)",
        )
        if path:
            self.presenter.load_checkpoint(path)

    def _toggle_recording(self) -> None:
        parent = ""
        if self.engine.recorder is None:
            default = str(recordings_folder(Path.home()))
            parent = QFileDialog.getExistingDirectory(self, "Record into folder", default)
            if not parent:
                self.record_action.setChecked(False)
                return
        self.set_recording(self.presenter.toggle_recording(parent))

    def _toggle_metrics(self) -> None:
        port = None
        if self.presenter.metrics is None:
            port, ok = QInputDialog.getInt(
                self, "Serve metrics", "Port on 127.0.0.1 (0: any free port):", 0, 0, 65535
            )
            if not ok:
                self.metrics_action.setChecked(False)
                return
        self.set_metrics(self.presenter.serve_metrics(port))

    def set_metrics(self, url: str | None) -> None:
        """Reflect the endpoint on the action (checked, and its URL, while serving)."""
        self.metrics_action.setChecked(url is not None)
        self.metrics_action.setText(f"Serving metrics → {url}" if url else "Serve metrics…")

    def set_recording(self, folder: Path | None) -> None:
        """Reflect the recording state on the action (checked and named while recording)."""
        self.record_action.setChecked(folder is not None)
        self.record_action.setText(menu_text(f"Recording → {folder.name}") if folder else "Record…")

    def _export_plots(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export plots", "batchscope-plots.png", "PNG image (*.png)"
        )
        if path:
            self._export(lambda: export_png(self.dashboard, path))

    def _export_numbers(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export numbers", "batchscope-report.json", "JSON report (*.json)"
        )
        if path:
            played = self.presenter.experiments_played()
            self._export(lambda: export_report(self.engine, path, played))

    def _export_html_report(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export report", "batchscope-report.html", "HTML report (*.html)"
        )
        if path:
            self.export_html(path)

    def export_html(self, path: str | Path) -> None:
        """Write the HTML report on the command thread (predictions and plots take seconds).

        The status line says where it went, or the one-line error, when the job is done.
        """
        played = self.presenter.experiments_played()  # each with the segments it played
        engine, target, buses = self.engine, html_path(path), dict(self._buses)

        def job() -> str | None:
            try:
                export_html_report(engine, target, played, buses)
            except ExportError as exc:
                return str(exc)
            return None

        self.status_line.show_message("Writing the report…", "busy")
        self.presenter.commands.submit(f"{REPORT_JOB} {target}", job)

    def _on_command_done(self, label: str, error: str | None) -> None:
        # an error is shown by the presenter, as every job's; the path only here
        if label.startswith(f"{REPORT_JOB} ") and error is None:
            path = label.removeprefix(f"{REPORT_JOB} ")
            self.status_line.show_message(f"Report saved to {path}", "ok")

    def _export_segments(self, kind: str) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self,
            "Export the segment table",
            f"batchscope-segments.{kind}",
            "CSV table (*.csv)" if kind == "csv" else "JSON segments (*.json)",
        )
        if path:
            table = self.segment_table
            self._export(lambda: export_segments(table.segments, path))

    def _export(self, write: object) -> None:
        try:
            out: Path = write()
        except ExportError as exc:
            self.status_line.show_message(str(exc), "error")
        else:
            self.status_line.show_message(f"Saved {out}", "ok")

    # -- look ---------------------------------------------------------------------------------

    def set_look(self, look: Look) -> None:
        self.look = look
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_look(app, look)
        for card in self.findChildren(PlotCard):
            card.set_look(look)
        self.video.set_look(look)
        self.sessions.set_look(look)
        self.segments_dock.setFont(QApplication.font())
        self.segment_table.set_look(look)
        self.status_line.set_look(look)
        self.headline.restyle()
        self.theme_actions[look.theme.name].setChecked(True)

    def _fit_panel(self) -> None:
        """The panel's scroll area as wide as the controls need at the look's type."""
        inner = self.panel.widget()
        inner.layout().activate()
        bar = self.panel.verticalScrollBar().sizeHint().width()
        self.panel.setMinimumWidth(inner.minimumSizeHint().width() + bar)

    def set_presentation(self, on: bool) -> None:
        if on != self.look.presentation:
            self.set_look(self.look.toggled_presentation())
        if on and self._normal_geometry is None:
            self._normal_geometry = self.saveGeometry()
            self._normal_rect = self.geometry()
            # the plots get the whole screen; the panel is one drag of the splitter away, and
            # its width (at the larger type) must not push the window past the screen
            self._panel_sizes = self.split.sizes()
            # both ways: collapsed, its height (the controls at the larger type, 721 px)
            # must not set the window's minimum either (the Segments dock then overflowed
            # a 1600x1000 screen by 38 px)
            self.panel.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
            self.panel.setMinimumWidth(0)  # nor its width (_restore_rect gives it back)
            self.toolbar.hide()  # its height is a plot's on a 1280×800 projector
            self.split.setSizes([0, sum(self._panel_sizes)])
            if self.screen_size is not None:  # --size: that "screen", in a window
                self.setGeometry(QRect(0, 0, *self.screen_size))
                self.show()
            else:
                screen = self.screen() or QApplication.primaryScreen()
                self.setGeometry(screen.availableGeometry())
                self.showFullScreen()
        elif not on and self._normal_geometry is not None:
            self.panel.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
            self.toolbar.show()
            self.showNormal()
            self._normal_geometry = None
            self.split.setSizes(self._panel_sizes)
            # once the smaller type is laid out: before, the old minimum size would widen it
            QTimer.singleShot(0, lambda r=self._normal_rect: self._restore_rect(r))
        if self.segments_dock.isVisible():
            self._size_segments_dock()
        if self.presentation_action.isChecked() != on:
            self.presentation_action.setChecked(on)

    def _restore_rect(self, rect: QRect) -> None:
        self._fit_panel()  # the panel's width at the smaller type
        self.layout().activate()  # the minimum size of the smaller type, not the larger
        self.setGeometry(rect)

    # -- drag and drop, close -------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        urls = event.mimeData().urls()
        if urls and all(u.isLocalFile() for u in urls):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        self.add_files([u.toLocalFile() for u in event.mimeData().urls()])
        event.acceptProposedAction()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.timer.stop()
        if self.segment_feed is not None:
            self.segment_feed.stop()
        if self.settings is not None:
            # the normal window is remembered, never the presentation one
            geometry = self._normal_geometry or self.saveGeometry()
            self.settings.setValue("geometry", geometry)
            self.settings.setValue("theme", self.look.theme.name)
            save_config(self.settings, self.engine.config)
        self.capacity.presenter.shutdown()
        self.presenter.shutdown()
        event.accept()
