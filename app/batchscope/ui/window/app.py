"""`batchscope gui`: the desktop app.

Starts on the last-used settings or the demo default. The window paints at once
(issue 16: it stayed black for about 3 s): with only Qt loaded, the QApplication
shows a starting window (``StartingView`` on the theme's palette: "Starting the
demo…"), and only once that has painted are pyqtgraph and the dashboard imported and
built (torch only where a GPU driver is installed: ``cuda_available``). The main
window then takes the starting window's place and shows what is starting where the
plots will be, while the UI command thread opens the sources and builds the backend;
it switches to the plots once the engine runs. ``--screenshot PNG --after S``
runs the real app, grabs the window S seconds after the engine started,
saves it and exits (0, or 2 with one line if the PNG cannot be written);
``--experiment NAME|PATH`` starts on the experiment's first config and plays
it (a bad file: one line naming it, exit 2, no window);
screenshot runs ignore and keep the saved settings so images are
reproducible. ``--light`` and ``--presentation`` (or ``BATCHSCOPE_THEME=light``
and ``BATCHSCOPE_PRESENTATION=1``) choose the look over the saved theme.
Before the QApplication, :func:`~batchscope.ui.window.qt_platform.prepare_qt_platform`
undoes opencv-python's Qt plugin redirect and, where xcb lacks system
libraries, the app prints one line naming them and exits 2 with no window; without a
display (:func:`~batchscope.ui.window.qt_platform.display_problem`: no ``DISPLAY`` or
``WAYLAND_DISPLAY``) it says so in one line and exits 2, and a screenshot run draws
offscreen.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from PySide6.QtCore import QEventLoop, QSettings, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QWidget

from batchscope.config import ConfigError
from batchscope.device.checks import gpu_driver_found
from batchscope.engine.engine import Engine
from batchscope.engine.player import first_config
from batchscope.experiment import Experiment, ExperimentError, load_experiment
from batchscope.paths import assets_dir
from batchscope.ui.experiments_menu import on_sources
from batchscope.ui.theme import Look, apply_palette, look_from_name
from batchscope.ui.window.qt_platform import display_problem, prepare_qt_platform
from batchscope.ui.window.settings import initial_config, on_engine
from batchscope.ui.window.starting import WINDOW_TITLE, StartingView
from batchscope.ui.window.startup_log import note as note_startup

if TYPE_CHECKING:
    from batchscope.ui.window.main_window import MainWindow

SCREENSHOT_SIZE = (1600, 1000)
START_TIMEOUT_S = 120.0  # a screenshot run gives up if the engine has not started by then
PAINT_WAIT_S = 0.5  # the longest wait for the starting window's paint (a hidden one has none)


def cuda_available() -> bool:
    """``torch.cuda.is_available()``, without importing torch (≈ 1 s) where no GPU driver
    is installed: there the answer is no."""
    if not gpu_driver_found():
        return False
    import torch

    return torch.cuda.is_available()


def run_gui(args: argparse.Namespace) -> int:
    experiment = None
    wanted = getattr(args, "experiment", None)
    if wanted:
        try:
            experiment = load_experiment(wanted)
        except ExperimentError as exc:
            print(f"batchscope: error: {exc}", file=sys.stderr)
            return 2
    screenshot = getattr(args, "screenshot", None)
    app = QApplication.instance()
    if app is None:
        problem = display_problem(bool(screenshot)) or prepare_qt_platform()
        if problem:
            print(f"batchscope: error: {problem}", file=sys.stderr)
            return 2
        app = QApplication(sys.argv[:1])
    app.setOrganizationName("BatchScope")
    app.setApplicationName("BatchScope")
    app.setDesktopFileName("batchscope")  # matches packaging/batchscope.desktop
    icon = assets_dir() / "icon.png"
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
    settings = None if screenshot else QSettings("BatchScope", "BatchScope")
    look = initial_look(args, settings)
    apply_palette(app, look)
    starting = StartingView(starting_title(args, settings, experiment))
    starting.setWindowTitle(WINDOW_TITLE)
    starting.say("Loading the dashboard…")
    starting.painted.connect(lambda: note_startup("window_painted"))
    show_painted(starting, settings, look, getattr(args, "size", None))
    if not starting.isVisible():  # closed before there was anything else to show
        return 0

    # pyqtgraph, the dashboard's widgets, and torch where a GPU driver is installed:
    # imported only now that the starting window is on screen
    from batchscope.ui.window.main_window import MainWindow

    config, note = initial_config(settings, args.sources, cuda_available())
    config = config.with_changes(**getattr(args, "stream", {}))  # --stream-* flags
    try:  # --backend ray|triton: a real serving engine forms the batches
        config, note = on_engine(
            config, note, getattr(args, "backend", None), getattr(args, "ray_address", None)
        )
    except ConfigError as exc:
        starting.close()
        print(f"batchscope: error: --backend {args.backend}: {exc}", file=sys.stderr)
        return 2
    if experiment is not None:  # start on its first step rather than switching right away
        experiment = on_sources(experiment, config.sources)
        config = first_config(experiment)
    window = MainWindow(Engine(config), look, settings)  # applies the look to the app
    window.starting.set_title(starting.title.text())
    size = getattr(args, "size", None)
    window.screen_size = size  # presentation mode fills this, not the screen
    place(window, settings, size)
    if look.presentation:
        window.set_presentation(True)
    else:
        window.show()
    starting.close()
    result = {"code": 0}
    if screenshot:
        _arm_screenshot(window, screenshot, args.after, result)
    window.start(experiment, None if experiment is not None else note)
    app.exec()
    return result["code"]


def starting_title(
    args: argparse.Namespace, settings: QSettings | None, experiment: Experiment | None
) -> str:
    """What the starting window says it starts: the demo the first time (no sources given
    and no saved settings), an experiment by name, else BatchScope."""
    if experiment is not None:
        return f"Starting the experiment {experiment.name}…"
    if not args.sources and (settings is None or not settings.contains("controls")):
        return "Starting the demo…"
    return "Starting BatchScope…"


def place(window: QWidget, settings: QSettings | None, size: tuple[int, int] | None = None) -> None:
    """``size`` (``--size``), else the saved geometry (the main window's, remembered on
    close), else the default size."""
    if size is not None:
        window.resize(*size)
    elif settings is not None and settings.value("geometry") is not None:
        window.restoreGeometry(settings.value("geometry"))
    else:
        window.resize(*SCREENSHOT_SIZE)


def show_painted(
    window: StartingView,
    settings: QSettings | None,
    look: Look,
    size: tuple[int, int] | None = None,
) -> None:
    """Show ``window`` where the main window will be, and return once it has painted (at
    most ``PAINT_WAIT_S`` later: a window shown minimised never paints)."""
    place(window, settings, size)
    if look.presentation and size is None:
        window.showFullScreen()
    else:
        window.show()
    if window.was_painted:
        return
    loop = QEventLoop()
    window.painted.connect(loop.quit)
    QTimer.singleShot(int(PAINT_WAIT_S * 1000), loop.quit)
    loop.exec()


def initial_look(
    args: argparse.Namespace, settings: QSettings | None, environ: Mapping[str, str] = os.environ
) -> Look:
    """The look to open in: ``--light``, else ``BATCHSCOPE_THEME``, else the saved theme;
    presentation mode with ``--presentation`` or ``BATCHSCOPE_PRESENTATION=1``."""
    theme = (
        ("light" if getattr(args, "light", False) else None)
        or environ.get("BATCHSCOPE_THEME")
        or (str(settings.value("theme", "dark")) if settings is not None else "dark")
    )
    presentation = getattr(args, "presentation", False) or (
        environ.get("BATCHSCOPE_PRESENTATION") == "1"
    )
    return look_from_name(theme, presentation)


def _arm_screenshot(window: MainWindow, path: str, after_s: float, result: dict) -> None:
    """Grab ``after_s`` seconds after the engine starts (or fails to), save, close."""

    def grab() -> None:
        if not window.grab().save(path, "PNG"):
            print(f"batchscope: error: {path}: cannot write the screenshot", file=sys.stderr)
            result["code"] = 2
        window.close()
        QApplication.instance().quit()

    fired = {"armed": False}

    def arm(_error: object) -> None:
        if not fired["armed"]:
            fired["armed"] = True
            QTimer.singleShot(int(max(0.0, after_s) * 1000), grab)

    window.presenter.started.connect(arm)
    QTimer.singleShot(int(START_TIMEOUT_S * 1000), lambda: arm(None))
