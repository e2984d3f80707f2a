"""How `run` and `simulate` report an experiment: its tables on the terminal, its HTML file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchscope.cli.args import CliError
from batchscope.engine.host_check import load_phrase, probe_phrase
from batchscope.engine.report.host import host_verdict, host_word
from batchscope.engine.report.rows import segments_csv
from batchscope.engine.report.text import format_devices, format_segments, format_table


def print_experiment_report(report: dict[str, Any], out: Any) -> None:
    """Header, the whole-run table, then the segment table (``run`` and ``simulate``)."""
    exp = report["experiment"]
    print(f"experiment {exp['name']}: {exp['caption']}", file=out)
    print(f"{report['device_label']} · {report['weights'] or report['kind']}", file=out)
    print("\nwhole run (config as it ended):", file=out)
    print(format_table([report]), file=out)
    if report.get("devices"):  # several devices: each one's line
        print(format_devices([report]), file=out)
    print("\nsegments (each leaves out its first second, which settles):", file=out)
    print(format_segments(report), file=out)
    print_host(report, out)
    for ev in report.get("events", []):
        if ev["kind"] in ("error", "oom"):
            print(f"  event at {ev['t']:.1f} s [{ev['kind']}] {ev['message']}", file=out)


def print_host(report: dict[str, Any], out: Any) -> None:
    """The machine's share, where it matters: the start's timer probe when it found the
    host busy, and the run's verdict on its tail (:mod:`batchscope.engine.report.host`)."""
    probe = report.get("host_probe")
    late = report["overall"].get("host_late_ms", {}).get("p99", 0.0)
    if probe and probe["verdict"] != "quiet":
        print(f"  {probe_phrase(probe)}", file=out)
    if report.get("host_load") and (
        host_word(late) == "busy" or (probe or {}).get("verdict") == "busy"
    ):
        print(f"  {load_phrase(report['host_load'])}", file=out)
    if verdict := host_verdict({"overall": report["overall"]}):
        print(f"  whole run: {verdict}", file=out)


def write_report(
    report: dict[str, Any], target: str | None, out: Any, buses: dict | None = None
) -> None:
    """The HTML report to ``target`` (Qt draws its plots offscreen: imported only here).

    ``buses``: segment index -> its ``Snapshot.bus`` at its end (its bus view), if kept.
    """
    if not target:
        return
    from batchscope.render.page import ReportError, write_html_report

    try:
        path = write_html_report(report, target, buses)
    except ReportError as exc:
        raise CliError(str(exc)) from None
    print(f"report written to {path}", file=out)


def write_csv(report: Mapping[str, Any], target: str | None) -> None:
    if not target:
        return
    try:
        with open(target, "w", newline="", encoding="utf-8") as fh:
            fh.write(segments_csv(report.get("segments", [])))
    except OSError as exc:
        raise CliError(f"{target}: cannot write the segment table ({exc.strerror})") from None
