"""`batchscope run`: the live worker, headless, for a measured duration; then its report.

With ``--experiment`` it plays an experiment file instead (the
:class:`~batchscope.engine.player.ExperimentPlayer` applies its steps) and
adds the segment table, with the simulator's prediction for each segment.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from batchscope.cli.args import (
    SOURCES_HELP,
    CliError,
    add_knob,
    add_neighbour_flags,
    add_policy_flags,
    add_stream_flags,
    configure_threads,
    given_options,
    number,
    refuse_config_flags,
    resolution,
    write_json,
)
from batchscope.cli.metrics_port import add_metrics_flag, metrics_served, serve_metrics_of
from batchscope.cli.outputs import check_file, write_each
from batchscope.cli.reports import print_experiment_report, print_host, write_csv, write_report
from batchscope.config import (
    BACKENDS,
    DEFAULT_RESOLUTION,
    DEFAULT_ROUTER,
    EMULATED,
    FITS,
    KNOBS,
    POLICIES,
    POSTPROCESSING,
    PRECISIONS,
    ROUTERS,
    RUNTIMES,
    SERVING_ENGINES,
    UNTRAINED,
    ConfigError,
    RunConfig,
    default_cpu_precision,
    default_runtime,
    drop_after_warning,
    format_resolution,
    is_real_device,
    parse_devices,
    parse_real_devices,
)
from batchscope.engine.engine import Engine
from batchscope.engine.metrics import Event
from batchscope.engine.player import ExperimentPlayer, first_config
from batchscope.engine.recorder import Recorder, check_folder
from batchscope.engine.report.run_report import experiment_block
from batchscope.engine.report.segment import too_short
from batchscope.engine.report.text import format_devices, format_sessions, format_table
from batchscope.engine.snapshot import BusRecords
from batchscope.experiment import load_experiment
from batchscope.sim.prediction import add_predictions
from batchscope.sim.simulator import DEFAULT_WARMUP_S
from batchscope.urls import mask_credentials

#: The flags ``run --experiment`` accepts; the others set the config, which the file sets.
EXPERIMENT_FLAGS = ("experiment", "json", "csv", "report", "record", "quiet", "metrics_port")

#: The exit status of a run that Ctrl-C ended (128 + SIGINT, as a shell reports it); its
#: report of what was measured is still printed and written, marked ``"interrupted"``.
EXIT_INTERRUPTED = 130
#: The exit status of a run whose recording or report could not all be written (a full
#: disk): the run itself went to the end, its summary printed.
EXIT_NOT_WRITTEN = 1


def add_run_command(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run the live worker headless and report",
        epilog="With --experiment NAME|PATH the experiment file sets the whole config and "
        "its steps; only --json, --csv, --report, --record, --quiet and --metrics-port may "
        "be added "
        "(a config flag or a source is refused with one line, never ignored). Ctrl-C ends "
        "the run early: its report of what was measured is still printed and written, "
        'marked "interrupted": true (exit 130).',
    )
    run.add_argument("sources", nargs="*", metavar="SOURCE", help=SOURCES_HELP)
    add_knob(
        run,
        "sessions",
        metavar="N",
        help="client sessions, sharing the sources in turn (session i plays source i mod "
        f"the number of sources); {KNOBS['sessions'].range_text()} (default %(default)g)",
    )
    run.add_argument(
        "--policy", choices=POLICIES, default="all", help="batching policy (default %(default)s)"
    )
    add_policy_flags(run)
    add_neighbour_flags(run)
    add_stream_flags(run)
    add_knob(
        run,
        "fps",
        help="frames/s per session, or 'source' for each file's own rate (default %(default)g)",
    )
    add_knob(
        run, "duration_s", metavar="S", help="measured seconds (after warm-up; default %(default)g)"
    )
    run.add_argument(
        "--warmup",
        type=number,
        default=DEFAULT_WARMUP_S,
        metavar="S",
        help="seconds run before measuring (default %(default)g)",
    )
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--skip-bad-sources",
        action="store_true",
        help="report a bad source and run the others (default: start nothing)",
    )
    _add_engine_flags(run.add_argument_group("engine and devices"))
    _add_model_flags(run.add_argument_group("model"))
    _add_output_flags(run.add_argument_group("outputs and setting files"))
    run.set_defaults(handler=cmd_run, parser=run)


def _add_engine_flags(group: Any) -> None:
    """What forms and runs the batches: the engine, its devices and their router."""
    group.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="torch (the real model) or emulated (replay a profile) in BatchScope's worker; "
        "or a real serving engine forms the batches and runs the profile's curve, or the real "
        "model with --device: ray (Ray Serve) or triton (a Triton server BatchScope starts on "
        "loopback; set up by ./batchscope.sh triton); default: torch if --device is given, "
        "else emulated",
    )
    group.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="the Ray cluster to deploy on (--backend ray), e.g. ray://head:10001; "
        "default: start a local Ray on loopback, stopped at the end",
    )
    group.add_argument("--device", default=None, help="cpu or cuda:N (torch backend)")
    group.add_argument(
        "--devices",
        default="1",
        metavar="N|LIST",
        help="devices serving the sessions in BatchScope's worker (one worker thread and "
        "policy each, --router places the windows): N emulated devices of --profile, a list "
        "of profiles (emulated:laptop-8gb,emulated:server-24gb), N instances of the real "
        "model on --device, or a list of real devices (cuda:0,cuda:1 or cpu,cpu: the real "
        "model on each), which may mix in emulated ones (cuda:0,emulated:laptop-8gb; the "
        "first listed is the run's device or profile); with --backend ray N replicas of the "
        "deployment, Ray's router placing the requests; "
        f"{KNOBS['devices'].range_text()} (default 1)",
    )
    group.add_argument(
        "--router",
        choices=ROUTERS,
        default=None,
        help="with --devices, where each window goes: pinned (a session stays on one device, "
        "sessions dealt by count) or least-loaded (the power of two choices on waiting "
        f"windows, Ray Serve's rule, the one Ray has); default {DEFAULT_ROUTER}",
    )
    group.add_argument(
        "--profile",
        default="laptop-8gb",
        help="profile name or JSON path (emulated backend; default laptop-8gb)",
    )


def _add_model_flags(group: Any) -> None:
    """The model: its precision, input size and fit, runtime, weights and options."""
    group.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="default: fp16 on emulated/CUDA; on CPU int8 (ONNX Runtime) where the CPU has "
        "VNNI, else fp32. int8: the ONNX export statically quantized (CPU, onnxruntime); "
        "bf16 on CPU: torch, where the CPU has AVX512-BF16 or AMX",
    )
    group.add_argument(
        "--resolution",
        type=resolution,
        default=DEFAULT_RESOLUTION,
        metavar="WxH",
        help="the model's input size in pixels; frames are scaled to it "
        f"(default {format_resolution(DEFAULT_RESOLUTION)})",
    )
    group.add_argument(
        "--fit",
        choices=FITS,
        default=FITS[0],
        help="a source of another aspect (portrait, 4:3): letterbox keeps its shape on "
        "black bars, stretch fills the frame (default %(default)s)",
    )
    group.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default=None,
        help="what runs the real model: torch, or its ONNX export in onnxruntime; default: "
        "onnxruntime on cpu when installed (measured faster there) and for int8, torch on "
        "cuda, for bf16 and with --compile, --cuda-graphs or --channels-last",
    )
    group.add_argument(
        "--checkpoint",
        help="BlurBall checkpoint to load (torch backend), or an .onnx file (onnxruntime); "
        "default: the demo weights trained on the synthetic scene (docs/DEMO_WEIGHTS.md)",
    )
    group.add_argument(
        "--no-weights",
        action="store_true",
        help="run the model with its untrained initial weights: timing only, no detections",
    )
    group.add_argument(
        "--postprocess",
        choices=POSTPROCESSING,
        default=POSTPROCESSING[0],
        help="how a heatmap blob becomes a detection: weighted (default: blur angle and "
        "length from the probability-weighted blob, positions on pixel centres; measured "
        "closer to the drawn angle) or reference (the authors' code exactly: binary-mask "
        "moments, 0 degrees where mu20 = mu02, PCA length, x * scale), to compare with "
        "the authors' numbers (docs/USER_GUIDE.md)",
    )
    group.add_argument("--channels-last", action="store_true")
    group.add_argument("--no-cudnn-benchmark", action="store_true")
    group.add_argument(
        "--lean",
        action="store_true",
        help="skip stage-4 outputs the head never uses (same result, less compute)",
    )
    group.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model (off by default: measured on a 2-core CPU it is 1.5x "
        "faster per batch but compiling takes about 100 s before the run starts; "
        "docs/BENCHMARKS.md)",
    )
    group.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="capture each batch size once as a CUDA graph and replay it (CUDA devices only; "
        "off by default until measured to win on your GPU: benchmarks/gpu_check.sh)",
    )


def _add_output_flags(group: Any) -> None:
    """What the run writes, and the files that set it (a saved setting, an experiment)."""
    group.add_argument("--json", metavar="PATH|-", help="write the report as JSON ('-': stdout)")
    group.add_argument(
        "--record",
        metavar="DIR",
        help="record config, events, per-window timings and the timeline to a "
        "new folder (flushed every second; a failed write, e.g. a full disk, stops the "
        "recording at a whole line, not the run)",
    )
    group.add_argument("--quiet", action="store_true", help="no live status line")
    add_metrics_flag(group)
    group.add_argument(
        "--config",
        metavar="POLICY.json",
        help="run a setting saved by `plan --export` or the app (policy, its knobs, "
        "sessions, fps, precision, resolution, profile); a flag for one of those is "
        "refused, the others apply",
    )
    group.add_argument(
        "--experiment",
        metavar="NAME|PATH",
        help="play an experiment file (see `batchscope experiments`) and print its segments",
    )
    group.add_argument(
        "--csv", metavar="PATH", help="write the segment table as CSV (one row per segment)"
    )
    group.add_argument(
        "--report",
        metavar="OUT.html",
        help="write a self-contained HTML report (plots, segment table, config, events)",
    )


def config_from_args(args: argparse.Namespace) -> RunConfig:
    listed = parse_real_devices(args.devices)  # the real model on each real device listed
    # an emulated device 0 of a list beside a real one
    first_profile = None if listed is None else _take_device_list(args, listed)
    backend = args.backend or ("torch" if args.device else "emulated")
    # what runs a batch: in a serving engine's replica too, the real model with --device
    real = backend == "torch" or (backend in SERVING_ENGINES and args.device)
    runner = "torch" if real else "emulated"
    device = args.device or "cpu"
    on_cpu = "cpu" in (listed or ()) or (runner == "torch" and device == "cpu")
    model = runner == "torch" or listed is not None  # the real model runs somewhere
    if args.warmup < 0:
        raise ConfigError("warmup", args.warmup, "must be 0 or more seconds")
    ray_address = getattr(args, "ray_address", None)
    if ray_address and backend != "ray":
        raise ConfigError("ray_address", ray_address, "needs --backend ray")
    if args.checkpoint and not model:
        raise ConfigError("checkpoint", args.checkpoint, "needs the torch backend (--device)")
    if args.postprocess != POSTPROCESSING[0] and not model:
        raise ConfigError(
            "postprocess",
            args.postprocess,
            "needs the torch backend (--device): the emulated device gives no detections",
        )
    no_weights = getattr(args, "no_weights", False)
    if args.checkpoint and no_weights:
        raise ConfigError("no_weights", True, "give --checkpoint or --no-weights, not both")
    runtime = args.runtime or _runtime_for(args, runner, device)
    precision = args.precision or _precision_for(on_cpu, listed is None, runner, runtime)
    devices, profiles = (
        (len(listed), ()) if listed else _devices_of(args.devices, args.profile, backend)
    )
    router = getattr(args, "router", None)
    if router is not None and devices == 1:
        raise CliError("--router places windows on several devices: give --devices N too")
    knobs = {
        knob.name: getattr(args, knob.dest) for knob in KNOBS.values() if knob.name != "devices"
    }
    config = RunConfig(
        sources=tuple(args.sources),
        policy=args.policy,
        **knobs,
        devices=devices,
        profiles=profiles,
        device_list=tuple(listed or ()),
        stream_transport=args.stream_transport,
        backend=backend,
        device=device,
        profile=first_profile
        or ((profiles[0] if profiles else args.profile) if runner == "emulated" else None),
        ray_address=ray_address,
        router=router or DEFAULT_ROUTER,
        precision=precision,
        resolution=args.resolution,
        fit=getattr(args, "fit", FITS[0]),
        postprocess=args.postprocess,
        channels_last=args.channels_last,
        cudnn_benchmark=not args.no_cudnn_benchmark,
        checkpoint=UNTRAINED if no_weights else args.checkpoint,
        lean=args.lean,
        compile=args.compile,
        cuda_graphs=args.cuda_graphs,
        runtime=runtime,
        seed=args.seed,
        skip_bad_sources=args.skip_bad_sources,
        extra={"warmup_s": args.warmup},
    )
    if getattr(args, "config", None):
        return _with_setting(args, config)
    return config


def _take_device_list(args: argparse.Namespace, listed: list[str]) -> str | None:
    """A ``--devices`` list naming a real device runs in BatchScope's worker, its first
    device's kind the backend (``args.backend``: torch for a real one, else emulated): a
    real one is ``args.device``, an emulated one device 0's profile (returned; None for a
    real one). A flag that names another backend, device or profile is refused."""
    first_real = is_real_device(listed[0])
    want = "torch" if first_real else "emulated"
    if args.backend not in (None, want):
        raise ConfigError(
            "devices",
            args.devices,
            f"a list naming a real device is BatchScope's worker (--backend {want}, its "
            f"first device's kind); with --backend {args.backend} give a count",
        )
    if first_real and args.device not in (None, listed[0]):
        raise ConfigError(
            "device", args.device, f"--devices lists {listed[0]} first: give one of the two"
        )
    first_profile = None
    if not first_real:
        first_profile = listed[0][len(EMULATED) :]
        given = given_options(args.parser, getattr(args, "argv", ()))
        if "profile" in given and args.profile != first_profile:
            raise ConfigError(
                "profile",
                args.profile,
                f"--devices lists emulated:{first_profile} first: give one of the two",
            )
    args.backend = want
    args.device = listed[0] if first_real else args.device
    return first_profile


def _devices_of(text: str, profile: str, backend: str) -> tuple[int, tuple[str, ...]]:
    """``--devices N|LIST``: the count, and the profile of each device when a list names
    them (emulated devices in BatchScope's worker; a list of real devices is
    :func:`~batchscope.config.parse_real_devices`'s)."""
    text = str(text).strip()
    if text.isdigit():
        return KNOBS["devices"].check(int(text)), ()
    if backend != "emulated":
        raise ConfigError(
            "devices",
            text,
            "a list of profiles is emulated devices in BatchScope's worker; give a count "
            f"with --backend {backend}",
        )
    names = parse_devices(text, profile)
    return len(names), tuple(names)


def _with_setting(args: argparse.Namespace, config: RunConfig) -> RunConfig:
    """``config`` with the fields of the setting file ``--config``; a flag for one refused."""
    from batchscope.config import SETTING_FIELDS
    from batchscope.setting import load_setting

    given = given_options(args.parser, getattr(args, "argv", ()))
    clash = [flag for dest, flag in given.items() if dest in SETTING_FIELDS]
    if clash:
        raise CliError(
            f"--config {args.config}: {clash[0]} conflicts with the setting file, which "
            "sets it; leave the flag out (or edit the file)"
        )
    return load_setting(args.config, base=config)


def _runtime_for(args: argparse.Namespace, backend: str, device: str) -> str:
    """The runtime when ``--runtime`` is not given: what the other flags imply, else the
    device's default (``config.default_runtime``)."""
    if backend != "torch" or args.compile or args.cuda_graphs or args.channels_last:
        return "torch"
    if (args.checkpoint or "").endswith(".onnx"):
        return "onnxruntime"
    return default_runtime(device, args.precision)


def _precision_for(on_cpu: bool, one_device: bool, runner: str, runtime: str) -> str:
    """The precision when ``--precision`` is not given: fp16 on an emulated device or a GPU;
    on the CPU the fastest measured path's (``config.default_cpu_precision``: int8 where
    the CPU has VNNI) when ONNX Runtime runs the model there, else fp32."""
    if not on_cpu:
        return "fp16"
    if one_device and runner == "torch" and runtime == "onnxruntime":
        return default_cpu_precision()
    return "fp32"


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


@contextlib.contextmanager
def decoding_progress(engine: Engine, every_s: float = 0.5) -> Iterator[None]:
    """While the block runs, say on a terminal's stderr which file decodes and how far
    (``Engine.progress``), one line rewritten in place; nothing when stderr is a file."""
    if not sys.stderr.isatty():
        yield
        return
    done = threading.Event()
    shown = [False]

    def show() -> None:
        while not done.wait(every_s):
            if engine.progress:
                print(f"\rbatchscope: {engine.progress}  ", end="", file=sys.stderr, flush=True)
                shown[0] = True

    thread = threading.Thread(target=show, name="batchscope-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(1.0)
        if shown[0]:
            print(file=sys.stderr)


def stop_engine(engine: Engine) -> None:
    """Stop every thread; say on stderr which did not end within the stop's timeout (a
    real model's batch cannot be cut short), rather than hang or pretend."""
    alive = engine.stop()
    if alive:
        print(
            f"batchscope: warning: still running after the stop: {', '.join(alive)} "
            "(it ends with its batch)",
            file=sys.stderr,
        )


def started_engine(config: RunConfig, message: str | None, run_s: float) -> Engine:
    """An engine opened and started on ``config`` (``message`` on stderr first, if any),
    for a run of ``run_s`` seconds: a clip shorter than that says it loops."""
    engine = Engine(config, run_s=run_s)
    engine.on_progress = lambda m: print(f"batchscope: {m}", file=sys.stderr, flush=True)
    if message:
        print(f"batchscope: {message}", file=sys.stderr)
    with decoding_progress(engine):
        engine.open()
    if config.skip_bad_sources and all(s.error for s in engine.sources):
        engine.stop()
        raise CliError("no source could be opened")
    for slot in engine.sources:  # a file cut short, looped or still: say so before the figures
        if slot.source is not None and slot.source.note:
            print(
                f"batchscope: note: {mask_credentials(slot.spec)}: {slot.source.note}",
                file=sys.stderr,
            )
    engine.start()
    engine.subscribe(_say_error)
    return engine


def _say_error(ev: Event) -> None:
    """An error or OOM on stderr the moment the engine has it (from the thread that
    raised it: a recording's full disk, a failed source), not only in the summary."""
    if ev.kind in ("error", "oom"):
        clear = "\r\033[K" if sys.stderr.isatty() else ""  # over the status line
        print(f"{clear}batchscope: {ev.kind} at {ev.t:.1f} s: {ev.message}", file=sys.stderr)
        sys.stderr.flush()


def check_outputs(args: argparse.Namespace) -> None:
    """Every path the run will write, before it starts (CliError/RecordingError: one line)."""
    check_file("--json", args.json)
    check_file("--csv", args.csv)
    check_file("--report", args.report)
    if args.record:
        check_folder(args.record)


def interrupted_note(report: dict[str, Any], recorder: Recorder | None) -> None:
    """Mark the report (and the recording's report.json) as ended by Ctrl-C."""
    report["interrupted"] = True
    if recorder is not None:
        recorder.mark(interrupted=True)
    print("batchscope: interrupted: reporting what was measured", file=sys.stderr)


def finish(
    args: argparse.Namespace,
    report: dict[str, Any],
    recorder: Recorder | None,
    out_stream: Any,
    buses: dict[int, BusRecords] | None = None,
) -> int:
    """Write the run's outputs, each one that can be, and say what could not: the exit
    status (0; EXIT_NOT_WRITTEN; EXIT_INTERRUPTED, which wins)."""
    if recorder is not None:
        print(f"recorded to {recorder.folder}", file=out_stream)
    failed = write_each(
        [
            lambda: write_json(report, args.json),
            lambda: write_csv(report, args.csv),
            lambda: write_report(report, args.report, out_stream, buses),
        ]
    )
    if recorder is not None:
        failed[:0] = recorder.failures
    for line in failed:
        print(f"batchscope: error: {line}", file=sys.stderr)
    if report.get("interrupted"):
        return EXIT_INTERRUPTED
    return EXIT_NOT_WRITTEN if failed else 0


def warn_idle_drop(engine: Engine, configs: Sequence[RunConfig]) -> None:
    """A warning line on stderr for each drop limit in ``configs`` (the run's, an
    experiment's steps') that cannot take effect at its fps (``drop_after_warning``):
    the run goes on, with a knob that does nothing."""
    rates = [s.source.fps for s in engine.sources if s.source is not None]
    lines = (drop_after_warning(c.drop_after_ms, c.fps, rates) for c in configs)
    for line in dict.fromkeys(filter(None, lines)):
        print(f"batchscope: warning: {line}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    with metrics_served(args):  # --metrics-port: taken before the run (in use: exit 2)
        if args.experiment:
            return cmd_run_experiment(args)
        return cmd_run_live(args)


def cmd_run_live(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    check_outputs(args)
    if config.backend == "torch" or config.device_list:  # the real model on the CPU too
        configure_threads()
    out_stream = sys.stderr if args.json == "-" else sys.stdout
    engine = started_engine(
        config,
        None
        if args.quiet
        else f"opening {len(config.sources) or 'sample'} source(s) and {config.device_label}…",
        args.warmup + config.duration_s,
    )
    serve_metrics_of(args, engine)
    warn_idle_drop(engine, [config])
    interrupted = False
    try:
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
        except KeyboardInterrupt:  # Ctrl-C: what was measured is still the run's report
            interrupted = True
        if not args.quiet and sys.stderr.isatty():
            print(file=sys.stderr)
        report = engine.report()
        recorder = engine.recorder
        if interrupted:
            interrupted_note(report, recorder)
        engine.stop_recording()
    finally:
        stop_engine(engine)
    print(
        f"{report['device_label']} · {report['weights']} · {config.policy_phrase()}",
        file=out_stream,
    )
    print(format_table([report]), file=out_stream)
    if "devices" in report:  # several devices: one line each
        print(format_devices([report]), file=out_stream)
    print(file=out_stream)
    print(format_sessions(report), file=out_stream)
    print_host(report, out_stream)
    for ev in report["events"]:
        if ev["kind"] in ("error", "oom"):
            print(f"  event at {ev['t']:.1f} s [{ev['kind']}] {ev['message']}", file=out_stream)
    return finish(args, report, recorder, out_stream)


def cmd_run_experiment(args: argparse.Namespace) -> int:
    """Play the experiment on the live worker; no warm-up (each segment settles 1 s)."""
    refuse_config_flags(args, EXPERIMENT_FLAGS)
    experiment = load_experiment(args.experiment)  # every error before anything starts
    check_outputs(args)
    config = first_config(experiment)
    if config.backend == "torch" or config.device_list:  # the real model on the CPU too
        configure_threads()
    out_stream = sys.stderr if args.json == "-" else sys.stdout
    n = len(experiment.steps)
    news: list[str] = []  # step lines from the player's thread, printed by this one

    def on_step(index: int, error: str | None) -> None:
        step = experiment.steps[index]
        caption = step.caption or (experiment.caption if index == 0 else "")
        what = f"not applied: {error}" if error else caption
        news.append(f"step {index + 1}/{n} at {step.at:g} s" + (f": {what}" if what else ""))

    engine = started_engine(
        config,
        None
        if args.quiet
        else f"experiment {experiment.name} ({experiment.duration:g} s, {n} steps) "
        f"on {config.device_label}…",
        experiment.duration,
    )
    serve_metrics_of(args, engine)
    warn_idle_drop(engine, experiment.configs)
    player = ExperimentPlayer(engine, experiment, on_step=on_step)
    buses: dict[int, BusRecords] = {}  # each segment's last seconds, for the report's bus view
    interrupted = False
    try:
        try:
            if args.record:
                engine.start_recording(args.record)
            player.start()
            while not player.finished.wait(1.0) and player.alive:
                if args.report:
                    engine.keep_buses(buses)
                if args.quiet:
                    continue
                tty = sys.stderr.isatty()
                while news:
                    print(("\r\033[K" if tty else "") + news.pop(0), file=sys.stderr)
                segment = engine.report()["segments"][-1]
                t = player.elapsed()
                line = f"step {player.steps_done}/{n} " + (
                    status_line(segment, t, experiment.duration)
                    if not too_short(segment)
                    else f"[{t:5.1f}/{experiment.duration:.0f} s] settling…".ljust(100)
                )
                print(
                    ("\r" if tty else "") + line,
                    end="" if tty else "\n",
                    file=sys.stderr,
                    flush=True,
                )
        except KeyboardInterrupt:  # Ctrl-C: the segments so far are still the report
            interrupted = True
        if not args.quiet and sys.stderr.isatty():
            print(file=sys.stderr)
        if args.report:
            engine.keep_buses(buses)
        report = engine.report()
        recorder = engine.recorder
        if interrupted:
            interrupted_note(report, recorder)
        engine.stop_recording()
    finally:
        player.stop()
        stop_engine(engine)
    report = add_predictions(report)
    report["experiment"] = experiment_block(experiment)
    print_experiment_report(report, out_stream)
    return finish(args, report, recorder, out_stream, buses)
