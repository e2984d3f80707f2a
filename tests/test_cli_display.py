"""`batchscope gui` without a display (over SSH, in CI): one line and exit 2, not Qt's
abort (exit 134); a `--screenshot` run draws offscreen by itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchscope.ui.window.qt_platform import display_problem

APP = Path(__file__).resolve().parents[1] / "app"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="DISPLAY and WAYLAND_DISPLAY are Linux's"
)


def gui(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """``batchscope gui ARGS`` in a subprocess with no display (and ``env`` added)."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    clean.update(
        XDG_CONFIG_HOME=str(tmp_path),
        PYTHONPATH=os.pathsep.join(filter(None, [str(APP), os.environ.get("PYTHONPATH")])),
        **env,
    )
    code = "import sys; from batchscope.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "gui", *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_gui_without_a_display_says_so_in_one_line(tmp_path: Path):
    proc = gui(["synthetic"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "batchscope: error: no display to open the window on: DISPLAY and WAYLAND_DISPLAY "
        "are not set (over SSH: ssh -X; without a screen: `batchscope gui --screenshot PNG` "
        "draws offscreen, and `batchscope run` needs no window)\n"
    )
    assert not (tmp_path / "BatchScope").exists()  # no window, so no settings either


def test_a_platform_named_without_a_display_is_one_line_too(tmp_path: Path):
    proc = gui(["synthetic"], tmp_path, QT_QPA_PLATFORM="xcb")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("batchscope: error: no display for QT_QPA_PLATFORM=xcb: ")
    assert "QT_QPA_PLATFORM=offscreen with `batchscope gui --screenshot PNG`" in proc.stderr


def test_a_screenshot_without_a_display_draws_offscreen(tmp_path: Path):
    import cv2

    out = tmp_path / "shot.png"
    proc = gui(["synthetic", "--screenshot", str(out), "--after", "0"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "batchscope: error" not in proc.stderr
    image = cv2.imread(str(out))
    assert image is not None and image.shape[:2] == (1000, 1600)  # SCREENSHOT_SIZE


def test_display_problem_reads_the_environment():
    env: dict[str, str] = {}
    assert display_problem(screenshot=True, environ=env) is None
    assert env == {"QT_QPA_PLATFORM": "offscreen"}  # set for the QApplication to read
    for has_one in ({"DISPLAY": ":0"}, {"WAYLAND_DISPLAY": "wayland-0"}):
        env = dict(has_one)
        assert display_problem(environ=env) is None and env == has_one
    for needs_none in ("offscreen", "minimal", "vnc"):
        assert display_problem(environ={"QT_QPA_PLATFORM": needs_none}) is None
    named = {"QT_QPA_PLATFORM": "wayland"}
    assert display_problem(screenshot=True, environ=named).startswith(
        "no display for QT_QPA_PLATFORM=wayland: "
    )
    assert named == {"QT_QPA_PLATFORM": "wayland"}  # the user's choice is kept
