"""Does planning slow the live run beside it? The live fps alone, with a plan on a thread of
the same process (as the Capacity tab planned before), and with the plan in a child
process at nice 10 (:class:`~batchscope.sim.planner.background.PlanProcess`, as it plans
now), measured side by side in one run.

    PYTHONPATH=app python benchmarks/planning_beside_live.py [--seconds 10] [--rounds 2]

The live run is the demo's shape on the emulated laptop GPU (8 sessions of the synthetic
scene at 512×288, batch all waiting); the plan is the Capacity tab's default at 256×144
(the slowest one), restarted as soon as it ends, for as long as the live run is
measured. Prints mean and min fps per condition and round, and each ÷ alone.
"""

from __future__ import annotations

import argparse
import threading
import time

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.sim.planner import Budget, PlanCancelled
from batchscope.sim.planner.background import PlanInputs, PlanProcess, Search, compute

LIVE = RunConfig(
    sources=("synthetic",),
    sessions=8,
    policy="all",
    backend="emulated",
    profile="laptop-8gb",
    precision="fp16",
    resolution=(512, 288),
)
PLAN = PlanInputs("laptop-8gb", "cpu", "fp16", (256, 144), Budget(30.0, 50.0), Search())


def measure(engine: Engine, seconds: float) -> tuple[float, float]:
    engine.reset_stats(announce=False)
    time.sleep(seconds)
    overall = engine.report()["overall"]
    return overall["mean_fps"], overall["min_fps"]


def planning(kind: str, stop: threading.Event) -> threading.Thread:
    """Plans again and again until ``stop``: here on a thread, or in the child."""
    process = PlanProcess() if kind == "process" else None

    def loop() -> None:
        run = process.compute if process is not None else compute
        try:
            while not stop.is_set():
                try:
                    run(PLAN, lambda *a: None, stop.is_set)
                except PlanCancelled:
                    return
        finally:
            if process is not None:
                process.stop()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    engine = Engine(LIVE)
    engine.open()
    engine.start()
    time.sleep(2.0)  # warm-up
    print(f"{'round':>5} {'planning':<10} {'mean fps':>9} {'min fps':>8} {'÷ alone':>8}")
    try:
        for r in range(args.rounds):
            alone = measure(engine, args.seconds)
            print(f"{r:>5} {'none':<10} {alone[0]:>9.2f} {alone[1]:>8.2f} {1.0:>8.3f}")
            for kind in ("thread", "process"):
                stop = threading.Event()
                thread = planning(kind, stop)
                time.sleep(1.5 if kind == "process" else 0.2)  # the child's start-up
                fps = measure(engine, args.seconds)
                stop.set()
                thread.join(30)
                print(f"{r:>5} {kind:<10} {fps[0]:>9.2f} {fps[1]:>8.2f} {fps[0] / alone[0]:>8.3f}")
    finally:
        engine.stop()


if __name__ == "__main__":
    main()
