"""`batchscope compare A.json B.json`: two reports (or two segments) side by side, B ÷ A.

A and B are files that ``run --json`` or ``simulate --json`` wrote: the whole
run by default, or one segment of each (``--segment N``, or ``N,M`` for
segment N of A and M of B). A simulate grid is a list of reports: ``--index``
picks one (the same index in both files; ``I,J`` for different ones).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from batchscope.cli.args import CliError
from batchscope.config import KNOBS, ConfigError
from batchscope.engine.report.phrases import change_phrase, segment_phrase
from batchscope.engine.report.rows import FIGURES
from batchscope.engine.report.segment import too_short
from batchscope.engine.segments import MIN_MEASURED_S
from batchscope.sim.planner.results import DEFAULT_MIN_FPS_RATIO, Budget
from batchscope.sim.planner.verdict import figures_verdict

#: Config keys not worth a line of difference (they say how, not what, was run).
QUIET_KEYS = ("duration_s", "seed", "weights")


def add_compare_command(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="two JSON reports (or two segments) side by side, with B ÷ A",
        description="Compares two reports written by `run --json` or `simulate --json`: "
        "the overall figures side by side with B ÷ A, and the config difference.",
    )
    p.add_argument("a", metavar="A.json")
    p.add_argument("b", metavar="B.json")
    p.add_argument(
        "--segment",
        metavar="N[,M]",
        type=_pair,
        help="compare segment N of both (or N of A with M of B) instead of the whole runs",
    )
    p.add_argument(
        "--index",
        metavar="I[,J]",
        type=_pair,
        help="which report of a list (a simulate grid): I of both, or I of A and J of B",
    )
    p.add_argument(
        "--p99-ms",
        type=float,
        metavar="MS",
        help="the p99 budget (ms): one line for each of A and B says pass or fail against it "
        "and the fps floor, with the margins",
    )
    p.add_argument(
        "--min-fps-ratio",
        type=float,
        default=DEFAULT_MIN_FPS_RATIO,
        metavar="R",
        help="with --p99-ms: every session must get R × the run's fps "
        f"(default {DEFAULT_MIN_FPS_RATIO:g}, as plan's)",
    )
    p.set_defaults(handler=cmd_compare)


def _pair(text: str) -> tuple[int, int]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (1, 2) or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected N or N,M (whole numbers), got {text!r}")
    first = int(parts[0])
    return first, int(parts[-1])


def load_report(path: str, index: int | None) -> dict[str, Any]:
    """The report in ``path`` (item ``index`` of a list); CliError naming the file if not."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise CliError(f"{path}: cannot read ({reason})") from None
    except json.JSONDecodeError as exc:
        raise CliError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, list):
        if index is None:
            raise CliError(
                f"{path}: a list of {len(data)} reports (a simulate grid); "
                f"pick one with --index 0…{len(data) - 1}"
            )
        if not 0 <= index < len(data):
            raise CliError(f"{path}: no report {index} (the list has 0…{len(data) - 1})")
        data = data[index]
    elif index not in (None, 0):
        raise CliError(f"{path}: one report, not a list: --index {index} does not apply")
    if not _is_report(data):
        raise CliError(f"{path}: not a BatchScope report (no config and overall figures)")
    return data


def _is_report(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    overall, config = data.get("overall"), data.get("config")
    if not isinstance(overall, dict) or not isinstance(config, dict):
        return False
    keys = ("mean_fps", "min_fps", "jain", "throughput_wps", "latency_ms", "busy")
    return all(k in overall for k in keys) and isinstance(data.get("sessions"), list)


def pick_segment(report: dict[str, Any], path: str, n: int) -> dict[str, Any]:
    segments = report.get("segments") or []
    for seg in segments:
        if seg.get("index") == n:
            if too_short(seg):
                raise CliError(
                    f"{path}: segment {n} is too short to measure ({seg.get('measured_s', 0):g} s "
                    f"after its settling second; figures need {MIN_MEASURED_S:g} s)"
                )
            return seg
    have = f"it has 0…{len(segments) - 1}" if segments else "it has none"
    raise CliError(f"{path}: no segment {n} ({have})")


def describe(report: Mapping[str, Any], path: str, segment: Mapping[str, Any] | None) -> str:
    cfg = (segment or report)["config"]
    what = f"{report.get('kind', 'report')}"
    if "experiment" in report:
        what += f" of {report['experiment'].get('name', '?')}"
    where = (
        f"segment {segment['index']} ({segment['start_s']:.1f}–{segment['end_s']:.1f} s, "
        f"{segment_phrase(segment, _before(report, segment))})"
        if segment is not None
        else "whole run"
    )
    return f"{path}: {what}, {where}; {cfg.get('sessions')} sessions, {cfg.get('policy')}"


def _before(report: Mapping[str, Any], segment: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The segment before ``segment`` in ``report`` (what its change replaced), if any."""
    index = segment["index"]
    return next((s for s in report.get("segments") or [] if s["index"] == index - 1), None)


def config_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    keys = [k for k in a if k not in QUIET_KEYS] + [k for k in b if k not in a]
    return [
        f"  {change_phrase(k, a.get(k), b.get(k))}"
        for k in keys
        if k not in QUIET_KEYS and a.get(k) != b.get(k)
    ]


def format_compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """The figures of ``a`` and ``b`` (each ``overall``-shaped, with sessions) and B ÷ A."""
    lines = [f"{'':<16}{'A':>10}{'B':>10}{'B ÷ A':>9}", "-" * 45]
    for label, figure, digits in FIGURES:
        x, y = figure(a), figure(b)
        ratio = f"{y / x:.2f}" if x else "–"
        lines.append(f"{label:<16}{x:>10.{digits}f}{y:>10.{digits}f}{ratio:>9}")
    return "\n".join(lines)


def check_budget(p99_ms: float, min_fps_ratio: float) -> None:
    """The budget's own checks (the planner's); CliError naming the flag."""
    try:
        Budget(KNOBS["fps"].default, p99_ms, min_fps_ratio)
    except ConfigError as exc:
        raise CliError(f"--{exc.field.replace('_', '-')} {exc.value}: {exc.reason}") from None


def budget_line(run: Mapping[str, Any], p99_ms: float, min_fps_ratio: float) -> str:
    """Pass or fail of a report's (or a segment's) figures against the budget asked for:
    the p99, and the slowest session against ``min_fps_ratio`` × the fps it ran at."""
    return figures_verdict(run["overall"], run["config"].get("fps"), p99_ms, min_fps_ratio)


def cmd_compare(args: argparse.Namespace) -> int:
    if args.p99_ms is not None:
        check_budget(args.p99_ms, args.min_fps_ratio)
    ia, ib = args.index if args.index else (None, None)
    ra, rb = load_report(args.a, ia), load_report(args.b, ib)
    sa = sb = None
    if args.segment:
        sa = pick_segment(ra, args.a, args.segment[0])
        sb = pick_segment(rb, args.b, args.segment[1])
    a, b = sa or ra, sb or rb
    print(f"A  {describe(ra, args.a, sa)}")
    print(f"B  {describe(rb, args.b, sb)}")
    print()
    print(format_compare(a, b))
    if args.p99_ms is not None:
        print()
        for name, figures in (("A", a), ("B", b)):
            print(f"{name}  {budget_line(figures, args.p99_ms, args.min_fps_ratio)}")
    diff = config_difference(a["config"], b["config"])
    print("\nconfig A → B:" if diff else "\nsame config")
    if diff:
        print("\n".join(diff))
    return 0
