"""The first five minutes: `./batchscope.sh` sets up once, and the first launch opens a
window or says in one line why not (xcb's missing libraries; cv2 never redirects Qt)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from batchscope.ui.window.qt_platform import (
    debian_package,
    missing_libraries,
    prepare_qt_platform,
    qt_platform,
    undo_opencv_redirect,
    xcb_plugin,
)

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
LINUX_X86_64 = sys.platform == "linux" and platform.machine() == "x86_64"

# -- ./batchscope.sh: set-up once, then the command -------------------------------------

# Stands in for .venv/bin/python: logs each call; "torch" and "batchscope" are files it
# makes when pip installs them; a file "pip-fails" makes pip fail.
FAKE_PYTHON = """#!/bin/sh
here=$(dirname "$0")
echo "$*" >>"$here/../calls.log"
case "$*" in
"-c import torch") [ -f "$here/../torch" ] ;;
"-m pip install torch==2.13.0") touch "$here/../torch" ;;
"-m pip install -e .[dev]")
    [ ! -f "$here/../pip-fails" ] || { echo "ERROR: pip says no" >&2; exit 1; }
    printf '#!/bin/sh\\necho "app: $*"\\n' >"$here/batchscope"
    chmod +x "$here/batchscope" ;;
"-m pytest"*) echo "pytest ran" ;;
esac
"""


# Stands in for .venv-triton/bin/python: logs each call; pip "installs" the wheel's Python
# backend stub for Python 3.11 (an empty file: ldd finds nothing missing in it).
FAKE_TRITON_PYTHON = """#!/bin/sh
here=$(dirname "$0")
echo "$*" >>"$here/../calls.log"
stubs="$here/../lib/python3.11/site-packages/pytriton/tritonserver/python_backend_stubs/3.11"
case "$*" in
"-m pip install"*) mkdir -p "$stubs" && touch "$stubs/triton_python_backend_stub" ;;
"-c import sys"*) echo 3.11 ;;
esac
"""
TRITON_PACKAGES = re.search(
    r'^TRITON_PACKAGES="(.*)"$', (ROOT / "batchscope.sh").read_text(), re.M
).group(1)  # type: ignore[union-attr]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the script and pyproject.toml with a fake .venv and .venv-triton (no pip,
    no network)."""
    shutil.copy(ROOT / "batchscope.sh", tmp_path / "batchscope.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for venv, fake in ((".venv", FAKE_PYTHON), (".venv-triton", FAKE_TRITON_PYTHON)):
        python = tmp_path / venv / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(fake)
        python.chmod(0o755)
    return tmp_path


def triton_calls(checkout: Path) -> list[str]:
    log = checkout / ".venv-triton" / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def script(checkout: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(checkout / "batchscope.sh"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **env},
    )


def calls(checkout: Path) -> list[str]:
    log = checkout / ".venv" / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX sh script")
def test_setup_installs_once_then_skips_until_pyproject_changes(checkout: Path):
    first = script(checkout, "test", "--all", "-k", "x")
    assert first.returncode == 0, first.stderr
    assert calls(checkout) == [
        "-c import torch",
        "-m pip install torch==2.13.0",
        "-m pip install -e .[dev]",
        "-m pytest --all -k x",
    ]
    assert "batchscope.sh: installing torch==2.13.0 into .venv" in first.stdout
    assert first.stdout.endswith("pytest ran\n")
    if LINUX_X86_64:  # every test (--all) sets Triton's server up too, once
        assert triton_calls(checkout) == [
            f"-m pip install {TRITON_PACKAGES}",
            '-c import sys; print("%d.%d" % sys.version_info[:2])',
        ]
        assert "batchscope.sh: Triton set-up done" in first.stdout
        assert (checkout / ".venv-triton" / ".batchscope-setup").read_text() == (
            TRITON_PACKAGES + "\n"
        )

    again = script(checkout, "demo", "--light")
    assert again.returncode == 0, again.stderr
    assert calls(checkout)[4:] == []  # nothing installed, no python started for set-up
    assert again.stdout.splitlines() == [
        "batchscope.sh: set-up is up to date (.venv; redone when pyproject.toml changes)",
        "batchscope.sh: opening the app: batchscope gui --light",
        "app: gui --light",
    ]

    with (checkout / "pyproject.toml").open("a") as fh:
        fh.write("\n# a new dependency\n")
    changed = script(checkout, "setup")
    assert changed.returncode == 0, changed.stderr
    assert calls(checkout)[4:] == ["-c import torch", "-m pip install -e .[dev]"]
    assert "batchscope.sh: torch is already in .venv: keeping it" in changed.stdout
    if LINUX_X86_64:  # Triton's set-up has its own marker: nothing to redo
        assert len(triton_calls(checkout)) == 2  # neither the demo nor setup touched it
        tested = script(checkout, "test", "--all")
        assert "Triton set-up is up to date (.venv-triton)" in tested.stdout
        assert len(triton_calls(checkout)) == 2
        fast = script(checkout, "test")  # the fast tier has no Triton test: no set-up
        assert "Triton" not in fast.stdout and "running the fast tier" in fast.stdout
        assert calls(checkout)[-1] == "-m pytest"


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX sh script")
def test_setup_failures_end_with_one_clear_line(checkout: Path, tmp_path: Path):
    (checkout / ".venv" / "pip-fails").touch()
    failed = script(checkout, "demo")
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[-1] == (
        'batchscope.sh: error: pip install -e ".[dev]" failed (pip\'s message is above)'
    )
    assert not (checkout / ".venv" / ".batchscope-setup").exists()  # tried again next time

    shutil.rmtree(checkout / ".venv")
    missing = script(checkout, "test", PYTHON="python3.99-nowhere")
    assert missing.returncode == 1
    assert missing.stderr == (
        "batchscope.sh: error: python3.99-nowhere not found: install Python 3.11+ "
        "(Debian/Ubuntu: sudo apt install python3 python3-venv)\n"
    )
    usage = script(checkout, "deploy")
    assert usage.returncode == 2 and usage.stderr.startswith("usage: ")


def test_ci_runs_the_test_command():
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln[:1] not in "#"]
    assert "sh ./batchscope.sh test --all" in lines  # every test, the slow tier too


# -- xcb: one line naming what is missing ------------------------------------------------


@pytest.fixture
def fake_ldd(tmp_path: Path, monkeypatch) -> Path:
    """An `ldd` first on PATH that reports two of xcb's libraries missing."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    ldd = folder / "ldd"
    ldd.write_text(
        "#!/bin/sh\n"
        "printf '\\tlibxcb-cursor.so.0 => /lib/libxcb-cursor.so.0 (0x1)\\n'\n"
        "printf '\\tlibxcb-icccm.so.4 => not found\\n'\n"
        "printf '\\tlibxcb-keysyms.so.1 => not found\\n'\n"
        "printf '\\tlibxcb-icccm.so.4 => not found\\n'\n"
    )
    ldd.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


XCB_LINE = (
    "Qt's xcb platform plugin cannot load: libxcb-icccm.so.4, libxcb-keysyms.so.1 not found "
    "(Debian/Ubuntu: sudo apt install libxcb-icccm4 libxcb-keysyms1; README 'System libraries')"
)

needs_xcb = pytest.mark.skipif(
    not xcb_plugin().is_file(), reason="this PySide6 has no xcb plugin (not Linux)"
)


@needs_xcb
def test_missing_xcb_libraries_are_named_only_for_xcb_on_a_display(fake_ldd: Path):
    assert prepare_qt_platform({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}) == XCB_LINE
    assert prepare_qt_platform({"DISPLAY": ":0"}) == XCB_LINE  # xcb is Linux's default
    assert prepare_qt_platform({"QT_QPA_PLATFORM": "xcb"}) is None  # no display: Qt says so
    assert prepare_qt_platform({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"}) is None
    wayland = {"XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}
    assert prepare_qt_platform(wayland) is None


@needs_xcb
def test_gui_with_missing_xcb_libraries_prints_one_line_and_opens_nothing(
    fake_ldd: Path, tmp_path: Path
):
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "xcb",
        "DISPLAY": ":99",  # never reached: the check comes before the QApplication
        "XDG_CONFIG_HOME": str(tmp_path),
        "PYTHONPATH": str(APP),
    }
    code = "import sys; from batchscope.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "gui", "synthetic"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"batchscope: error: {XCB_LINE}\n"


def test_qt_platform_is_the_first_one_qt_tries():
    assert qt_platform({"QT_QPA_PLATFORM": "wayland;xcb"}) == "wayland"
    assert qt_platform({"QT_QPA_PLATFORM": "xcb:nograb"}) == "xcb"
    if sys.platform.startswith("linux"):
        assert qt_platform({}) == "xcb"
        assert qt_platform({"XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "w-0"}) == "wayland"
        assert qt_platform({"XDG_SESSION_TYPE": "wayland"}) == "xcb"  # no Wayland display


def test_debian_package_names_of_xcb_s_libraries():
    expected = {
        "libxcb-cursor.so.0": "libxcb-cursor0",
        "libxcb-icccm.so.4": "libxcb-icccm4",
        "libxcb-keysyms.so.1": "libxcb-keysyms1",
        "libxcb-render-util.so.0": "libxcb-render-util0",
        "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
        "libX11-xcb.so.1": "libx11-xcb1",
        "libX11.so.6": "libx11-6",
        "libGL.so.1": "libgl1",
        "libEGL.so.1": "libegl1",
        "libdbus-1.so.3": "libdbus-1-3",
        "libglib-2.0.so.0": "libglib2.0-0",
        "libpng16.so.16": "libpng16-16",
    }
    assert {so: debian_package(so) for so in expected} == expected


def readme_apt_packages() -> set[str]:
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")  # joins continued lines
    line = next(ln for ln in text.splitlines() if ln.startswith("sudo apt install "))
    return set(line.removeprefix("sudo apt install ").split())


XCB_FAMILY = re.compile(r"^lib(xcb|X11|xkbcommon|GL\.|EGL|fontconfig|freetype|glib|dbus)")


@needs_xcb
@pytest.mark.skipif(shutil.which("ldd") is None, reason="no ldd")
def test_readme_lists_the_package_of_every_x_library_the_plugin_loads():
    out = subprocess.run(["ldd", str(xcb_plugin())], capture_output=True, text=True).stdout
    sonames = {line.split()[0] for line in out.splitlines() if "=>" in line}
    family = {so for so in sonames if XCB_FAMILY.match(so)}
    assert {"libxcb-icccm.so.4", "libxcb-cursor.so.0", "libxkbcommon-x11.so.0"} <= family
    assert {debian_package(so) for so in family} <= readme_apt_packages()
    # the check and ldd agree on what this machine lacks
    missing = {line.split()[0] for line in out.splitlines() if "not found" in line}
    assert set(missing_libraries(xcb_plugin())) == missing


def test_missing_libraries_cannot_tell_without_the_file_or_ldd(tmp_path: Path):
    assert missing_libraries(tmp_path / "libqxcb.so") == []
    (tmp_path / "libqxcb.so").write_bytes(b"")
    assert missing_libraries(tmp_path / "libqxcb.so", ldd=str(tmp_path / "no-ldd")) == []


# -- cv2 never redirects Qt's plugins ----------------------------------------------------


def test_only_opencv_s_own_folders_are_undone():
    env = {
        "QT_QPA_PLATFORM_PLUGIN_PATH": "/venv/lib/python3.11/site-packages/cv2/qt/plugins",
        "QT_QPA_FONTDIR": "/venv/lib/python3.11/site-packages/cv2/qt/fonts",
    }
    assert undo_opencv_redirect(env) == ["QT_QPA_PLATFORM_PLUGIN_PATH", "QT_QPA_FONTDIR"]
    assert env == {}
    mine = {"QT_QPA_PLATFORM_PLUGIN_PATH": "/opt/qt6/plugins"}
    assert undo_opencv_redirect(mine) == []
    assert mine == {"QT_QPA_PLATFORM_PLUGIN_PATH": "/opt/qt6/plugins"}


CV2_FIRST = """
import json, os, sys
import cv2  # opencv-python points Qt at its own cv2/qt/plugins here
redirected = os.environ.get("QT_QPA_PLATFORM_PLUGIN_PATH", "")
from batchscope.cli import main
code = main(sys.argv[1:])
from PySide6.QtCore import QLibraryInfo
from PySide6.QtWidgets import QApplication
print(json.dumps({
    "code": code,
    "redirected": redirected,
    "after": os.environ.get("QT_QPA_PLATFORM_PLUGIN_PATH"),
    "plugins": QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath),
    "platform": QApplication.instance().platformName(),
}))
"""


def test_importing_cv2_first_never_points_qt_at_its_plugins(tmp_path: Path):
    import json

    import PySide6

    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "QT_DEBUG_PLUGINS": "1",  # Qt names every folder it searches for a platform
        "XDG_CONFIG_HOME": str(tmp_path),
        "PYTHONPATH": str(APP),
    }
    env.pop("QT_QPA_PLATFORM_PLUGIN_PATH", None)
    out = tmp_path / "shot.png"
    args = ["gui", "synthetic", "--screenshot", str(out), "--after", "0"]
    proc = subprocess.run(
        [sys.executable, "-c", CV2_FIRST, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    if not result["redirected"]:
        pytest.skip("this OpenCV (headless) does not redirect Qt")
    assert Path(result["redirected"]).parts[-3:] == ("cv2", "qt", "plugins")
    assert result["code"] == 0 and result["after"] is None
    assert result["platform"] == "offscreen"
    pyside = Path(PySide6.__file__).parent
    assert Path(result["plugins"]).is_relative_to(pyside)
    searched = re.findall(r'checking directory path "([^"]+)"', proc.stderr)
    assert f"{Path(result['plugins']) / 'platforms'}" in searched
    assert not [folder for folder in searched if "cv2" in Path(folder).parts]
