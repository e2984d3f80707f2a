"""How fast the simulator is: seconds of wall time to simulate 30 s of 16 sessions.

The simulator is meant for grids of scenarios ("simulate any policy × session
count × profile in a fraction of a second"), so it must run far faster than
real time. Prints, per policy, the best of a few runs and the speed-up
(simulated seconds per wall second), then the same for an experiment file
(``--experiment``, default bus-or-taxi: 30 s in three segments, through
``simulate_experiment`` with its segment reports), and exits 1 if any best
run takes longer than ``--budget`` (1 s: the promise above, with a wide margin).
This check was a test once; a wall-clock limit does not belong in a test suite
that runs on loaded CI machines.

    PYTHONPATH=app python benchmarks/sim_speed.py [--sessions 16] [--duration 30] [--budget 1]
        [--experiment bus-or-taxi]
"""

from __future__ import annotations

import argparse
import sys
import time

from batchscope.config import POLICIES, RunConfig
from batchscope.experiment import load_experiment
from batchscope.profiles.profile import load_profile
from batchscope.sim.experiment import simulate_experiment
from batchscope.sim.simulator import DEFAULT_WARMUP_S, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--duration", type=float, default=30.0, help="simulated seconds")
    parser.add_argument("--repeat", type=int, default=5, help="runs per policy (best kept)")
    parser.add_argument(
        "--budget", type=float, default=1.0, help="wall s a policy's best run may take"
    )
    parser.add_argument("--experiment", default="bus-or-taxi", help="experiment to time")
    args = parser.parse_args()
    profile = load_profile("laptop-8gb")
    simulated_s = args.duration + DEFAULT_WARMUP_S
    print(
        f"laptop-8gb fp16 512x288, {args.sessions} sessions at 30 fps, "
        f"{args.duration:g} s (+{DEFAULT_WARMUP_S:g} s warm-up) simulated; best of "
        f"{args.repeat}"
    )
    print(f"{'policy':<22}{'wall s':>9}{'sim/wall':>10}{'batches':>9}{'windows':>9}")
    over = []
    for policy in POLICIES:
        config = RunConfig(
            sessions=args.sessions, policy=policy, max_batch=8, duration_s=args.duration
        )
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            report = simulate(config, profile)
            best = min(best, time.perf_counter() - start)
        overall = report["overall"]
        windows = sum(s["delivered"] for s in report["sessions"])
        print(
            f"{report['policy_label']:<22}{best:>9.3f}{simulated_s / best:>9.0f}x"
            f"{sum(overall['batch_sizes'].values()):>9}{windows:>9}"
        )
        if best > args.budget:
            over.append(report["policy_label"])
    experiment = load_experiment(args.experiment)
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        report = simulate_experiment(experiment, profile)
        best = min(best, time.perf_counter() - start)
    print(
        f"experiment {experiment.name} ({experiment.duration:g} s, "
        f"{len(report['segments'])} segments): {best:.3f} s, "
        f"{experiment.duration / best:.0f}x"
    )
    if best > args.budget:
        over.append(f"experiment {experiment.name}")
    if over:
        print(f"over the {args.budget:g} s budget: {', '.join(over)}")
        sys.exit(1)
    print(f"every policy within the {args.budget:g} s budget")


if __name__ == "__main__":
    main()
