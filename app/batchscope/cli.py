"""`batchscope` command line: gui (default), run, simulate, sweep, profiles.

Bad input exits non-zero with one line on stderr naming the input and the
reason; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from batchscope.config import (
    BACKENDS,
    POLICIES,
    PRECISIONS,
    ConfigError,
    RunConfig,
    parse_resolution,
)

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """One-line error for the user (the message names the input and the reason)."""


def _user_errors() -> tuple[type[BaseException], ...]:
    from batchscope.engine.backends import BackendError
    from batchscope.engine.recorder import RecordingError
    from batchscope.engine.sources import SourceError
    from batchscope.models.weights import CheckpointError
    from batchscope.profiles.profile import ProfileError

    return (
        CliError,
        ConfigError,
        SourceError,
        ProfileError,
        BackendError,
        CheckpointError,
        RecordingError,
    )


def configure_threads() -> None:
    """Set torch/OpenCV thread pools once, before any thread starts."""
    import cv2
    import torch

    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)
    cv2.setNumThreads(max(1, cores // 2))


# -- argument types -------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _resolution(text: str) -> tuple[int, int]:
    try:
        return parse_resolution(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.reason + f" (got {text!r})") from None


def _csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        return [kind(part.strip()) for part in text.split(",") if part.strip()]

    return parse


def _choice_list(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
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
    g.add_argument(
        "--max-batch",
        type=_positive_int,
        default=None,
        help="largest batch (all, dynamic, adaptive)",
    )
    g.add_argument(
        "--max-delay-ms",
        type=_number,
        default=10.0,
        help="longest wait for a fuller batch in ms (dynamic, fixed; default 10)",
    )
    g.add_argument(
        "--batch", type=_positive_int, default=4, help="batch size of the fixed policy (default 4)"
    )
    g.add_argument(
        "--slo-ms",
        type=_number,
        default=50.0,
        help="latency objective in ms (adaptive; default 50)",
    )


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the input, then exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="batchscope",
        description="A desktop lab for live batching experiments on a real-time, multi-session "
        "vision worker (BlurBall). Without a command, opens the app on its demo.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

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
        type=_number,
        default=5.0,
        metavar="SECONDS",
        help="with --screenshot: seconds to run first (default 5)",
    )
    gui.add_argument("--scenario", help="start on a demo scenario (by its menu name)")

    run = sub.add_parser("run", help="run the live worker headless and report")
    run.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="video files, camera:N or synthetic (default: the sample videos)",
    )
    run.add_argument("--sessions", type=_positive_int, default=4)
    run.add_argument("--policy", choices=POLICIES, default="all")
    add_policy_flags(run)
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="torch (the real model) or emulated (replay a profile); default: "
        "torch if --device is given, else emulated",
    )
    run.add_argument("--device", default=None, help="cpu or cuda:N (torch backend)")
    run.add_argument(
        "--profile",
        default="laptop-8gb",
        help="profile name or JSON path (emulated backend; default laptop-8gb)",
    )
    run.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="default: fp16 on emulated/CUDA, fp32 on CPU",
    )
    run.add_argument("--resolution", type=_resolution, default=(512, 288), metavar="WxH")
    run.add_argument("--fps", type=_number, default=30.0, help="frames/s per session (default 30)")
    run.add_argument(
        "--duration",
        type=_number,
        default=20.0,
        metavar="S",
        help="measured seconds (after warm-up; default 20)",
    )
    run.add_argument(
        "--warmup",
        type=_number,
        default=1.0,
        metavar="S",
        help="seconds run before measuring (default 1)",
    )
    run.add_argument("--checkpoint", help="BlurBall checkpoint to load (torch backend)")
    run.add_argument("--channels-last", action="store_true")
    run.add_argument("--no-cudnn-benchmark", action="store_true")
    run.add_argument(
        "--lean",
        action="store_true",
        help="skip stage-4 outputs the head never uses (same result, less compute)",
    )
    run.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model (off by default: on this 2-core CPU it is 1.5x faster "
        "per batch but compiling takes about 100 s before the run starts)",
    )
    run.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="capture each batch size once as a CUDA graph and replay it (CUDA devices only; "
        "off by default until measured to win on your GPU: benchmarks/gpu_check.sh)",
    )
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--skip-bad-sources",
        action="store_true",
        help="report a bad source and run the others (default: start nothing)",
    )
    run.add_argument("--json", metavar="PATH|-", help="write the report as JSON ('-': stdout)")
    run.add_argument(
        "--record",
        metavar="DIR",
        help="record config, events, per-window timings and the timeline to a "
        "new folder (flushed every second)",
    )
    run.add_argument("--quiet", action="store_true", help="no live status line")

    from batchscope.profiles.cli import add_profile_commands
    from batchscope.sim.cli import add_simulate_command

    add_simulate_command(sub)
    add_profile_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["gui", *argv])
    try:
        return args.handler(args) if hasattr(args, "handler") else _dispatch(args)
    except _user_errors() as exc:
        print(f"batchscope: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("batchscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "gui":
        from batchscope.ui.app import run_gui

        return run_gui(args)
    if args.command == "run":
        return cmd_run(args)
    raise CliError(f"unknown command {args.command}")


# -- run ------------------------------------------------------------------------------


def config_from_args(args: argparse.Namespace) -> RunConfig:
    backend = args.backend or ("torch" if args.device else "emulated")
    device = args.device or "cpu"
    precision = args.precision or ("fp32" if backend == "torch" and device == "cpu" else "fp16")
    if args.duration <= 0:
        raise ConfigError("duration", args.duration, "must be a positive number of seconds")
    if args.warmup < 0:
        raise ConfigError("warmup", args.warmup, "must be 0 or more seconds")
    if args.checkpoint and backend != "torch":
        raise ConfigError("checkpoint", args.checkpoint, "needs the torch backend (--device)")
    return RunConfig(
        sources=tuple(args.sources),
        sessions=args.sessions,
        fps=args.fps,
        policy=args.policy,
        max_batch=args.max_batch,
        max_delay_ms=args.max_delay_ms,
        batch=args.batch,
        slo_ms=args.slo_ms,
        backend=backend,
        device=device,
        profile=args.profile if backend == "emulated" else None,
        precision=precision,
        resolution=args.resolution,
        channels_last=args.channels_last,
        cudnn_benchmark=not args.no_cudnn_benchmark,
        checkpoint=args.checkpoint,
        lean=args.lean,
        compile=args.compile,
        cuda_graphs=args.cuda_graphs,
        duration_s=args.duration,
        seed=args.seed,
        skip_bad_sources=args.skip_bad_sources,
        extra={"warmup_s": args.warmup},
    )


def status_line(report: dict[str, Any], t: float, total: float) -> str:
    o = report["overall"]
    sizes = o["batch_sizes"]
    common = max(sizes, key=sizes.get) if sizes else "-"
    return (
        f"[{t:5.1f}/{total:.0f} s] thru {o['throughput_wps']:6.1f} w/s  "
        f"fps mean {o['mean_fps']:5.1f} min {o['min_fps']:5.1f}  "
        f"p50 {o['latency_ms']['p50']:6.1f} ms  p99 {o['latency_ms']['p99']:6.1f} ms  "
        f"busy {100 * o['busy']:3.0f}%  batch≈{common}"
    )


def cmd_run(args: argparse.Namespace) -> int:
    from batchscope.engine.engine import Engine
    from batchscope.engine.report import format_sessions, format_table

    config = config_from_args(args)
    if config.backend == "torch":
        configure_threads()
    out_stream = sys.stderr if args.json == "-" else sys.stdout
    engine = Engine(config)
    if not args.quiet:
        print(
            f"batchscope: opening {len(config.sources) or 'sample'} source(s) and "
            f"{config.device_label}…",
            file=sys.stderr,
        )
    engine.open()
    if config.skip_bad_sources and all(s.error for s in engine.sources):
        raise CliError("no source could be opened")
    engine.start()
    try:
        if args.record:
            engine.start_recording(args.record)
        if args.warmup > 0:
            time.sleep(args.warmup)
        engine.reset_stats(announce=False)
        t_start = time.monotonic()
        while (left := config.duration_s - (time.monotonic() - t_start)) > 0:
            time.sleep(min(1.0, left))
            if not args.quiet:
                elapsed = time.monotonic() - t_start
                line = status_line(engine.report(), elapsed, config.duration_s)
                end = "" if sys.stderr.isatty() else "\n"
                print(("\r" if end == "" else "") + line, end=end, file=sys.stderr, flush=True)
        report = engine.report()
        recorded = engine.stop_recording()
    finally:
        engine.stop()
    if not args.quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    print(
        f"{report['device_label']} · {report['weights']} · {config.policy_phrase()}",
        file=out_stream,
    )
    print(format_table([report]), file=out_stream)
    print(file=out_stream)
    print(format_sessions(report), file=out_stream)
    for ev in report["events"]:
        if ev["kind"] in ("error", "oom"):
            print(f"  event at {ev['t']:.1f} s [{ev['kind']}] {ev['message']}", file=out_stream)
    if recorded:
        print(f"recorded to {recorded}", file=out_stream)
    write_json(report, args.json)
    return 0


def write_json(data: Any, target: str | None) -> None:
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
        raise CliError(f"{target}: cannot write the report ({exc.strerror})") from None


if __name__ == "__main__":
    raise SystemExit(main())
