"""`batchscope` command line: gui (default), run, simulate, sweep, profiles, experiments, compare.

One module per command (``gui``, ``run``, ``simulate``, ``sweep`` with
``profiles``, ``experiments``, ``compare``), ``args`` for what they share,
``tables`` for the segment table, ``reports`` for how ``run`` and ``simulate`` report an
experiment (terminal tables, ``--report``'s HTML). Bad input exits 2 with one line on stderr
naming the input and the reason; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from batchscope.cli.args import EXIT_BAD_INPUT, Parser, user_errors
from batchscope.cli.compare import add_compare_command
from batchscope.cli.experiments import add_experiments_command
from batchscope.cli.export_onnx import add_export_onnx_command
from batchscope.cli.gui import add_gui_command
from batchscope.cli.plan import add_plan_command
from batchscope.cli.run import add_run_command
from batchscope.cli.simulate import add_simulate_command
from batchscope.cli.sweep import add_profile_commands
from batchscope.urls import mask_credentials

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="batchscope",
        description="A desktop lab for live batching experiments on a real-time, multi-session "
        "vision worker (BlurBall). Without a command, opens the app on its demo.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    add_gui_command(sub)
    add_run_command(sub)
    add_simulate_command(sub)
    add_plan_command(sub)
    add_profile_commands(sub)
    add_experiments_command(sub)
    add_compare_command(sub)
    add_export_onnx_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["gui", *argv]  # `batchscope --light`: the app's options without the command
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["gui", *argv])
    args.argv = argv  # what was typed: `--experiment` refuses the config flags given
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = MaskedText(sys.stdout), MaskedText(sys.stderr)
    try:
        return args.handler(args)
    except user_errors() as exc:
        print(f"batchscope: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("batchscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        sys.stdout, sys.stderr = streams


class MaskedText:
    """A text stream whose every write has URLs' passwords masked: whatever a command
    prints (a step's caption, a note, an error), the terminal never shows one."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(mask_credentials(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding…
        return getattr(self._stream, name)
