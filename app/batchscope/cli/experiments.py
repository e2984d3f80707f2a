"""`batchscope experiments`: the experiment files found, built in and the user's."""

from __future__ import annotations

import argparse
from typing import Any

from batchscope.experiment import Experiment, experiments_dirs, list_experiments


def add_experiments_command(sub: Any) -> None:
    p = sub.add_parser(
        "experiments",
        help="list built-in and user experiments (run them with run/simulate/gui --experiment)",
        description="Lists every experiment file found: the built-in ones and those in "
        f"{experiments_dirs()[1][1]}. A file that cannot be used is listed with its error.",
    )
    p.set_defaults(handler=cmd_experiments)


def cmd_experiments(args: argparse.Namespace) -> int:
    found = list_experiments()
    rows = [item for _, item in found if isinstance(item, Experiment)]
    width = max((len(e.name) for e in rows), default=4)
    print(f"{'name':<{width}}  {'kind':<8} {'duration':>8} {'steps':>5}  caption")
    for kind, item in found:
        if isinstance(item, Experiment):
            print(
                f"{item.name:<{width}}  {kind:<8} {item.duration:>6g} s {len(item.steps):>5}  "
                f"{item.caption}"
            )
        else:
            print(f"{'(unusable)':<{width}}  {kind:<8} {item}")
    user = experiments_dirs()[1][1]
    print(f"\nyour own: a .toml file in {user}, or any path (docs/USER_GUIDE.md, Experiments)")
    return 0
