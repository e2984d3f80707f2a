"""`batchscope gui` (the default command): the desktop app."""

from __future__ import annotations

import argparse
import re
from typing import Any

from batchscope.cli.args import (
    SOURCES_HELP,
    CliError,
    add_stream_flags,
    number,
    stream_options,
)
from batchscope.cli.outputs import check_file
from batchscope.config import SERVING_ENGINES
from batchscope.experiment import Experiment, list_experiments


def add_gui_command(sub: Any) -> None:
    gui = sub.add_parser(
        "gui",
        help="open the desktop app (the default)",
        description="Opens the desktop app on the last-used settings, or on the demo "
        "(the sample videos, 4 sessions, batch all waiting) the first time.",
        epilog="In the app: F11 toggles presentation mode and View ▸ Light/Dark theme "
        "switches the theme; --presentation and --light start in them "
        "(BATCHSCOPE_PRESENTATION=1 and BATCHSCOPE_THEME=light do the same).",
    )
    gui.add_argument("sources", nargs="*", metavar="SOURCE", help=SOURCES_HELP)
    add_stream_flags(gui)
    gui.add_argument(
        "--screenshot",
        metavar="PNG",
        help="save a grab of the window and exit (without a display: drawn offscreen)",
    )
    gui.add_argument(
        "--after",
        type=number,
        default=5.0,
        metavar="SECONDS",
        help="with --screenshot: seconds to run first (default %(default)g)",
    )
    gui.add_argument(
        "--size",
        type=window_size,
        metavar="WxH",
        help="open the window at this size, e.g. 1280x800 (for slides and layout checks; "
        "with --presentation the presentation look at this size instead of full screen; "
        "with --screenshot the grab is this size)",
    )
    gui.add_argument(
        "--experiment",
        "--scenario",
        dest="experiment",
        metavar="NAME|PATH",
        help=f"play an experiment: {experiment_names()}, or a .toml path (`batchscope "
        "experiments` describes them; in the app: the Experiments menu); --scenario is the "
        "old name of this flag",
    )
    gui.add_argument(
        "--backend",
        choices=SERVING_ENGINES,
        default=None,
        help="start on a real serving engine that forms the batches, with the same "
        "sessions: ray (Ray Serve) or triton (a Triton server started on loopback; "
        "./batchscope.sh triton sets it up); the Device list is then what runs a batch in "
        "it, and the Engine list switches engines live; default: BatchScope's own worker",
    )
    gui.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="with --backend ray: the Ray cluster to deploy on; default: a local Ray on loopback",
    )
    gui.add_argument(
        "--presentation",
        action="store_true",
        help="start in presentation mode: full screen, larger type (F11 toggles it)",
    )
    gui.add_argument(
        "--light",
        action="store_true",
        help="start in the light theme (View ▸ Dark theme switches back; the app "
        "remembers the last theme)",
    )
    gui.set_defaults(handler=cmd_gui)


#: The window sizes ``--size`` takes: from a small laptop to an 8K screen.
SIZE_RANGE = ((800, 600), (7680, 4320))


def window_size(text: str) -> tuple[int, int]:
    """'1280x800' -> (1280, 800), within SIZE_RANGE."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 1280x800 (got {text!r})")
    (w_min, h_min), (w_max, h_max) = SIZE_RANGE
    w, h = int(m.group(1)), int(m.group(2))
    if not (w_min <= w <= w_max and h_min <= h <= h_max):
        raise argparse.ArgumentTypeError(
            f"must be {w_min}x{h_min} to {w_max}x{h_max} (got {text!r})"
        )
    return w, h


def experiment_names() -> str:
    """The built-in and user experiments' names, for the help (a broken file is left out:
    `batchscope experiments` lists it with its error)."""
    names = [e.name for _, e in list_experiments() if isinstance(e, Experiment)]
    return ", ".join(names).replace("%", "%%") or "none found"


def cmd_gui(args: argparse.Namespace) -> int:
    # Qt is imported only when the app opens: the headless commands never load it.
    from batchscope.ui.window import run_gui

    if args.ray_address and args.backend != "ray":
        raise CliError("--ray-address needs --backend ray")
    if args.backend and args.experiment:
        raise CliError(
            '--backend: an experiment names its own engine (backend = "ray" in its file)'
        )

    check_file("--screenshot", args.screenshot)  # before the window and its seconds
    args.stream = stream_options(args)  # RunConfig's stream fields, for the first config
    return run_gui(args)
