"""What a plan is: the budget, a setting's figures at a count, each policy's answer, the plan.

The result types of the capacity planner (:mod:`batchscope.sim.planner`), kept
apart from the search that fills them (``search``), the simulations that measure
them (``measure``) and the series a plot draws (``present``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from batchscope.config import KNOBS, POLICY_PARAMS, ConfigError, RunConfig

DEFAULT_SEEDS = 8  # see docs/USER_GUIDE.md "Capacity planner": the spread it was chosen on
DEFAULT_DURATION_S = 30.0
DEFAULT_MIN_FPS_RATIO = 0.95
DEFAULT_MAX_SESSIONS = 256

Progress = Callable[[int, int, str], None]
Cancelled = Callable[[], bool]


class PlanCancelled(Exception):
    """The caller's ``cancelled()`` said stop."""


@dataclass(frozen=True)
class Budget:
    """What every session must get: ``min_fps_ratio × fps``, and the overall p99 (ms)."""

    fps: float
    p99_ms: float
    min_fps_ratio: float = DEFAULT_MIN_FPS_RATIO

    def __post_init__(self) -> None:
        if self.fps is None:
            raise ConfigError("fps", None, "the planner needs a frame rate")
        KNOBS["fps"].check(self.fps)
        if not (isinstance(self.p99_ms, int | float) and 0 < self.p99_ms < math.inf):
            raise ConfigError("p99_ms", self.p99_ms, "must be a number greater than 0 ms")
        if not (isinstance(self.min_fps_ratio, int | float) and 0 < self.min_fps_ratio <= 1):
            raise ConfigError("min_fps_ratio", self.min_fps_ratio, "must be in (0, 1]")

    @property
    def min_fps(self) -> float:
        return self.min_fps_ratio * self.fps

    def meets(self, min_fps: float, p99_ms: float) -> bool:
        """Whether a run's slowest-session fps and overall p99 (ms) are inside the budget."""
        return min_fps >= self.min_fps and p99_ms <= self.p99_ms

    def to_json(self) -> dict[str, float]:
        return {"fps": self.fps, "min_fps_ratio": self.min_fps_ratio, "p99_ms": self.p99_ms}


@dataclass(frozen=True)
class Point:
    """A setting at ``sessions`` over every seed: the spread and the worst seed's figures."""

    sessions: int
    seeds: int
    min_fps_worst: float  # the slowest session's fps, worst seed
    min_fps_median: float  # the slowest session's fps, median over seeds
    p99_worst: float  # ms, overall p99, worst seed
    mean_fps: float  # mean over sessions, worst (lowest) seed
    fits: bool
    overall: dict[str, Any] = field(default_factory=dict, compare=False)  # worst seed's report
    settled_cap: int | None = None  # adaptive: the most frequent batch size (its settled cap)
    p99_best: float | None = None  # ms, overall p99, best seed (None: not measured)

    @property
    def p99_spread(self) -> float:
        """How far apart the seeds' p99s are (ms): what the phases alone move it by."""
        return 0.0 if self.p99_best is None else self.p99_worst - self.p99_best

    def shortfall(self, budget: Budget) -> float:
        """How far outside the budget (0 inside): the larger relative miss."""
        return max(0.0, self.p99_worst / budget.p99_ms - 1, 1 - self.min_fps_worst / budget.min_fps)

    def to_json(self) -> dict[str, Any]:
        out = {
            **self.overall,
            "sessions": self.sessions,
            "spread": {
                "seeds": self.seeds,
                "min_fps_worst": self.min_fps_worst,
                "min_fps_median": self.min_fps_median,
                "p99_worst": self.p99_worst,
                **({} if self.p99_best is None else {"p99_best": self.p99_best}),
            },
        }
        if self.settled_cap is not None:
            out["settled_cap"] = self.settled_cap
        return out


@dataclass(frozen=True)
class PolicyPlan:
    """A policy's answer: its best setting, the most sessions it fits, the figures there."""

    policy: str
    params: dict[str, Any]
    max_sessions: int  # 0: nothing fits; ``at_max`` is then the closest point
    at_max: Point
    bound: int  # no count above this can fit (see the module doc)
    simulations: int  # runs this policy's search took

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "params": self.params,
            "max_sessions": self.max_sessions,
            "at_max": self.at_max.to_json(),
        }


@dataclass(frozen=True)
class Plan:
    profile: str
    precision: str
    resolution: tuple[int, int]
    budget: Budget
    policies: tuple[PolicyPlan, ...]
    recommended: PolicyPlan
    seeds: int
    duration_s: float
    #: the search's simulations, kept so that :func:`series` reuses them
    runs: Any = field(default=None, compare=False, repr=False)
    #: the runtime of the curve it planned on (``plan --runtime``; what its export serves)
    runtime: str = "torch"
    #: how ``load_profile`` finds the profile again (a file's path where its name does not:
    #: ``DeviceProfile.reference``), for the run configs made from the plan; empty: the name
    profile_ref: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "plan",
            "budget": self.budget.to_json(),
            "profile": self.profile,
            "precision": self.precision,
            "resolution": list(self.resolution),
            "runtime": self.runtime,
            "seeds": self.seeds,
            "duration_s": self.duration_s,
            "policies": [p.to_json() for p in self.policies],
            "recommended": {
                "policy": self.recommended.policy,
                "params": self.recommended.params,
                "max_sessions": self.recommended.max_sessions,
            },
        }

    def config(self, base: RunConfig | None = None) -> RunConfig:
        """The recommended setting as a run config (at least 1 session)."""
        rec = self.recommended
        return (base or RunConfig()).with_changes(
            policy=rec.policy,
            sessions=max(1, rec.max_sessions),
            fps=self.budget.fps,
            profile=self.profile_ref or self.profile,
            precision=self.precision,
            resolution=self.resolution,
            runtime=self.runtime,
            backend="emulated",
            **knobs(rec.policy, rec.params),
        )


def knobs(policy: str, params: dict[str, Any]) -> dict[str, Any]:
    """The RunConfig fields of ``params`` (only the knobs ``policy`` reads)."""
    return {k: v for k, v in params.items() if k in POLICY_PARAMS[policy]}
