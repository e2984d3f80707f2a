"""What every command shares: argument types, policy flags, errors, JSON output.

A numeric knob's flag takes its type, range and default from
:data:`batchscope.config.KNOBS`, so the command line, RunConfig and the UI
cannot disagree on them. A bad value is an ``argparse.ArgumentTypeError``
carrying the knob's reason, which argparse prints as one line naming the flag.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from batchscope.config import (
    DEFAULT_ROUTER,
    DROP_AFTER_RULE,
    KNOBS,
    ROUTERS,
    STREAM_TRANSPORTS,
    ConfigError,
    parse_resolution,
)

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """One-line error for the user (the message names the input and the reason)."""


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors that are bad input, printed as one line (exit 2), never a traceback.

    Imported when an error is being handled, not before: the checkpoint error's module
    imports torch (about 1 s), which `--help`, `simulate` and `profiles` never need.
    """
    from batchscope.device.checks import BackendError
    from batchscope.engine.recorder import RecordingError
    from batchscope.engine.sources import SourceError
    from batchscope.experiment import ExperimentError
    from batchscope.models.weights import CheckpointError
    from batchscope.profiles.profile import ProfileError
    from batchscope.setting import SettingError
    from batchscope.sim.host_jitter import HostJitterError

    return (
        CliError,
        ConfigError,
        SourceError,
        ProfileError,
        BackendError,
        CheckpointError,
        RecordingError,
        ExperimentError,
        SettingError,
        HostJitterError,
    )


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the input, then exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


# -- argument types -------------------------------------------------------------------


def knob_type(name: str) -> Callable[[str], Any]:
    """The argument type of the knob ``name``: its parse and its range check."""
    knob = KNOBS[name]

    def parse(text: str) -> Any:
        try:
            return knob.parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(f"{exc.reason} (got {text!r})") from None

    return parse


def add_knob(parser: Any, name: str, help: str | None = None, **kwargs: Any) -> None:
    """``--flag`` of the knob ``name``, with the knob's type and (unless given) its default.

    ``help`` may say ``%(default)g``: argparse fills in the default.
    """
    knob = KNOBS[name]
    kwargs.setdefault("default", knob.default)
    parser.add_argument(knob.flag, type=knob_type(name), help=help, **kwargs)


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def seed_count(text: str) -> int:
    """How many phase draws (``--seeds``), 1 to MAX_SEEDS."""
    from batchscope.sim.seeds import MAX_SEEDS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (got {text!r})") from None
    if not 1 <= value <= MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_SEEDS} (got {text!r})")
    return value


def resolution(text: str) -> tuple[int, int]:
    try:
        return parse_resolution(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.reason + f" (got {text!r})") from None


def csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """A comma list of ``kind`` (each element checked by it)."""

    def parse(text: str) -> list[Any]:
        return [kind(part.strip()) for part in text.split(",") if part.strip()]

    return parse


def choice_list(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        out = [p.strip() for p in text.split(",") if p.strip()]
        for p in out:
            if p not in choices:
                raise argparse.ArgumentTypeError(
                    f"unknown {what} {p!r}; choose from {', '.join(choices)}"
                )
        return out

    return parse


def add_policy_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("policy parameters")
    add_knob(g, "max_batch", help="largest batch (all, dynamic, adaptive)")
    add_knob(
        g,
        "max_delay_ms",
        help="longest wait for a fuller batch in ms (dynamic, fixed; default %(default)g)",
    )
    add_knob(
        g,
        "batch",
        help="the fixed policy's batch shape: every batch runs this many rows, a short one "
        "padded with empty rows that cost device time (default %(default)g)",
    )
    add_knob(g, "slo_ms", help="latency objective in ms (adaptive; default %(default)g)")
    add_knob(
        g,
        "drop_after_ms",
        help="discard a window that has waited longer than this many ms, counted as "
        f"expired (any policy; default: never); {DROP_AFTER_RULE}",
    )


def add_neighbour_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a shared device")
    add_knob(
        g,
        "neighbours",
        help="other busy jobs on the device: modelled time-slicing on the emulated device, "
        "real load processes on cpu/cuda (default %(default)g)",
    )
    add_knob(
        g,
        "neighbour_duty",
        help="share of the time each neighbour keeps the device busy, 0-1 (default %(default)g)",
    )


#: What a SOURCE argument may be (run and gui).
SOURCES_HELP = (
    "video files, camera:N, synthetic, or network streams: rtsp://, rtsps://, http(s)://, "
    "udp://, rtp:// URLs and .m3u8 playlists, played live as they arrive "
    "(default: the sample videos)"
)


def add_stream_flags(p: argparse.ArgumentParser) -> None:
    """How network streams connect: RTSP transport, connect and read timeouts."""
    g = p.add_argument_group("network streams")
    g.add_argument(
        "--stream-transport",
        choices=STREAM_TRANSPORTS,
        default=STREAM_TRANSPORTS[0],
        help="RTSP over tcp (interleaved: no loss, passes NAT), udp (lower latency on a "
        "clean network), or auto (FFmpeg: UDP, then TCP); default %(default)s",
    )
    add_knob(
        g,
        "stream_timeout_s",
        metavar="S",
        help="the longest wait for a stream to connect: a URL that never answers fails after "
        "it, and each reconnect attempt gives up after it (default %(default)g)",
    )
    add_knob(
        g,
        "stream_read_timeout_s",
        metavar="S",
        help="the longest wait for a stream's next frame before it counts as stalled and "
        "reconnects with backoff (default %(default)g)",
    )


def add_devices_flags(p: argparse.ArgumentParser) -> None:
    """``--devices N|LIST`` and ``--router`` (several devices; sim/devices.py's rules)."""
    p.add_argument(
        "--devices",
        metavar="N|LIST",
        help="several devices: a count of --profile's device, or a list of profiles "
        "(emulated:laptop-8gb,emulated:server-24gb); one policy per device, one roster "
        "(default: one device)",
    )
    p.add_argument(
        "--router",
        choices=ROUTERS,
        help="with --devices, where each window goes: pinned (a session stays on one "
        "device, sessions dealt by count) or least-loaded (the power of two choices on "
        f"waiting windows, Ray Serve's rule); default {DEFAULT_ROUTER}",
    )


def add_host_jitter_flag(p: argparse.ArgumentParser) -> None:
    """``--host-jitter none|REPORT`` (simulate, plan): a measured host's lateness, replayed."""
    p.add_argument(
        "--host-jitter",
        default="none",
        metavar="none|REPORT",
        help="replay how late a measured machine woke the feeder and the worker: REPORT is "
        "the JSON of a `batchscope run` there (its host_jitter); none (default) for clean "
        "comparisons, threads never late",
    )


def stream_options(args: argparse.Namespace) -> dict[str, Any]:
    """The RunConfig stream fields the flags of :func:`add_stream_flags` give."""
    return {
        "stream_transport": args.stream_transport,
        "stream_timeout_s": getattr(args, KNOBS["stream_timeout_s"].dest),
        "stream_read_timeout_s": getattr(args, KNOBS["stream_read_timeout_s"].dest),
    }


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, str]:
    """dest -> the option as typed, for each option of ``parser`` that ``argv`` gives.

    Read as argparse reads them: ``--flag value``, ``--flag=value`` and an
    unambiguous abbreviation (argparse has refused an ambiguous one already).
    """
    options = {s: a.dest for a in parser._actions for s in a.option_strings}
    given = {}
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        if name in options:
            given.setdefault(options[name], name)
            continue
        matches = {dest for opt, dest in options.items() if opt.startswith(name)}
        if len(matches) == 1:
            given.setdefault(matches.pop(), name)
    return given


def refuse_config_flags(args: argparse.Namespace, allowed: Sequence[str]) -> None:
    """With ``--experiment`` the file is the config: a flag that would set it is an error.

    Refused rather than ignored, so that ``--policy all`` never runs the
    file's policy silently. ``args`` carries its parser and the command's argv.
    """
    given = given_options(args.parser, args.argv)
    refused = [flag for dest, flag in given.items() if dest not in (*allowed, "help")]
    if getattr(args, "sources", None):
        refused.insert(0, f"the source {args.sources[0]!r}")
    if refused:
        raise CliError(
            f"--experiment {args.experiment}: {refused[0]} conflicts with the experiment "
            "file, which sets the whole config; set it in the file (or a copy of it)"
        )


# -- output and process set-up --------------------------------------------------------


def write_json(data: Any, target: str | None) -> None:
    """``data`` as JSON to the file ``target``, to stdout for ``-``, nowhere for None."""
    if not target:
        return
    text = json.dumps(data, indent=2)
    if target == "-":
        print(text)
        return
    try:
        with open(target, "w") as fh:
            fh.write(text + "\n")
    except OSError as exc:
        with contextlib.suppress(OSError):  # half a JSON file (a full disk) reads as none
            os.unlink(target)
        raise CliError(f"{target}: cannot write the report ({exc.strerror})") from None


def configure_threads() -> None:
    """Set torch/OpenCV thread pools once, before any thread starts."""
    import cv2
    import torch

    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)
    cv2.setNumThreads(max(1, cores // 2))
