"""`batchscope experiments` (the experiment files found), and how a command reports one."""

from __future__ import annotations

import argparse
from typing import Any

from batchscope.cli.args import CliError
from batchscope.cli.tables import format_segments
from batchscope.engine.report import format_table
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


def print_experiment_report(report: dict[str, Any], out: Any) -> None:
    """Header, the whole-run table, then the segment table (``run`` and ``simulate``)."""
    exp = report["experiment"]
    print(f"experiment {exp['name']}: {exp['caption']}", file=out)
    print(f"{report['device_label']} · {report['weights'] or report['kind']}", file=out)
    print("\nwhole run (config as it ended):", file=out)
    print(format_table([report]), file=out)
    print("\nsegments (each leaves out its first second, which settles):", file=out)
    print(format_segments(report), file=out)
    for ev in report.get("events", []):
        if ev["kind"] in ("error", "oom"):
            print(f"  event at {ev['t']:.1f} s [{ev['kind']}] {ev['message']}", file=out)


def write_report(
    report: dict[str, Any], target: str | None, out: Any, buses: dict | None = None
) -> None:
    """The HTML report to ``target`` (Qt draws its plots offscreen: imported only here).

    ``buses``: segment index -> its ``Snapshot.bus`` at its end (its bus view), if kept.
    """
    if not target:
        return
    from batchscope.ui.html_report import ReportError, write_html_report

    try:
        path = write_html_report(report, target, buses)
    except ReportError as exc:
        raise CliError(str(exc)) from None
    print(f"report written to {path}", file=out)
