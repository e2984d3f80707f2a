"""`batchscope profiles` (list device profiles) and `batchscope sweep` (measure one)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from batchscope.cli.args import CliError, choice_list, configure_threads, csv, knob_type, resolution
from batchscope.cli.outputs import check_file
from batchscope.config import DEFAULT_RESOLUTION, PRECISIONS, RUNTIMES, format_resolution
from batchscope.device.checks import check_device
from batchscope.paths import user_profiles_dir
from batchscope.profiles.curve_sweep import (
    DEFAULT_BATCHES,
    SweepPlan,
    build_profile,
    markdown_table,
    run_sweep,
)
from batchscope.profiles.machine import PeakMemory, default_name, device_facts
from batchscope.profiles.profile import MIG_SLICES, DeviceProfile, list_profiles


def add_profile_commands(sub: Any) -> None:
    p = sub.add_parser("profiles", help="list device profiles (built-in and user)")
    p.set_defaults(handler=cmd_profiles)
    add_sweep_command(sub)


def describe(profile: DeviceProfile) -> list[str]:
    """One line per curve: ms per batch to 0.01 ms, the precision `sweep`'s table prints."""
    lines = []
    for c in profile.curves:
        pts = "  ".join(f"b{p.batch} {p.ms:.2f} ms" for p in c.measured)
        failed = [p for p in c.points if p.ms is None]
        lines.append(
            f"    {c.label}:  {pts}"
            + (f"  ({len(failed)} failed point(s))" if failed else "")
            + ("  (flagged noisy)" if c.noisy else "")
        )
    return lines


def cmd_profiles(args: argparse.Namespace) -> int:
    for kind, item in list_profiles():
        if isinstance(item, DeviceProfile):
            mem = f", {item.memory_total_mb:g} MB" if item.memory_total_mb else ""
            print(f"{item.name}  [{kind}]  {item.device}{mem}  ({item.path})")
            print("\n".join(describe(item)))
        else:
            print(f"[{kind}] unusable: {item}")
    sizes = ", ".join(f"NAME@{k}g" for k in MIG_SLICES)
    print(
        f"\nMIG slices of a GPU profile (e.g. server-24gb@1g): {sizes}; scaled from the"
        " whole curve by an assumption, not measured (docs/USER_GUIDE.md, 'MIG slices')"
    )
    return 0


# -- sweep ----------------------------------------------------------------------------


def add_sweep_command(sub: Any) -> None:
    p = sub.add_parser(
        "sweep",
        help="measure BlurBall's batch curve on a device and save it as a profile",
        description="Times the bare BlurBall model at each precision × resolution × batch "
        "size the study's way and writes a device profile that `simulate` and "
        "`run --backend emulated` accept.",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    p.add_argument(
        "--precision",
        type=choice_list(PRECISIONS, "precision"),
        default=None,
        metavar="P[,P…]",
        help="default: fp16,fp32 on CUDA, fp32 on CPU",
    )
    p.add_argument(
        "--resolution",
        type=csv(resolution),
        default=[DEFAULT_RESOLUTION],
        metavar="WxH[,…]",
        help=f"default {format_resolution(DEFAULT_RESOLUTION)}",
    )
    p.add_argument(
        "--batch",
        type=csv(knob_type("batch")),  # a batch size is the batch knob's kind of value
        default=list(DEFAULT_BATCHES),
        metavar="N[,N…]",
        help=f"batch sizes (default {','.join(map(str, DEFAULT_BATCHES))})",
    )
    p.add_argument("--warmup", type=int, default=10, help="untimed runs per point (default 10)")
    p.add_argument("--repeat", type=int, default=30, help="timed runs per round (default 30)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per point (default 3)")
    p.add_argument(
        "--runtime",
        type=choice_list(RUNTIMES, "runtime"),
        default=["torch"],
        metavar="R[,R…]",
        help="what runs the model: torch, onnxruntime (its ONNX export), or both, each "
        "with its own curves (default torch)",
    )
    p.add_argument(
        "--curves",
        type=csv(str),
        default=None,
        metavar="R:P[,…]",
        help="only these runtime:precision curves (e.g. onnxruntime:fp32,onnxruntime:int8,"
        "torch:bf16: the CPU's three side by side); default every runtime with every "
        "precision it runs",
    )
    p.add_argument("--channels-last", action="store_true")
    p.add_argument(
        "--lean",
        action="store_true",
        help="skip stage-4 outputs the head never uses (same result, less compute)",
    )
    p.add_argument("--name", help="profile name (default: from the device's name)")
    p.add_argument(
        "--out",
        metavar="PROFILE.json",
        help="where to write (default: the user profile folder, NAME.json, so "
        "`batchscope profiles` lists it)",
    )
    p.set_defaults(handler=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    on_cuda = args.device.startswith("cuda")
    curves = [tuple(c.split(":", 1)) for c in args.curves or []]
    if any(len(c) != 2 for c in curves):
        raise CliError("--curves: give runtime:precision pairs, e.g. onnxruntime:int8")
    precisions = args.precision or (
        list(dict.fromkeys(p for _, p in curves)) or (["fp16", "fp32"] if on_cuda else ["fp32"])
    )
    plan = SweepPlan(
        device=args.device,
        precisions=tuple(precisions),
        resolutions=tuple(args.resolution),
        batches=tuple(args.batch),
        warmup=args.warmup,
        repeat=args.repeat,
        rounds=args.rounds,
        channels_last=args.channels_last,
        lean=args.lean,
        runtimes=tuple(
            args.runtime
            if not curves or "--runtime" in args.argv
            else dict.fromkeys(r for r, _ in curves)
        ),
        curves=tuple((r, p) for r, p in curves),
    )
    device = check_device(plan.device)  # BackendError, one line, before any work
    configure_threads()
    label, total_mb, facts = device_facts(args.device)
    name = args.name or default_name(label)
    out = Path(args.out) if args.out else user_profiles_dir() / f"{name}.json"
    check_file("--out", str(out), make_folder=True)  # before the sweep's minutes

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    progress(f"sweep: {label} · {len(plan.points)} points · {plan.method()}")
    curves = run_sweep(plan, progress)
    profile = build_profile(plan, name, curves, label, total_mb, facts, PeakMemory(device).metric)
    print(markdown_table(profile))  # first: a failed save must not lose what was measured
    for curve in profile.curves:
        if curve.noisy:
            print(
                f"batchscope: warning: {curve.label}: {curve.noisy}; measure it again on a "
                "quieter machine (the profile keeps the flag, and plan warns on it)",
                file=sys.stderr,
            )
    try:
        path = profile.save(out)
    except OSError as exc:
        raise CliError(f"{out}: cannot write the profile ({exc.strerror})") from None
    print(f"\nwrote {path} (profile {name!r}; peak memory: {profile.meta['peak_mb_metric']})")
    return 0
