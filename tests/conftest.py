"""Shared test set-up: Qt runs offscreen, and the UI tests get small, fast engines."""

from __future__ import annotations

import os
from pathlib import Path

# offscreen, on a 1600x1000 screen (the laptop of the layout issue) rather than the
# plugin's 800x800, smaller than any screen the window supports: there, presentation
# mode's full screen could not hold the window's minimum width and Qt left full screen
if os.environ.get("QT_QPA_PLATFORM", "offscreen") == "offscreen":
    SCREEN_CONFIG = Path(__file__).resolve().parent / "offscreen_screen.json"
    os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={SCREEN_CONFIG}"

import pytest

#: The tiers (README): ``pytest`` alone runs the fast one, every test not marked ``slow``;
#: ``pytest --all`` (``./batchscope.sh test --all``, what ``.ci/run`` calls) runs them all.
#: An explicit ``-m`` chooses for itself.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all",
        action="store_true",
        help="run every test, the slow tier too (real engines on wall-clock threads, Ray, "
        "Triton, the real model, the window's fit at every size, mypy): what CI runs",
    )


#: Whole files in the slow tier: nearly every test in them starts a real engine on
#: wall-clock threads, runs the real model, or opens the app in a subprocess (seconds each
#: on 2 cores; timed with ``--durations=0``). Tests elsewhere join it with ``@pytest.mark.slow``.
SLOW_FILES = frozenset(
    {
        "test_accuracy.py", "test_blurball.py", "test_cli.py", "test_cli_display.py",
        "test_cli_experiments.py", "test_deadline_drop.py", "test_demo_weights.py",
        "test_devices_live.py", "test_devices_real.py", "test_engine.py",
        "test_engine_switch.py", "test_experiment_afresh.py", "test_faults.py",
        "test_faults_on_cue.py", "test_first_use.py", "test_hardening_engine.py",
        "test_live_changes.py", "test_neighbours.py", "test_one_writer.py", "test_onnx.py",
        "test_planner_speed.py", "test_player.py", "test_recorder.py",
        "test_recording_full_disk.py", "test_segments_ui.py", "test_startup.py",
        "test_streams.py", "test_sweep.py", "test_types.py", "test_ui_cli.py",
        "test_ui_devices.py", "test_ui_experiments.py", "test_ui_export.py", "test_ui_fit.py",
        "test_ui_hardening.py", "test_ui_presentation.py", "test_ui_starting.py",
        "test_ui_window.py",
    }
)  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # `-m slow` / `-m "not slow"` see the whole tier
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    if config.getoption("--all") or config.getoption("markexpr"):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
        config._batchscope_slow_left = len(slow)  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    left = getattr(config, "_batchscope_slow_left", 0)
    if left:
        terminalreporter.write_line(
            f"the fast tier: {left} slow tests left out (./batchscope.sh test --all runs them)"
        )


@pytest.fixture(scope="session")
def tiny_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-second 320×180 clip with a moving ball; decodes in milliseconds."""
    import cv2
    import numpy as np

    path = tmp_path_factory.mktemp("videos") / "tiny.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30, (320, 180))
    if not writer.isOpened():
        pytest.skip("OpenCV cannot write mp4 here")
    for i in range(60):
        frame = np.full((180, 320, 3), (40, 90, 30), np.uint8)
        cv2.rectangle(frame, (40, 100), (280, 150), (160, 60, 20), -1)
        cv2.circle(frame, (20 + i * 4, 60 + (i % 20)), 5, (255, 255, 255), -1)
        writer.write(frame)
    writer.release()
    return path


@pytest.fixture
def ui_settings(tmp_path: Path):
    """QSettings in a temporary INI file, so tests never touch the user's settings."""
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "batchscope.ini"), QSettings.Format.IniFormat)


def dashboard_config(sources: tuple[str, ...], sessions: int):
    """The UI tests' run: the emulated laptop GPU at 256×144 FP16, batch all waiting."""
    from batchscope.config import RunConfig

    return RunConfig(
        sources=sources,
        sessions=sessions,
        policy="all",
        backend="emulated",
        profile="laptop-8gb",
        precision="fp16",
        resolution=(256, 144),
        skip_bad_sources=True,
    )


@pytest.fixture
def dashboard(qtbot, tiny_video: Path, ui_settings):
    """A running dashboard on the emulated laptop GPU (256×144 FP16: 4.7 ms a window).

    Yields the MainWindow once its timer runs; closes it (stopping every thread) after.
    """
    from batchscope.engine.engine import Engine
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.theme import Look
    from batchscope.ui.window.main_window import MainWindow

    config = dashboard_config((str(tiny_video),), 3)
    window = MainWindow(Engine(config), Look(), ui_settings, devices=device_choices(gpus=[]))
    qtbot.addWidget(window)
    window.resize(1280, 800)
    window.show()
    window.start()
    qtbot.waitUntil(window.timer.isActive, timeout=15_000)
    yield window
    window.close()


@pytest.fixture
def fakes(monkeypatch):
    """Serving engines faked in this process (tests/fake_serving.py): the backends built
    (listed) and Ray's holds ("acquire", "release")."""
    from fake_serving import install_fakes

    return install_fakes(monkeypatch)


@pytest.fixture
def controls(qtbot):
    """The controls panel on this machine's devices (no GPU), its sends in ``.sent``."""
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.controls.panel import ControlsPanel

    panel = ControlsPanel(device_choices(gpus=[]))
    qtbot.addWidget(panel)
    sent: list[dict] = []
    panel.changed.connect(sent.append)
    panel.sent = sent
    return panel
