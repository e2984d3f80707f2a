"""`batchscope gui` (the default command): the desktop app."""

from __future__ import annotations

import argparse
from typing import Any

from batchscope.cli.args import number


def add_gui_command(sub: Any) -> None:
    gui = sub.add_parser("gui", help="open the desktop app (the default)")
    gui.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="video files, camera:N or synthetic (default: the sample videos)",
    )
    gui.add_argument("--screenshot", metavar="PNG", help="save a grab of the window and exit")
    gui.add_argument(
        "--after",
        type=number,
        default=5.0,
        metavar="SECONDS",
        help="with --screenshot: seconds to run first (default %(default)g)",
    )
    gui.add_argument(
        "--experiment",
        "--scenario",
        dest="experiment",
        metavar="NAME|PATH",
        help="play an experiment file (a built-in name such as bus-or-taxi, or a .toml path);"
        " --scenario is the old name of this flag",
    )
    gui.set_defaults(handler=cmd_gui)


def cmd_gui(args: argparse.Namespace) -> int:
    # Qt is imported only when the app opens: the headless commands never load it.
    from batchscope.ui.app import run_gui

    return run_gui(args)
