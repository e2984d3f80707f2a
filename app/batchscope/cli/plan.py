"""`batchscope plan`: how many sessions fit a latency budget, with which policy and knobs.

The search is :func:`batchscope.sim.planner.plan` (its module doc has the grid, the
session-count search and the recommendation rule). This command prints the table
(one row per policy), a progress bar on stderr (one line per policy when stderr is
not a terminal), and on request the JSON (``--json``), a plot (``--plot``), the
recommended setting for deployment (``--export DIR``: policy.json, Triton's config.pbtxt
and model repository, Ray Serve's serve_config.yaml) and a 10 s check of it on the live
emulated worker (``--verify``). ``--runtime`` picks the profile's curve of that runtime.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from batchscope.cli.args import (
    CliError,
    add_host_jitter_flag,
    add_knob,
    choice_list,
    knob_type,
    number,
    resolution,
    seed_count,
    write_json,
)
from batchscope.cli.outputs import check_file
from batchscope.config import (
    DEFAULT_RESOLUTION,
    KNOBS,
    POLICIES,
    PRECISIONS,
    RUNTIMES,
    ConfigError,
    format_resolution,
)
from batchscope.profiles.profile import DeviceProfile, load_profile
from batchscope.setting import (
    MODEL_FILE,
    export_precision,
    precision_note,
    save_setting,
    triton_config,
)
from batchscope.sim.host_jitter import load_host_jitter
from batchscope.sim.planner import (
    DEFAULT_DURATION_S,
    DEFAULT_MIN_FPS_RATIO,
    DEFAULT_SEEDS,
    ENGINE_NAMES,
    VERIFY_S,
    Budget,
    Plan,
    format_verify,
    plan,
    verify_json,
)
from batchscope.sim.planner.devices import (
    DEVICES_MAX,
    DevicesPlan,
    fewest_devices,
    sessions_for_devices,
)
from batchscope.sim.seeds import MAX_SEEDS


def add_plan_command(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="how many sessions fit a latency budget, with which policy (simulated)",
        description="Search every policy's knobs and the session count in the simulator "
        "for the most sessions at which every session gets at least min-fps-ratio × fps "
        "and the overall p99 stays within --p99-ms, for every phase seed; recommend one "
        "setting (most sessions, then a lower p99 beyond the seeds' spread, then the "
        "simpler policy).",
    )
    add_host_jitter_flag(p)
    p.add_argument(
        "--profile",
        default="laptop-8gb",
        help="profile name or JSON path (default laptop-8gb; see `batchscope profiles`)",
    )
    p.add_argument("--precision", choices=PRECISIONS, default="fp16")
    p.add_argument("--resolution", type=resolution, default=DEFAULT_RESOLUTION, metavar="WxH")
    p.add_argument(
        "--runtime",
        choices=RUNTIMES,
        help="plan on the profile's curve measured on this runtime (`sweep --runtime`); the "
        "export serves with it (default: torch's curve where the profile has one, else the "
        "runtime it was measured on)",
    )
    _add_budget_flags(p.add_argument_group("the budget"))
    _add_search_flags(p.add_argument_group("the search"))
    _add_output_flags(p.add_argument_group("outputs and a live check"))
    _add_device_flags(p.add_argument_group("several devices"))
    p.set_defaults(handler=cmd_plan, parser=p)


def _add_budget_flags(group: Any) -> None:
    """What every session must get: its frame rate, the share of it, the p99."""
    add_knob(group, "fps", help="frames/s each session sends (default %(default)g)")
    group.add_argument(
        "--p99-ms", type=_positive_ms, required=True, metavar="MS", help="p99 latency budget"
    )
    group.add_argument(
        "--min-fps-ratio",
        type=_ratio,
        default=DEFAULT_MIN_FPS_RATIO,
        metavar="R",
        help="share of --fps every session must get, in (0, 1] (default %(default)g)",
    )


def _add_search_flags(group: Any) -> None:
    """What is searched: the policies, the session counts, the runs and seeds."""
    group.add_argument(
        "--policies",
        type=choice_list(POLICIES, "policy"),
        default=list(POLICIES),
        metavar="P[,P…]",
        help=f"policies to search (default all: {', '.join(POLICIES)})",
    )
    sessions = KNOBS["sessions"]
    group.add_argument(
        "--max-sessions",
        type=knob_type("sessions"),
        default=int(sessions.hi),
        metavar="N",
        help=f"largest session count considered ({sessions.range_text()}; default %(default)s)",
    )
    add_knob(
        group,
        "duration_s",
        default=DEFAULT_DURATION_S,
        metavar="S",
        help="simulated seconds per run (default %(default)g)",
    )
    group.add_argument(
        "--seeds",
        type=seed_count,
        default=DEFAULT_SEEDS,
        metavar="N",
        help=f"phase draws each candidate must pass (default %(default)s, at most {MAX_SEEDS})",
    )


def _add_output_flags(group: Any) -> None:
    """What the plan writes, and the live run that checks it."""
    group.add_argument("--json", metavar="PATH|-", help="write the plan as JSON ('-': stdout)")
    group.add_argument("--plot", metavar="PNG", help="draw slowest fps and p99 vs sessions")
    group.add_argument(
        "--export",
        metavar="DIR",
        help="write the recommendation as policy.json (`run --config`), Triton's config.pbtxt "
        "(for the ONNX export it names; a CPU instance for a profile measured on the CPU), "
        "a Triton model repository (triton/: the ONNX export on the CPU for a CPU profile, "
        "else the profile's curve) and a Ray Serve config (serve_config.yaml)",
    )
    group.add_argument(
        "--verify",
        action="store_true",
        help=f"serve the recommendation live on the emulated curve for {VERIFY_S:g} s and "
        "print planned vs served",
    )
    group.add_argument(
        "--on",
        choices=tuple(ENGINE_NAMES),
        default="inprocess",
        help="what serves it with --verify: BatchScope's own worker (inprocess, the default) "
        "or a real Ray Serve started on loopback (ray; needs ray[serve]), or a real Triton "
        "server started on loopback (triton; set up by ./batchscope.sh triton)",
    )


def _add_device_flags(group: Any) -> None:
    """Answers for several devices of the profile."""
    group.add_argument(
        "--devices",
        type=_device_count,
        metavar="N",
        help="answer for N devices of the profile: the most sessions they carry with the "
        "recommended setting (pinned: N × one device's; least-loaded may carry more)",
    )
    group.add_argument(
        "--sessions",
        type=knob_type("sessions"),
        metavar="S",
        help="answer the fewest devices of the profile that carry S sessions within the "
        "budget for every seed, and the router that does it",
    )
    group.add_argument(
        "--devices-max",
        type=_device_count,
        default=DEVICES_MAX,
        metavar="N",
        help="with --sessions: the most devices considered (default %(default)s)",
    )


def _device_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= DEVICES_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number of devices, 1 to {DEVICES_MAX}")
    return value


def _positive_ms(text: str) -> float:
    value = number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number greater than 0 ms (got {text!r})")
    return value


def _ratio(text: str) -> float:
    value = number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (got {text!r})")
    return value


def _writable_dir(path: str) -> Path:
    """``path`` as a folder that exists and can be written, or CliError naming it."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--export {path}: cannot make the folder ({exc.strerror})") from None
    if not folder.is_dir():
        raise CliError(f"--export {path}: not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CliError(f"--export {path}: the folder cannot be written")
    return folder


class ProgressBar:
    """Progress on stderr: a bar redrawn in place on a terminal, else one line per policy."""

    def __init__(self, stream: TextIO, doing: str = "planning", did: str = "planned") -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.perf_counter()
        self.doing, self.did = doing, did

    def __call__(self, done: int, total: int, policy: str) -> None:
        elapsed = time.perf_counter() - self.started
        if self.tty:
            width = 24
            filled = round(width * done / total)
            bar = "█" * filled + "·" * (width - filled)
            end = "\n" if done == total else ""
            self.stream.write(
                f"\r{self.doing} [{bar}] {done}/{total} policies ({policy} done, {elapsed:.1f} s)"
                + end
            )
        else:
            self.stream.write(f"{self.did} {policy} ({done}/{total}, {elapsed:.1f} s)\n")
        self.stream.flush()


def format_plan(result: Plan) -> str:
    """The plan as a table, one row per policy, and the recommendation."""
    b = result.budget
    head = (
        f"{'policy':<12}{'knobs':<24}{'sessions':>9}{'slowest fps':>13}{'(median)':>9}"
        f"{'p99 ms':>8}{'mean fps':>9}{'thru w/s':>9}{'bound':>6}{'runs':>6}"
    )
    lines = [
        f"plan: {result.profile} · {result.precision} {format_resolution(result.resolution)} "
        f"{result.runtime} · "
        f"budget: every session ≥ {b.min_fps:g} fps ({b.min_fps_ratio:g} × {b.fps:g}), "
        f"p99 ≤ {b.p99_ms:g} ms · {result.seeds} phase seeds × {result.duration_s:g} s",
        head,
        "-" * len(head),
    ]
    for p in result.policies:
        a = p.at_max
        sessions = str(p.max_sessions) if p.max_sessions else "0 (closest: 1)"
        lines.append(
            f"{p.policy:<12}{_knobs_text(p.params):<24}{sessions:>9}"
            f"{a.min_fps_worst:>13.1f}{a.min_fps_median:>9.1f}{a.p99_worst:>8.1f}"
            f"{a.mean_fps:>9.1f}{a.overall.get('throughput_wps', 0.0):>9.1f}{p.bound:>6}"
            f"{p.simulations:>6}"
        )
    rec = result.recommended
    if rec.max_sessions:
        lines.append(
            f"recommended: {rec.policy} ({_knobs_text(rec.params)}) for {rec.max_sessions} "
            "sessions (rule: most sessions, then a lower p99 beyond the seeds' spread, "
            "then the simpler policy)"
        )
    else:
        lines.append(
            "no policy meets this budget at any session count; closest: "
            f"{rec.policy} ({_knobs_text(rec.params)}) at 1 session "
            f"(slowest {rec.at_max.min_fps_worst:.1f} fps, p99 {rec.at_max.p99_worst:.1f} ms)"
        )
    lines.append(
        "slowest fps: the slowest session's fps on the worst seed (median over seeds); "
        "p99: the worst seed's; bound: no count above it can fit"
    )
    return "\n".join(lines)


def format_devices_plan(answer: DevicesPlan, result: Plan, asked: int | None) -> str:
    """The answer on several devices, with what was tried."""
    rec = result.recommended
    setting = f"{rec.policy} ({_knobs_text(rec.params)})"
    if asked is not None:
        head = (
            f"fewest devices for {asked} sessions: {answer.devices} × {result.profile}, router "
            f"{answer.router}, each {setting} (one device carries {answer.per_device})"
        )
    else:
        head = (
            f"{answer.devices} × {result.profile}: {answer.sessions} sessions, router "
            f"{answer.router}, each {setting} (one device carries {answer.per_device})"
        )
    tried = ", ".join(f"{s} on {d} {r} {'fits' if ok else 'no'}" for d, r, s, ok in answer.tried)
    return (
        f"{head}\n  there: slowest session {answer.min_fps_worst:.1f} fps, p99 "
        f"{answer.p99_worst:.1f} ms (worst of {result.seeds} seeds); tried: {tried}"
    )


def _knobs_text(params: dict[str, Any]) -> str:
    names = {"max_batch": "max", "max_delay_ms": "delay", "batch": "batch", "slo_ms": "slo"}
    parts = []
    for k, v in params.items():
        if v is None:
            parts.append(f"{names[k]} none")
        else:
            unit = " ms" if k.endswith("_ms") else ""
            parts.append(f"{names[k]} {v:g}{unit}")
    return ", ".join(parts) or "-"


#: The figures ``plan --verify`` compares, planned vs served: (JSON name, table name, how
#: to read it from a report's ``overall``).
def cmd_plan(args: argparse.Namespace) -> int:
    _refuse_conflicts(args)
    budget = Budget(fps=args.fps, p99_ms=args.p99_ms, min_fps_ratio=args.min_fps_ratio)
    profile = load_profile(args.profile)
    runtime = args.runtime or profile.runtime_for(args.precision, args.resolution)
    curve = profile.curve(args.precision, args.resolution, runtime)  # ProfileError: what it has
    check_file("--json", args.json)  # every output before the search's seconds
    check_file("--plot", args.plot)
    export = _writable_dir(args.export) if args.export else None
    if curve.noisy:  # planned all the same: the user decides
        print(
            f"batchscope: warning: {profile.name} {curve.label}: its sweep flagged it, "
            f"{curve.noisy}; the plan is only as sound as this curve",
            file=sys.stderr,
        )
    out = sys.stderr if args.json == "-" else sys.stdout
    result = plan(
        profile,
        args.precision,
        args.resolution,
        budget,
        policies=args.policies,
        max_sessions=args.max_sessions,
        duration_s=args.duration,
        seeds=args.seeds,
        progress=ProgressBar(sys.stderr),
        jitter=load_host_jitter(args.host_jitter),
        runtime=runtime,
    )
    print(format_plan(result), file=out)
    data = result.to_json()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    across = _across_devices(args, result, profile, data, cores, out)
    if args.plot:
        _plot(args, result, profile, cores, out)
    if export is not None:
        _export(args, export, result, profile, out)
    if args.verify:
        data["verify"] = _verify(args, result, across, out)
    write_json(data, args.json)
    return 0


def _refuse_conflicts(args: argparse.Namespace) -> None:
    """Flags that ask two things at once, or that need another flag: refused in one line
    before any work."""
    if args.on != "inprocess" and not args.verify:
        raise ConfigError("on", args.on, "says what serves --verify: give --verify too")
    if args.devices is not None and args.sessions is not None:
        raise CliError(
            "--devices N asks how many sessions, --sessions S how many devices: give one"
        )
    if (args.devices or args.sessions) and (args.export or args.plot):
        raise CliError(
            "--export and --plot are for one device's plan; leave out --devices and "
            "--sessions for them"
        )
    if args.verify and args.sessions:
        raise CliError("--verify serves N devices' answer: give --devices N, not --sessions")
    if args.verify and (args.devices or 1) > 1 and args.on == "triton":
        raise CliError(
            "--verify on several devices: BatchScope's worker (--on inprocess) or Ray Serve "
            "replicas (--on ray); BatchScope's Triton serves one model instance"
        )


def _across_devices(
    args: argparse.Namespace,
    result: Plan,
    profile: DeviceProfile,
    data: dict[str, Any],
    cores: int,
    out: TextIO,
) -> DevicesPlan | None:
    """``--devices N`` / ``--sessions S``: the answer across devices, printed and put in
    ``data``'s recommendation (None: not asked, or no count of devices carries S)."""
    across = None
    if args.devices is not None:
        across = sessions_for_devices(result, profile, args.devices, workers=cores)
    elif args.sessions is not None:
        across = fewest_devices(result, profile, args.sessions, args.devices_max, workers=cores)
        if across is None:
            print(
                f"no count of devices up to {args.devices_max} carries {args.sessions} sessions "
                "within the budget",
                file=out,
            )
            data["recommended"].update(devices=None, router=None)
    if across is not None:
        print(format_devices_plan(across, result, args.sessions), file=out)
        data["recommended"].update(across.to_json())
    return across


def _plot(
    args: argparse.Namespace, result: Plan, profile: DeviceProfile, cores: int, out: TextIO
) -> None:
    """``--plot PNG``: every policy's curves, played in ``cores`` forked workers."""
    from batchscope.render.plan_plot import save_plan_plot  # Qt, only when asked
    from batchscope.sim.planner import series

    try:
        curves = series(
            result,
            profile,
            limit=args.max_sessions,
            workers=cores,
            progress=ProgressBar(sys.stderr, "plotting", "plotted"),
        )
        save_plan_plot(result, curves, args.plot)
    except OSError as exc:
        raise CliError(f"--plot {exc}") from None
    print(f"plot: {args.plot}", file=out)


def _export(
    args: argparse.Namespace, export: Path, result: Plan, profile: DeviceProfile, out: TextIO
) -> None:
    """``--export DIR``: the recommendation as policy.json, config.pbtxt, a Triton model
    repository and a Ray Serve config; what each serves, and what to add."""
    from batchscope.engine.serving.serve_config import SERVE_CONFIG_FILE, serve_config_yaml
    from batchscope.engine.serving.triton_backend import export_runner, write_repository

    config = result.config()  # its profile as `run --config` finds it again (a file's path)
    rec = result.recommended
    cap = rec.at_max.settled_cap
    planned = {"max_sessions": rec.max_sessions, "at_max": rec.at_max.to_json()}
    triton = triton_config(config, cap, cpu=profile.on_cpu)
    runner = export_runner(config, profile)
    try:
        save_setting(config, export / "policy.json", planned)
        (export / "config.pbtxt").write_text(triton)
        model = write_repository(export / "triton", config, None, cap, runner)
        (export / SERVE_CONFIG_FILE).write_text(serve_config_yaml(config, profile, cap))
    except OSError as exc:
        raise CliError(f"--export {args.export}: cannot write ({exc.strerror})") from None
    print(
        f"exported: {export / 'policy.json'}, {export / 'config.pbtxt'}, "
        f"{export / SERVE_CONFIG_FILE} (Ray Serve)",
        file=out,
    )
    print(f"Triton model repository (Python backend, CPU): {export / 'triton'}", file=out)
    print(f"  it serves {runner.says}", file=out)
    if runner.name == "onnxruntime":
        precision = export_precision(config.precision, cpu=True)
        print(
            f"  add the model with: batchscope export-onnx --out "
            f"{model / '1' / MODEL_FILE} --precision {precision} --resolution "
            f"{format_resolution(config.resolution)}",
            file=out,
        )
    note = precision_note(config.precision, profile.on_cpu)
    if note:
        print(f"note: {note}", file=out)


def _verify(
    args: argparse.Namespace, result: Plan, across: DevicesPlan | None, out: TextIO
) -> dict[str, Any]:
    """``--verify``: the recommendation served live, planned beside served printed; the
    plan JSON's ``verify`` object."""
    from batchscope.sim.planner import verify

    if across is not None and across.devices > 1:
        # Ray's router is least-loaded, whatever the plan's: it is planned so too
        router = "least-loaded" if args.on == "ray" else across.router
        check = verify(
            result,
            VERIFY_S,
            on=args.on,
            devices=across.devices,
            sessions=across.sessions,
            router=router,
            # the answer's own figures where it is served as planned
            promised=(
                (across.min_fps_worst, across.p99_worst) if router == across.router else None
            ),
        )
    else:
        check = verify(result, VERIFY_S, on=args.on)
    print(format_verify(check), file=out)
    return verify_json(check)
