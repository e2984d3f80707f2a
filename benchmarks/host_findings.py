"""Live vs simulated p99 on a busy machine, without and with the host modelled (issue 25).

    PYTHONPATH=app python benchmarks/host_findings.py [--hogs 2] [--experiments NAME ...]

For each experiment: plays it live with ``--hogs`` CPU hogs beside it (busy loops, child
processes of this script, stopped by PID; none with ``--hogs 0``), then simulates it twice:
as the simulator always has (``--host-jitter none``) and replaying the live run's own
measured lateness (``--host-jitter LIVE.json``). Prints a Markdown table per segment:
live p99, simulated p99 and live ÷ simulated for each, the host's p99 lateness live, and
the verdict the report gives. The live runs take the experiments' lengths (30 s each).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from batchscope.engine.report.host import host_verdict

BATCHSCOPE = [sys.executable, "-m", "batchscope"]


def hogs(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` busy loops, each its own process (ended by PID when done)."""
    code = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def run(args: list[str]) -> None:
    subprocess.run([*BATCHSCOPE, *args], check=True, stdout=subprocess.DEVNULL, env=os.environ)


def p99(segment: dict) -> float | None:
    overall = segment.get("overall")
    return overall["latency_ms"]["p99"] if overall else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--experiments", nargs="+", default=["bus-or-taxi", "client-burst"])
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="host-findings-"))
    print("| experiment | segment | live p99 | sim p99 (none) | ÷ | sim p99 (host) | ÷ |"
          " host late p99 | verdict |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.experiments:
        live, none, host = (folder / f"{name}-{k}.json" for k in ("live", "none", "host"))
        busy = hogs(args.hogs)
        try:
            run(["run", "--experiment", name, "--json", str(live), "--quiet"])
        finally:
            for hog in busy:
                hog.terminate()
                hog.wait(5)
        run(["simulate", "--experiment", name, "--json", str(none)])
        run(["simulate", "--experiment", name, "--host-jitter", str(live), "--json", str(host)])
        reports = [json.loads(p.read_text()) for p in (live, none, host)]
        for seg, s_none, s_host in zip(*(r["segments"] for r in reports), strict=True):
            lp, np_, hp = p99(seg), p99(s_none), p99(s_host)
            if lp is None or np_ is None or hp is None:
                continue
            late = seg["overall"]["host_late_ms"]["p99"]
            verdict = host_verdict({**seg, "predicted": {"latency_ms": {"p99": np_}}}) or "–"
            print(
                f"| {name} | {seg['index']} | {lp:.1f} | {np_:.1f} | {lp / np_:.2f} | {hp:.1f} "
                f"| {lp / hp:.2f} | {late:.1f} | {verdict} |"
            )


if __name__ == "__main__":
    main()
