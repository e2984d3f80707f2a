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
import time
from collections.abc import Sequence
from typing import Any

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.sim.simulator import simulate

POLICIES = ("oldest", "round-robin", "all")
WARMUP_S = 1.0


def live_and_simulated(
    base: RunConfig, policies: Sequence[str], warmup_s: float, live_s: float
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """policy -> (live report, simulated report) for ``base`` with that policy.

    One engine serves every policy of a session count: it is started once (its feeder
    draws the sessions' phases from the seed exactly as the simulator does), then each
    policy is applied live, warmed up, measured, and simulated with the same config
    (tests/test_agreement.py asks the same). Raises RuntimeError if any engine thread
    outlives ``stop()``.
    """
    engine = Engine(base)
    engine.open()
    engine.start()
    out = {}
    try:
        for policy in policies:
            config = base.with_changes(policy=policy)
            engine.apply(config)
            time.sleep(warmup_s)
            engine.reset_stats(announce=False)
            time.sleep(live_s)
            out[policy] = (engine.report(), simulate(config, warmup_s=warmup_s))
    finally:
        engine.stop()
    if engine.threads_alive():
        raise RuntimeError(f"engine threads still alive after stop: {engine.threads_alive()}")
    return out


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
