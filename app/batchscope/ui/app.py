"""`batchscope gui`: the desktop app.

Starts on the last-used settings or the demo default, shows the window at
once and opens the sources in the background. ``--screenshot PNG --after S``
runs the real app, grabs the window S seconds after the engine started,
saves it and exits (0, or 2 with one line if the PNG cannot be written);
``--experiment NAME|PATH`` starts on the experiment's first config and plays
it (a bad file: one line naming it, exit 2, no window);
screenshot runs ignore and keep the saved settings so images are
reproducible. ``--light`` and ``--presentation`` (or ``BATCHSCOPE_THEME=light``
and ``BATCHSCOPE_PRESENTATION=1``) choose the look over the saved theme.
Before the QApplication, :func:`~batchscope.ui.qt_platform.prepare_qt_platform`
undoes opencv-python's Qt plugin redirect and, where xcb lacks system
libraries, the app prints one line naming them and exits 2 with no window.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from batchscope.engine.engine import Engine
from batchscope.engine.player import first_config
from batchscope.experiment import ExperimentError, load_experiment
from batchscope.paths import assets_dir
from batchscope.ui.experiments import on_sources
from batchscope.ui.main_window import MainWindow
from batchscope.ui.qt_platform import prepare_qt_platform
from batchscope.ui.settings import initial_config
from batchscope.ui.theme import Look, apply_look, look_from_name

SCREENSHOT_SIZE = (1600, 1000)
START_TIMEOUT_S = 120.0  # a screenshot run gives up if the engine has not started by then


def cuda_available() -> bool:
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
        problem = prepare_qt_platform()
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

    config, note = initial_config(settings, args.sources, cuda_available())
    if experiment is not None:  # start on its first step rather than switching right away
        experiment = on_sources(experiment, config.sources)
        config = first_config(experiment)
    look = initial_look(args, settings)
    apply_look(app, look)
    window = MainWindow(Engine(config), look, settings)
    if settings is not None and settings.value("geometry") is not None:
        window.restoreGeometry(settings.value("geometry"))
    else:
        window.resize(*SCREENSHOT_SIZE)
    if look.presentation:
        window.set_presentation(True)
    else:
        window.show()
    result = {"code": 0}
    if screenshot:
        _arm_screenshot(window, screenshot, args.after, result)
    window.start(experiment, None if experiment is not None else note)
    app.exec()
    return result["code"]


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
