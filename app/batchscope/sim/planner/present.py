"""What the capacity plot draws: each policy's chosen setting over session counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchscope.config import RunConfig
from batchscope.profiles.profile import DeviceProfile
from batchscope.sim.planner.measure import Evaluator
from batchscope.sim.planner.results import DEFAULT_MAX_SESSIONS, Cancelled, Plan
from batchscope.sim.simulator import DEFAULT_WARMUP_S


@dataclass(frozen=True)
class Series:
    """A policy's best setting over session counts: worst-seed figures, for plotting."""

    policy: str
    params: dict[str, Any]
    sessions: tuple[int, ...]
    min_fps: tuple[float, ...]  # slowest session, worst seed
    p99_ms: tuple[float, ...]  # worst seed
    max_sessions: int


def series(
    plan_: Plan,
    profile: DeviceProfile,
    up_to: int | None = None,
    warmup_s: float = DEFAULT_WARMUP_S,
    cancelled: Cancelled | None = None,
) -> list[Series]:
    """Each policy's chosen setting at 1 … ``up_to`` sessions (default: 3 past the largest
    answer, at least 6), every seed — what the plot draws."""
    top = max(p.max_sessions for p in plan_.policies)
    up_to = up_to or min(max(top + 3, 6), DEFAULT_MAX_SESSIONS)
    base = RunConfig(
        fps=plan_.budget.fps,
        profile=plan_.profile,
        precision=plan_.precision,
        resolution=plan_.resolution,
        backend="emulated",
        duration_s=plan_.duration_s,
    )
    evaluator = plan_.runs
    if evaluator is None or evaluator.warmup_s != warmup_s:
        evaluator = Evaluator(profile, base, plan_.budget, plan_.duration_s, warmup_s, cancelled)
    out = []
    for p in plan_.policies:
        counts = tuple(range(1, up_to + 1))
        runs = [
            [evaluator.run(p.policy, p.params, n, s) for s in range(plan_.seeds)] for n in counts
        ]
        out.append(
            Series(
                policy=p.policy,
                params=p.params,
                sessions=counts,
                min_fps=tuple(min(r[0] for r in rs) for rs in runs),
                p99_ms=tuple(max(r[2] for r in rs) for rs in runs),
                max_sessions=p.max_sessions,
            )
        )
    return out
