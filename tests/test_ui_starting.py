"""Start-up (issue 16): the window paints a starting state at once, before anything heavy
loads, shows it until the engine runs, then the plots; the start-up log's milestones."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from batchscope.config import RunConfig
from batchscope.device.checks import gpu_driver_found
from batchscope.engine.engine import Engine
from batchscope.ui.controls.device_options import device_choices
from batchscope.ui.theme import Look, apply_look
from batchscope.ui.window import startup_log
from batchscope.ui.window.main_window import MainWindow

APP = Path(__file__).resolve().parents[1] / "app"
#: What takes a second or more to import: none of it may load before the starting window.
HEAVY = ("pyqtgraph", "superqt", "torch", "onnxruntime", "batchscope.ui.window.main_window")


def emulated(source: Path, **changes) -> RunConfig:
    base = {
        "sources": (str(source),),
        "sessions": 2,
        "policy": "all",
        "backend": "emulated",
        "profile": "laptop-8gb",
        "precision": "fp16",
        "resolution": (256, 144),
        "skip_bad_sources": True,
    }
    return RunConfig(**{**base, **changes})


def gated(engine: Engine) -> threading.Event:
    """Hold ``engine.open`` (on the command thread) until the returned event is set."""
    gate = threading.Event()
    open_engine = engine.open

    def slow_open() -> None:
        gate.wait(30)
        open_engine()

    engine.open = slow_open
    return gate


def python(code: str, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env={
            **os.environ,
            "QT_QPA_PLATFORM": "offscreen",
            "XDG_CONFIG_HOME": str(tmp_path),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(APP), os.environ.get("PYTHONPATH")])),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_the_window_shows_what_is_starting_until_the_engine_runs_then_the_plots(
    qtbot, tiny_video: Path, ui_settings
):
    look = Look()
    apply_look(QApplication.instance(), look)  # as the app does: the theme's palette
    engine = Engine(emulated(tiny_video))
    gate = gated(engine)
    window = MainWindow(engine, look, ui_settings, devices=device_choices(gpus=[]))
    qtbot.addWidget(window)
    window.resize(1280, 800)
    window.show()
    window.start()
    try:
        starting = window.starting
        qtbot.waitUntil(lambda: starting.was_painted, timeout=5000)
        assert window.pages.currentWidget() is starting and not window.dashboard.isVisible()
        assert starting.title.text() == "Starting BatchScope…"
        assert starting.detail.text() == (
            "Opening 1 source (tiny.mp4)\nand building the backend (emulated:laptop-8gb)…"
        )
        # the theme's window colour with the text on it, not a black window
        image = window.grab().toImage()
        corner = starting.mapTo(window, starting.rect().topLeft())
        assert image.pixelColor(corner.x() + 4, corner.y() + 4) == QColor(look.theme.window)
        title = starting.title.mapTo(window, starting.title.rect().center())
        row = [image.pixelColor(x, title.y()) for x in range(corner.x(), image.width())]
        assert any(c.lightness() > 150 for c in row)  # the title's light text

        gate.set()
        qtbot.waitUntil(lambda: window.pages.currentWidget() is window.dashboard, timeout=15_000)
        assert engine.running and window.timer.isActive() and window.dashboard.isVisible()
        qtbot.waitUntil(lambda: any(len(c.xData) > 1 for c in window.fps_plot.curves.values()))
    finally:
        gate.set()
        window.close()
    assert engine.threads_alive() == []


def test_what_a_slow_start_says_is_shown_while_it_starts_then_in_the_status_line(
    qtbot, tiny_video: Path, ui_settings
):
    """A serving engine's start says its steps (Engine.said, from the thread that builds the
    backend): the starting view shows each under what is opening; once running, a later
    one (a new deployment) goes to the status line."""
    engine = Engine(emulated(tiny_video))
    gate = gated(engine)
    window = MainWindow(engine, Look(), ui_settings, devices=device_choices(gpus=[]))
    qtbot.addWidget(window)
    window.show()
    window.start()
    try:
        said = threading.Thread(target=engine.said, args=("starting Triton on 127.0.0.1:1…",))
        said.start()
        said.join()
        detail = window.starting.detail
        qtbot.waitUntil(lambda: detail.text().endswith("starting Triton on 127.0.0.1:1…"))
        assert detail.text().startswith("Opening 1 source (tiny.mp4)")
        gate.set()
        qtbot.waitUntil(lambda: window.pages.currentWidget() is window.dashboard, timeout=15_000)
        engine.said("deploying BatchScope's replica on Ray Serve…")
        qtbot.waitUntil(lambda: "deploying" in window.status_line.message.text(), timeout=5_000)
    finally:
        gate.set()
        window.close()


def test_a_start_failure_is_said_where_the_plots_would_be(qtbot, tiny_video, ui_settings):
    # the server profile has no fp32 curve: the backend cannot be built
    engine = Engine(emulated(tiny_video, profile="server-24gb", precision="fp32"))
    window = MainWindow(engine, Look(), ui_settings, devices=device_choices(gpus=[]))
    qtbot.addWidget(window)
    window.show()
    errors = []
    window.presenter.started.connect(errors.append)
    window.start()
    qtbot.waitUntil(lambda: bool(errors), timeout=10_000)
    assert window.pages.currentWidget() is window.starting
    detail = window.starting.detail
    assert detail.text().startswith("Could not start: ") and "no curve for fp32" in detail.text()
    assert detail.property("level") == "error"
    window.close()
    assert engine.threads_alive() == []


def test_nothing_heavy_is_imported_before_the_starting_window(tmp_path: Path):
    code = (
        "import sys, batchscope.cli, batchscope.ui.window.app, batchscope.ui.window.starting;"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    proc = python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == []


@pytest.mark.skipif(gpu_driver_found(), reason="a GPU driver is installed: torch is asked")
def test_without_a_gpu_driver_the_device_list_and_the_demo_need_no_torch(tmp_path: Path):
    code = (
        "import sys; from batchscope.ui.window.app import cuda_available;"
        "from batchscope.ui.controls.device_options import device_choices;"
        "keys = [c.key for c in device_choices()];"
        "print(cuda_available(), 'cpu' in keys, 'cuda:0' in keys, 'torch' in sys.modules)"
    )
    proc = python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True", "False", "False"]


def test_no_gpu_driver_means_torch_sees_no_cuda():
    import torch

    if not gpu_driver_found():
        assert not torch.cuda.is_available()
    if torch.cuda.is_available():
        assert gpu_driver_found()


def test_the_startup_log_writes_each_milestone_once(tmp_path: Path, monkeypatch):
    log = tmp_path / "startup.log"
    monkeypatch.setattr(startup_log, "_noted", set())
    monkeypatch.delenv(startup_log.ENV, raising=False)
    startup_log.note("window_painted")  # no variable: nothing written
    assert not log.exists()
    monkeypatch.setenv(startup_log.ENV, str(log))
    for milestone in ("window_painted", "window_painted", "first_result"):
        startup_log.note(milestone)
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [name for name, _ in lines] == list(startup_log.MILESTONES)
    started, painted, result = (float(stamp) for _, stamp in lines)
    assert started <= painted <= result


def test_the_app_logs_its_start_up_milestones_in_order(tmp_path: Path, tiny_video: Path):
    log = tmp_path / "startup.log"
    code = "import sys; from batchscope.cli import main; sys.exit(main(sys.argv[1:]))"
    shot = str(tmp_path / "shot.png")
    args = ("gui", str(tiny_video), "--screenshot", shot, "--after", "1.5")
    proc = python(code, tmp_path, *args, BATCHSCOPE_STARTUP_LOG=str(log))
    assert proc.returncode == 0, proc.stderr
    marks = dict(line.split() for line in log.read_text().splitlines())
    assert list(marks) == list(startup_log.MILESTONES)
    started, painted, result = (float(marks[m]) for m in startup_log.MILESTONES)
    assert started <= painted <= result
