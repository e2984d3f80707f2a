"""Simulator vs live worker on the emulated device: do they tell the same story?

The simulator claims to predict what the live worker does on a device
whose batch curve it knows. This runs the same scenarios both ways — the
live engine on the emulated backend (real threads, real sleeps, the
synthetic source) and the discrete-event simulator with the same seed,
hence the same session phases — and prints the figures side by side with
their ratios (live / simulated).

    PYTHONPATH=app python benchmarks/agreement.py [--live 10] [--sessions 4,6]

Takes about (live + 1) s per scenario plus ~2 s per session count to
render the synthetic source.
"""

from __future__ import annotations

import argparse

from batchscope.config import RunConfig
from batchscope.sim.agreement import live_and_simulated

POLICIES = ("oldest", "round-robin", "all")
WARMUP_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--live", type=float, default=10.0, help="live seconds per scenario")
    parser.add_argument("--sessions", default="4,6", help="session counts (default 4,6)")
    parser.add_argument("--profile", default="laptop-8gb")
    parser.add_argument("--precision", default="fp16")
    args = parser.parse_args()
    counts = [int(n) for n in args.sessions.split(",")]

    rows = []
    for n in counts:
        # A fresh engine per session count: its feeder then draws the sessions' phases
        # from the seed exactly as the simulator does. (Adding sessions to a running
        # engine would give the new ones phases relative to an arbitrary instant.)
        base = RunConfig(
            sources=("synthetic",),
            sessions=n,
            policy=POLICIES[0],
            backend="emulated",
            profile=args.profile,
            precision=args.precision,
            duration_s=args.live,
        )
        pairs = live_and_simulated(base, POLICIES, WARMUP_S, args.live)
        rows += [(n, p, live["overall"], sim["overall"]) for p, (live, sim) in pairs.items()]

    print(
        f"{args.profile} {args.precision} 512x288, 30 fps, seed 0: live emulated worker "
        f"({args.live:g} s after {WARMUP_S:g} s warm-up) vs simulator (same scenario)"
    )
    head = (
        f"{'sessions':>8}  {'policy':<12}{'mean fps live/sim':>20}{'ratio':>7}"
        f"{'min fps live/sim':>19}{'ratio':>7}{'p50 ms live/sim':>18}{'ratio':>7}"
        f"{'thru live/sim':>16}{'ratio':>7}"
    )
    print(head)
    print("-" * len(head))
    for n, policy, live, sim in rows:
        cells = []
        for key, width in (("mean_fps", 20), ("min_fps", 19), ("p50", 18), ("throughput_wps", 16)):
            a = live["latency_ms"]["p50"] if key == "p50" else live[key]
            b = sim["latency_ms"]["p50"] if key == "p50" else sim[key]
            cells.append(f"{f'{a:.1f} / {b:.1f}':>{width}}{a / b if b else float('nan'):>7.2f}")
        print(f"{n:>8}  {policy:<12}" + "".join(cells))


if __name__ == "__main__":
    main()
