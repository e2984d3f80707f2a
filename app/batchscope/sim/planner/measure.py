"""The capacity planner's measurements: a setting simulated at a count and seed, and a
plan's recommendation run on the live emulated worker (``verify``)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.stats import fps_figures, latencies_ms, latency_summary
from batchscope.profiles.profile import DeviceProfile
from batchscope.sim.planner.results import Budget, Cancelled, Plan, PlanCancelled, Point, knobs
from batchscope.sim.simulator import (
    DEFAULT_WARMUP_S,
    ProfileCurves,
    one_step,
    play,
    simulated_report,
)


class Evaluator:
    """Simulates (setting, sessions, seed) once each and judges it against the budget."""

    def __init__(
        self,
        profile: DeviceProfile,
        base: RunConfig,
        budget: Budget,
        duration_s: float,
        warmup_s: float,
        cancelled: Cancelled | None,
    ) -> None:
        self.base = base
        self.budget = budget
        self.duration_s = duration_s
        self.warmup_s = warmup_s
        self.curves = ProfileCurves(profile, base)
        self.cancelled = cancelled
        self.runs = 0
        self._memo: dict[tuple, tuple[float, float, float, Any]] = {}

    def config(self, policy: str, params: dict[str, Any], sessions: int, seed: int) -> RunConfig:
        return self.base.with_changes(
            policy=policy, sessions=sessions, seed=seed, **knobs(policy, params)
        )

    def run(self, policy: str, params: dict[str, Any], sessions: int, seed: int) -> tuple:
        """(slowest-session fps, mean fps, p99 ms, trace) of one simulated run."""
        key = (policy, tuple(sorted(params.items())), sessions, seed)
        if key not in self._memo:
            if self.cancelled is not None and self.cancelled():
                raise PlanCancelled()
            config = self.config(policy, params, sessions, seed)
            trace = play(one_step(config), self.curves, self.warmup_s)
            duration = trace.end - trace.start
            delivered = np.bincount(trace.items["session"], minlength=sessions)[:sessions]
            fps = fps_figures(("running", d / duration) for d in delivered.tolist())
            p99 = latency_summary(latencies_ms(trace.items))["p99"]
            self._memo[key] = (fps["min_fps"], fps["mean_fps"], p99, trace)
            self.runs += 1
        return self._memo[key]

    def fits(self, policy: str, params: dict[str, Any], n: int, order: list[int]) -> bool:
        """Whether every seed meets the budget; the failing seed moves to the front."""
        for seed in list(order):
            min_fps, _, p99, _ = self.run(policy, params, n, seed)
            if not self.budget.meets(min_fps, p99):
                order.remove(seed)
                order.insert(0, seed)
                return False
        return True

    def point(self, policy: str, params: dict[str, Any], n: int, seeds: int) -> Point:
        """Every seed at ``n``, with the worst seed's full report figures."""
        runs = [self.run(policy, params, n, seed) for seed in range(seeds)]
        worst = min(range(seeds), key=lambda s: (runs[s][0], -runs[s][2]))
        trace = runs[worst][3]
        report = simulated_report(trace, self.curves, self.warmup_s)
        overall = report["overall"]
        settled = None
        if policy == "adaptive" and overall["batch_sizes"]:
            sizes = overall["batch_sizes"]
            settled = int(max(sizes, key=lambda k: (sizes[k], int(k))))
        return Point(
            sessions=n,
            seeds=seeds,
            min_fps_worst=min(r[0] for r in runs),
            min_fps_median=float(statistics.median(r[0] for r in runs)),
            p99_worst=max(r[2] for r in runs),
            mean_fps=min(r[1] for r in runs),
            fits=all(self.budget.meets(r[0], r[2]) for r in runs),
            overall={**overall, "seed": worst},
            settled_cap=settled,
        )


def verify(plan_: Plan, seconds: float = 10.0, warmup_s: float = DEFAULT_WARMUP_S) -> dict:
    """The recommended setting on the live emulated worker for ``seconds`` (after a warm-up):
    ``{"config", "planned", "live"}`` with the planned figures from the simulator at the same
    seed and duration, so the two differ only by the live worker's timing."""
    from batchscope.engine.engine import Engine  # the live worker: threads, and torch's import
    from batchscope.sim.simulator import simulate

    config = plan_.config().with_changes(sources=("synthetic",), duration_s=seconds, seed=0)
    engine = Engine(config)
    engine.open()
    engine.start()
    try:
        time.sleep(warmup_s)
        engine.reset_stats(announce=False)
        time.sleep(seconds)
        live = engine.report()
    finally:
        engine.stop()
    planned = simulate(config, warmup_s=warmup_s)
    return {"config": config, "planned": planned, "live": live}
