"""Before the QApplication: undo opencv-python's Qt redirect and name what xcb lacks.

Why this exists (issue 16): on a minimal Debian the first launch opened no window.
Qt's xcb platform plugin links X libraries such a system lacks (libxcb-icccm4,
libxcb-keysyms1, libxcb-cursor0, …), Qt then aborts with a paragraph that names the
wrong folder — ``…/cv2/qt/plugins`` — because importing opencv-python (the wheel with
its own Qt 5 build) sets ``QT_QPA_PLATFORM_PLUGIN_PATH`` and ``QT_QPA_FONTDIR`` to its
bundle. :func:`prepare_qt_platform` removes those two and, where Qt is about to load
xcb on a display, asks ``ldd`` which of the plugin's libraries cannot be found, so the
user reads one line with the apt packages instead of Qt's abort.
:func:`display_problem` does the same where there is no display at all (over SSH, in CI):
Qt aborted with exit 134 and its paragraph about plugins; now one line says so, and a
``--screenshot`` run draws offscreen instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import MutableMapping
from pathlib import Path

#: The variables opencv-python's ``cv2/config-3.py`` sets on import (Linux wheels).
OPENCV_QT_VARIABLES = ("QT_QPA_PLATFORM_PLUGIN_PATH", "QT_QPA_FONTDIR")

#: Libraries whose Debian package does not follow the naming rule of :func:`debian_package`.
PACKAGE_EXCEPTIONS = {
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libGLdispatch.so.0": "libglvnd0",
}

#: Qt's Linux platform plugins that open windows on a display server.
DISPLAY_PLATFORMS = ("xcb", "wayland")

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$", re.MULTILINE)


def prepare_qt_platform(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Undo opencv-python's redirect; then one line naming what xcb lacks, or None.

    Call it after every import of cv2 (``batchscope.ui.window.app`` imports the engine, which
    imports cv2, at its top: cv2 sets the variables only on its first import) and before
    the QApplication, which reads them.
    """
    undo_opencv_redirect(environ)
    if qt_platform(environ) != "xcb" or not environ.get("DISPLAY"):
        return None
    missing = missing_libraries(xcb_plugin())
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(debian_package(name) for name in missing))
    return (
        f"Qt's xcb platform plugin cannot load: {', '.join(missing)} not found "
        f"(Debian/Ubuntu: sudo apt install {packages}; README 'System libraries')"
    )


def display_problem(
    screenshot: bool = False, environ: MutableMapping[str, str] = os.environ
) -> str | None:
    """One line saying that Qt has no display to open a window on, or None.

    On Linux, Qt's xcb and wayland plugins need ``DISPLAY`` or ``WAYLAND_DISPLAY``;
    without either Qt aborts the process. A ``screenshot`` run needs no screen: with
    ``QT_QPA_PLATFORM`` unset it is set to ``offscreen`` here (None is returned). A
    platform the user named is kept: only one that needs a display gets the line.
    """
    if not sys.platform.startswith("linux"):
        return None
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    named = environ.get("QT_QPA_PLATFORM", "").strip()
    if screenshot and not named:
        environ["QT_QPA_PLATFORM"] = "offscreen"
        return None
    if qt_platform(environ) not in DISPLAY_PLATFORMS:
        return None
    if named:
        where, offscreen = f"for QT_QPA_PLATFORM={named}", "QT_QPA_PLATFORM=offscreen with "
    else:
        where, offscreen = "to open the window on", ""
    return (
        f"no display {where}: DISPLAY and WAYLAND_DISPLAY are not set (over SSH: ssh -X; "
        f"without a screen: {offscreen}`batchscope gui --screenshot PNG` draws offscreen, "
        "and `batchscope run` needs no window)"
    )


def undo_opencv_redirect(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Remove the Qt variables that point into a ``cv2/qt`` folder; the names removed.

    A value the user set elsewhere is kept: only opencv-python's own folder is undone.
    """
    removed = []
    for name in OPENCV_QT_VARIABLES:
        parts = Path(environ.get(name, "")).parts
        if len(parts) >= 3 and parts[-3:-1] == ("cv2", "qt"):
            del environ[name]
            removed.append(name)
    return removed


def qt_platform(environ: MutableMapping[str, str] = os.environ) -> str:
    """The platform plugin Qt tries first: ``QT_QPA_PLATFORM``'s first entry, else Qt's
    Linux default (wayland in a Wayland session, xcb otherwise); "" off Linux."""
    named = environ.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if named:
        return named
    if not sys.platform.startswith("linux"):
        return ""
    if environ.get("XDG_SESSION_TYPE") == "wayland" and environ.get("WAYLAND_DISPLAY"):
        return "wayland"
    return "xcb"


def xcb_plugin() -> Path:
    """The xcb plugin of the PySide6 that will run (Qt's own plugin folder)."""
    from PySide6.QtCore import QLibraryInfo

    plugins = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath))
    return plugins / "platforms" / "libqxcb.so"


def missing_libraries(library: Path, ldd: str = "ldd") -> list[str]:
    """The shared libraries ``library`` needs that the loader cannot find, in ``ldd``'s
    order; [] when nothing is missing or it cannot tell (no such file, no ldd)."""
    if not library.is_file():
        return []
    try:
        out = subprocess.run(
            [ldd, str(library)], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return list(dict.fromkeys(_NOT_FOUND.findall(out)))


def debian_package(soname: str) -> str:
    """The Debian/Ubuntu package that ships ``soname``, by Debian's library naming rule:
    ``libNAME.so.V`` is in ``libNAME`` + ``V``, with a dash when NAME ends in a digit,
    lower-case (``libxcb-icccm.so.4`` → ``libxcb-icccm4``, ``libX11.so.6`` → ``libx11-6``)."""
    if soname in PACKAGE_EXCEPTIONS:
        return PACKAGE_EXCEPTIONS[soname]
    name, _, version = soname.partition(".so.")
    version = version.split(".")[0]
    if not version:
        return name.lower()
    dash = "-" if name[-1:].isdigit() else ""
    return f"{name}{dash}{version}".lower()
