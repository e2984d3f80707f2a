"""`batchscope simulate`: a grid of session counts × policies on a device profile, as a table.

Every cell is one simulated run (see :mod:`batchscope.sim.simulator`); the
table has the columns the study compared, and ``--json`` writes the list of
full reports (the same schema as ``batchscope run``).

With ``--experiment`` it plays an experiment file in virtual time instead
(:func:`~batchscope.sim.simulated_experiment.simulate_experiment`: the same steps at the
same times as ``run --experiment``) and prints the same segment table; its
``--json`` is one report, as ``run`` writes it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from batchscope.cli.args import (
    CliError,
    add_devices_flags,
    add_host_jitter_flag,
    add_knob,
    add_policy_flags,
    choice_list,
    csv,
    knob_type,
    number,
    refuse_config_flags,
    resolution,
    seed_count,
    write_json,
)
from batchscope.cli.outputs import check_file
from batchscope.cli.reports import print_experiment_report, write_csv, write_report
from batchscope.config import (
    DEFAULT_RESOLUTION,
    DEFAULT_ROUTER,
    KNOBS,
    POLICIES,
    PRECISIONS,
    ConfigError,
    RunConfig,
    format_resolution,
    parse_devices,
)
from batchscope.engine.report.run_report import experiment_block
from batchscope.engine.report.text import format_devices, format_table
from batchscope.engine.routing import devices_label
from batchscope.experiment import load_experiment
from batchscope.profiles.profile import load_profile
from batchscope.sim.devices import (
    load_devices,
    simulate_devices,
)
from batchscope.sim.host_jitter import load_host_jitter
from batchscope.sim.seeds import seed_spread
from batchscope.sim.simulated_experiment import simulate_experiment
from batchscope.sim.simulator import DEFAULT_WARMUP_S, simulate

#: Simulated seconds measured by default: longer than a live run's (the duration
#: knob's default), because a simulated second costs microseconds, not a second.
SIMULATED_DURATION_S = 30.0


def add_simulate_command(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate policies × session counts on a device profile (fast, no device)",
        description="Discrete-event simulation of the batching worker over a device "
        "profile's batch curve, with the live worker's own policy objects. "
        "Prints one table row per (sessions, policy). Timing only: no heatmaps, so no "
        "detections, accuracy or post-processing (run's --postprocess does not apply; the "
        "report's config says the default).",
        epilog="With --experiment NAME|PATH the experiment file sets the whole config and "
        "its steps; only --json, --csv and --report may be added (a config flag is "
        "refused with one line, never ignored).",
    )
    p.add_argument(
        "--profile",
        default="laptop-8gb",
        help="profile name or JSON path (default laptop-8gb; see `batchscope profiles`)",
    )
    p.add_argument("--precision", choices=PRECISIONS, default="fp16")
    p.add_argument("--resolution", type=resolution, default=DEFAULT_RESOLUTION, metavar="WxH")
    sessions = KNOBS["sessions"]
    p.add_argument(
        sessions.flag,
        type=csv(knob_type(sessions.name)),
        default=[sessions.default],
        metavar="N[,N…]",
        help=f"session counts to simulate (default {sessions.default})",
    )
    p.add_argument(
        "--policy",
        type=choice_list(POLICIES, "policy"),
        default=["all"],
        metavar="P[,P…]",
        help=f"policies to simulate ({', '.join(POLICIES)})",
    )
    add_policy_flags(p)
    neighbours = KNOBS["neighbours"]
    p.add_argument(
        neighbours.flag,
        type=csv(knob_type(neighbours.name)),
        default=[neighbours.default],
        metavar="N[,N…]",
        help="busy neighbours time-slicing the GPU, one row each (default 0; see "
        "engine/neighbours.py for the model)",
    )
    add_knob(
        p,
        "neighbour_duty",
        help="share of the time each neighbour keeps the GPU busy, 0-1 (default %(default)g)",
    )
    add_knob(p, "fps", help="frames/s per session (default %(default)g)")
    add_knob(
        p,
        "duration_s",
        default=SIMULATED_DURATION_S,
        metavar="S",
        help="simulated seconds measured (after warm-up; default %(default)g)",
    )
    p.add_argument(
        "--warmup",
        type=number,
        default=DEFAULT_WARMUP_S,
        metavar="S",
        help="simulated seconds before measuring (default %(default)g, as in `run`)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the session phases")
    p.add_argument(
        "--seeds",
        type=seed_count,
        default=1,
        metavar="N",
        help="also run seeds SEED…SEED+N-1 and show the spread: the slowest session's fps "
        "on the worst and the median seed, the worst p99 (default 1: one draw)",
    )
    add_devices_flags(p)
    add_host_jitter_flag(p)
    _add_output_flags(p.add_argument_group("outputs and experiment files"))
    p.set_defaults(handler=cmd_simulate, parser=p)


def _add_output_flags(group: Any) -> None:
    """What the simulation writes, and the experiment file it may play."""
    group.add_argument(
        "--json",
        metavar="PATH|-",
        help="write the list of reports as JSON ('-': stdout, table on stderr); "
        "with --experiment, its one report",
    )
    group.add_argument(
        "--experiment",
        metavar="NAME|PATH",
        help="simulate an experiment file (see `batchscope experiments`) segment by segment",
    )
    group.add_argument("--csv", metavar="PATH", help="with --experiment: the segment table as CSV")
    group.add_argument(
        "--report", metavar="OUT.html", help="with --experiment: a self-contained HTML report"
    )


def grid_configs(args: argparse.Namespace) -> list[RunConfig]:
    """One validated config per (sessions, policy, neighbours), in that order (or ConfigError)."""
    if not args.sessions:
        raise ConfigError("sessions", "", "give at least one session count")
    if not args.policy:
        raise ConfigError("policy", "", "give at least one policy")
    if not args.warmup >= 0:
        raise ConfigError("warmup", args.warmup, "must be 0 or more seconds")
    return [
        RunConfig(
            sources=(),
            sessions=n,
            fps=args.fps,
            policy=policy,
            max_batch=args.max_batch,
            max_delay_ms=args.max_delay_ms,
            batch=args.batch,
            slo_ms=args.slo_ms,
            drop_after_ms=args.drop_after_ms,
            neighbours=k,
            neighbour_duty=args.neighbour_duty,
            backend="emulated",
            profile=args.profile,
            precision=args.precision,
            resolution=args.resolution,
            duration_s=args.duration,
            seed=args.seed,
        )
        for n in args.sessions
        for policy in args.policy
        for k in args.neighbours
    ]


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.experiment:
        return cmd_simulate_experiment(args)
    if args.csv or args.report:
        raise CliError("--csv and --report need --experiment (a grid has no segments)")
    configs = grid_configs(args)
    check_file("--json", args.json)  # before the simulations' seconds
    profile = load_profile(args.profile)
    profile.curve(args.precision, args.resolution)  # ProfileError names what the profile has
    jitter = load_host_jitter(args.host_jitter)
    devices = None
    if args.router is not None and args.devices is None:
        raise CliError("--router places windows on several devices: give --devices too")
    router = args.router or DEFAULT_ROUTER
    if args.devices is not None:  # several devices: the router places the windows
        devices = load_devices(parse_devices(args.devices, profile.name), profile)
        for device in devices:
            device.curve(configs[0])  # ProfileError names what the profile has
        on = devices

        def report_of(c: RunConfig) -> dict[str, Any]:  # its config says devices and router
            c = c.with_changes(devices=len(on), router=router)
            return simulate_devices(c, on, router, args.warmup, jitter)

    else:

        def report_of(c: RunConfig) -> dict[str, Any]:
            return simulate(c, profile, args.warmup, jitter)

    reports = [report_of(c) for c in configs]
    if args.seeds > 1:  # the spread over phase draws beside each seed-0 report
        for report, config in zip(reports, configs, strict=True):
            report["seeds"] = seed_spread(config, args.seeds, profile, args.warmup, report_of)
    out = sys.stderr if args.json == "-" else sys.stdout
    where = (
        devices_label([d.label for d in devices], router)
        if devices is not None
        else f"{profile.name} ({profile.device})"
    )
    print(
        f"simulated: {where} · {args.precision} "
        f"{format_resolution(args.resolution)} · {args.fps:g} fps · {args.duration:g} s "
        f"after {args.warmup:g} s warm-up · seed {args.seed}"
        + (
            f" (spread over seeds {args.seed}–{args.seed + args.seeds - 1})"
            if args.seeds > 1
            else ""
        ),
        file=out,
    )
    print(format_table(reports), file=out)
    if devices is not None:
        print(format_devices(reports), file=out)
    write_json(reports, args.json)
    return 0


def cmd_simulate_experiment(args: argparse.Namespace) -> int:
    refuse_config_flags(args, ("experiment", "json", "csv", "report", "host_jitter"))
    experiment = load_experiment(args.experiment)
    for flag, target in (("--json", args.json), ("--csv", args.csv), ("--report", args.report)):
        check_file(flag, target)
    report = simulate_experiment(experiment, jitter=load_host_jitter(args.host_jitter))
    report["experiment"] = experiment_block(experiment)
    out = sys.stderr if args.json == "-" else sys.stdout
    print_experiment_report(report, out)
    write_json(report, args.json)
    write_csv(report, args.csv)
    write_report(report, args.report, out)
    return 0
