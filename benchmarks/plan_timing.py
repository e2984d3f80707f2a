"""How long `batchscope plan` takes: its search (the progress line's time), the whole
command, and what ``--plot`` adds, for one or more copies of the app side by side.

Each round runs every case on every app in turn (so a load that comes and goes on a
shared machine falls on all of them alike), and the best of ``--repeat`` rounds is kept.
An app is ``LABEL=PATH``, PATH the folder that holds the ``batchscope`` package (``app``
here; for a "before", a copy of it at an older commit, e.g. ``git worktree add``).
The profiles are read from this checkout (``BATCHSCOPE_HOME``).

    PYTHONPATH=app python benchmarks/plan_timing.py --app after=app --app before=/tmp/old/app
        [--repeat 3] [--plot]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (profile, resolution): the rows of docs/BENCHMARKS.md "Capacity planner: the default search"
CASES = (
    ("laptop-8gb", "512x288"),
    ("server-24gb", "512x288"),
    ("laptop-8gb", "256x144"),
)
PLANNED = re.compile(r"planned \S+ \((\d+)/(\d+), ([0-9.]+) s\)")


def run_once(app: str, profile: str, resolution: str, plot: bool) -> tuple[float, float, str]:
    """(search s from the progress line, wall s of the command, the JSON written)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        argv = [
            sys.executable, "-m", "batchscope", "plan", "--profile", profile,
            "--precision", "fp16", "--resolution", resolution, "--fps", "30",
            "--p99-ms", "50", "--json", str(out),
        ]  # fmt: skip
        if plot:
            argv += ["--plot", str(Path(tmp) / "plan.png")]
        env = {**os.environ, "PYTHONPATH": str(Path(app).resolve()), "BATCHSCOPE_HOME": str(ROOT)}
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
        last = PLANNED.findall(done.stderr)[-1]
        return float(last[2]), wall, out.read_text()


#: plan() and series() timed inside one process (finer than the progress line's 0.1 s)
IN_PROCESS = """
import sys, time
from batchscope.profiles.profile import load_profile
from batchscope.sim.planner import Budget, plan, series
profile = load_profile(sys.argv[1])
resolution = tuple(int(x) for x in sys.argv[2].split("x"))
start = time.perf_counter()
result = plan(profile, "fp16", resolution, Budget(30.0, 50.0))
middle = time.perf_counter()
series(result, profile) if sys.argv[3] == "1" else None
end = time.perf_counter()
runs = sum(p.simulations for p in result.policies)
print(middle - start, end - middle, runs)
"""


def run_inside(app: str, profile: str, resolution: str, plot: bool) -> tuple[float, float, int]:
    """(plan() s, series() s, the search's simulations) in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(Path(app).resolve()), "BATCHSCOPE_HOME": str(ROOT)}
    argv = [sys.executable, "-c", IN_PROCESS, profile, resolution, "1" if plot else "0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    search, plotted, runs = done.stdout.split()
    return float(search), float(plotted), int(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--app", action="append", required=True, metavar="LABEL=PATH")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plot", action="store_true", help="also time --plot (each case)")
    args = parser.parse_args()
    apps = dict(a.split("=", 1) for a in args.app)
    modes = (False, True) if args.plot else (False,)
    best: dict[tuple[str, str, str, bool], tuple[float, float]] = {}
    answers: dict[tuple[str, str], set[str]] = {}
    exact: dict[tuple[str, str, str], tuple[float, float, int]] = {}
    for _ in range(args.repeat):
        for (profile, res), plot, label in ((c, m, a) for c in CASES for m in modes for a in apps):
            search, wall, data = run_once(apps[label], profile, res, plot)
            key = (label, profile, res, plot)
            was = best.get(key, (float("inf"), float("inf")))
            best[key] = (min(was[0], search), min(was[1], wall))
            answers.setdefault((profile, res), set()).add(data)
            if plot or not args.plot:  # plan() and series() inside one process
                inside, plotted, runs = run_inside(apps[label], profile, res, args.plot)
                was_in = exact.get((label, profile, res), (float("inf"), float("inf"), 0))
                exact[(label, profile, res)] = (
                    min(was_in[0], inside),
                    min(was_in[1], plotted),
                    runs,
                )
    print(
        f"best of {args.repeat}; search: the progress line's (0.1 s steps), wall: the whole "
        "command, +plot: wall with --plot less wall without; plan(), series(): timed in one "
        "process"
    )
    print(
        f"{'profile, resolution':<22}{'app':<8}{'runs':>6}{'search s':>9}{'wall s':>8}"
        f"{'+plot s':>9}{'plan() s':>10}{'series() s':>11}"
    )
    for profile, res in CASES:
        for label in apps:
            search, wall = best[(label, profile, res, False)]
            inside, plotted, runs = exact[(label, profile, res)]
            extra = f"{best[(label, profile, res, True)][1] - wall:>9.2f}" if args.plot else ""
            print(
                f"{profile + ' ' + res:<22}{label:<8}{runs:>6}{search:>9.1f}{wall:>8.2f}"
                f"{extra:>9}{inside:>10.3f}{(f'{plotted:.2f}' if args.plot else ''):>11}"
            )
    same = all(len(v) == 1 for v in answers.values())
    print("the JSON of every app and round:", "identical" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
