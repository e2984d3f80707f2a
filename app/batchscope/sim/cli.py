"""`batchscope simulate`: a grid of session counts × policies on a device profile, as a table.

Every cell is one simulated run (see :mod:`batchscope.sim.simulator`); the
table has the columns the study compared, and ``--json`` writes the list of
full reports (the same schema as ``batchscope run``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from batchscope.cli import (
    _choice_list,
    _csv,
    _number,
    _positive_int,
    _resolution,
    add_policy_flags,
    write_json,
)
from batchscope.config import POLICIES, PRECISIONS, ConfigError, RunConfig, format_resolution
from batchscope.engine.report import format_table
from batchscope.profiles.profile import load_profile
from batchscope.sim.simulator import DEFAULT_WARMUP_S, simulate


def add_simulate_command(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate policies × session counts on a device profile (fast, no device)",
        description="Discrete-event simulation of the batching worker over a device "
        "profile's batch curve, with the live worker's own policy objects. "
        "Prints one table row per (sessions, policy).",
    )
    p.add_argument(
        "--profile",
        default="laptop-8gb",
        help="profile name or JSON path (default laptop-8gb; see `batchscope profiles`)",
    )
    p.add_argument("--precision", choices=PRECISIONS, default="fp16")
    p.add_argument("--resolution", type=_resolution, default=(512, 288), metavar="WxH")
    p.add_argument(
        "--sessions",
        type=_csv(_positive_int),
        default=[4],
        metavar="N[,N…]",
        help="session counts to simulate (default 4)",
    )
    p.add_argument(
        "--policy",
        type=_choice_list(POLICIES, "policy"),
        default=["all"],
        metavar="P[,P…]",
        help=f"policies to simulate ({', '.join(POLICIES)})",
    )
    add_policy_flags(p)
    p.add_argument("--fps", type=_number, default=30.0, help="frames/s per session (default 30)")
    p.add_argument(
        "--duration",
        type=_number,
        default=30.0,
        metavar="S",
        help="simulated seconds measured (after warm-up; default 30)",
    )
    p.add_argument(
        "--warmup",
        type=_number,
        default=DEFAULT_WARMUP_S,
        metavar="S",
        help=f"simulated seconds before measuring (default {DEFAULT_WARMUP_S:g}, as in `run`)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the session phases")
    p.add_argument(
        "--json",
        metavar="PATH|-",
        help="write the list of reports as JSON ('-': stdout, table on stderr)",
    )
    p.set_defaults(handler=cmd_simulate)


def grid_configs(args: argparse.Namespace) -> list[RunConfig]:
    """One validated config per (sessions, policy), sessions outermost; ConfigError if bad."""
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
            backend="emulated",
            profile=args.profile,
            precision=args.precision,
            resolution=args.resolution,
            duration_s=args.duration,
            seed=args.seed,
        )
        for n in args.sessions
        for policy in args.policy
    ]


def cmd_simulate(args: argparse.Namespace) -> int:
    configs = grid_configs(args)
    profile = load_profile(args.profile)
    profile.curve(args.precision, args.resolution)  # ProfileError names what the profile has
    reports = [simulate(c, profile, args.warmup) for c in configs]
    out = sys.stderr if args.json == "-" else sys.stdout
    print(
        f"simulated: {profile.name} ({profile.device}) · {args.precision} "
        f"{format_resolution(args.resolution)} · {args.fps:g} fps · {args.duration:g} s "
        f"after {args.warmup:g} s warm-up · seed {args.seed}",
        file=out,
    )
    print(format_table(reports), file=out)
    write_json(reports, args.json)
    return 0
