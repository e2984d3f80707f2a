"""The capacity planner: how many sessions fit a budget, with which policy and knobs.

The study derived its worker's session limit by hand from a latency budget;
this module does the search in the simulator. A *budget* is a frame rate, the
share of it every session must get (``min_fps_ratio``) and a p99 end-to-end
latency (``p99_ms``). A setting (policy + knobs) *fits* ``n`` sessions when,
for every phase seed ``0 … seeds-1``, the slowest session's fps is at least
``min_fps_ratio × fps`` and the overall p99 is at most ``p99_ms`` (figures by
the report's definitions: :func:`~batchscope.engine.stats.fps_figures` and
:func:`~batchscope.engine.stats.latency_summary`). One seed is luck: the phases
decide which session starves (server-24gb, 5 sessions, oldest first: the
slowest session gets 5, 10, 15 or 20 fps depending on the draw).

**The grid** (:func:`settings`), per policy:

- ``oldest``, ``round-robin``: no knobs;
- ``all``: ``max_batch`` none, 2, 4, 8;
- ``dynamic``: ``max_batch`` 2, 4, 8 × ``max_delay_ms`` 2, 5, 10;
- ``fixed``: ``batch`` 2, 3, 4 × ``max_delay_ms`` 5, 10;
- ``adaptive``: ``slo_ms`` 0.5 and 0.8 × the p99 budget (3 significant digits, inside
  the knob's range: a budget of 0.09 ms searches 0.045 and 0.072 ms), no cap (the
  objective is on a batch's worst latency, so it must sit below the p99 budget).

**The session count** (:func:`plan_policy`). Feasibility is *not* monotone in
the session count (``fixed`` with a batch of 4 waits out its delay at 3
sessions and fills at once at 4), so no bisection. Instead an upper bound that
holds for any policy, in whole windows over the measured ``duration_s``: every
session must deliver the fewest windows whose fps, as the report rounds it,
meets ``min_fps_ratio × fps``; the batches that start inside the interval take
the device's time in turn, so they deliver at most ``duration_s × max over b ≤
min(cap, n)`` of ``b / curve.ms(b)`` windows (a batch holds at most one window
per session and at most the policy's cap), and the one batch that started
before it and ended inside adds at most ``min(cap, n)`` more. No count above
:func:`capacity_bound` can fit: a measured fps moves in steps of 1 /
``duration_s``, so a device a hair short of ``n × min fps`` windows/s still
fits ``n`` (113.999 windows/s serve 4 sessions at 28.5 fps for 30 s). The
search scans down from that bound and stops at the first count that fits for
every seed: exact on the grid, because every count above it was simulated and
failed (or is above the bound). A count's seeds are tried worst-first (the seed
that failed last), and the first failing seed rejects it. Once a policy has an
answer, its other settings are scanned only down to that answer.

**The recommendation** (:func:`recommend`): the most sessions; ties broken by
the lower worst-seed p99, then by the simpler policy in the order of
:data:`~batchscope.config.POLICIES` (oldest, round-robin, all, dynamic, fixed,
adaptive: fewer knobs and less state first), then by grid order. A policy
with no fitting count gets ``max_sessions`` 0 and its *closest point*: 1
session with the setting whose worst shortfall (``p99 / p99_ms - 1`` or ``1 -
min fps / (ratio × fps)``, whichever is larger) is the smallest.

:func:`plan` is a pure function of its inputs (no Qt, no threads, no global
state), so the app can call it on a background thread: ``progress(done, total,
policy)`` is called after each setting and ``cancelled()`` is polled between
simulations (True raises :class:`PlanCancelled`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchscope.config import KNOBS, POLICIES, POLICY_PARAMS, ConfigError, RunConfig
from batchscope.engine.stats import fps_figures, latencies_ms, latency_summary
from batchscope.profiles.profile import BatchCurve, DeviceProfile
from batchscope.sim.simulator import (
    DEFAULT_WARMUP_S,
    ProfileCurves,
    one_step,
    play,
    simulated_report,
)

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

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "plan",
            "budget": self.budget.to_json(),
            "profile": self.profile,
            "precision": self.precision,
            "resolution": list(self.resolution),
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
            profile=self.profile,
            precision=self.precision,
            resolution=self.resolution,
            backend="emulated",
            **_knobs(rec.policy, rec.params),
        )


def settings(policy: str, budget: Budget) -> list[dict[str, Any]]:
    """The knob values searched for ``policy`` (the grid of the module doc)."""
    if policy in ("oldest", "round-robin"):
        return [{}]
    if policy == "all":
        return [{"max_batch": b} for b in (None, 2, 4, 8)]
    if policy == "dynamic":
        return [{"max_batch": b, "max_delay_ms": d} for b in (2, 4, 8) for d in (2.0, 5.0, 10.0)]
    if policy == "fixed":
        return [{"batch": b, "max_delay_ms": d} for b in (2, 3, 4) for d in (5.0, 10.0)]
    if policy == "adaptive":
        return [{"slo_ms": slo, "max_batch": None} for slo in _objectives(budget.p99_ms)]
    raise ConfigError("policy", policy, "unknown policy")


def _objectives(p99_ms: float) -> list[float]:
    """Adaptive's ``slo_ms`` values for a p99 budget: only values its knob accepts.

    0.5 and 0.8 × the budget at 3 significant digits (rounding to 0.1 ms made a
    0.09 ms budget's objective 0.0, which the knob refuses), inside the knob's range;
    two that clip to the same value are searched once.
    """
    knob = KNOBS["slo_ms"]
    out: list[float] = []
    for f in (0.5, 0.8):
        slo = knob.clip(float(f"{f * p99_ms:.3g}"))
        if slo not in out:
            out.append(slo)
    return out


def _knobs(policy: str, params: dict[str, Any]) -> dict[str, Any]:
    """The RunConfig fields of ``params`` (only the knobs ``policy`` reads)."""
    return {k: v for k, v in params.items() if k in POLICY_PARAMS[policy]}


def _cap(policy: str, params: dict[str, Any]) -> int | None:
    if policy in ("oldest", "round-robin"):
        return 1
    if policy == "fixed":
        return params["batch"]
    return params.get("max_batch")


def capacity_bound(
    curve: BatchCurve, cap: int | None, budget: Budget, max_sessions: int, duration_s: float
) -> int:
    """The largest count the device could serve at ``min_fps_ratio × fps`` each over
    ``duration_s`` measured seconds (see the module doc)."""
    need = windows_needed(budget, duration_s)
    best_wps = 0.0
    bound = 0
    for n in range(1, max_sessions + 1):
        if cap is None or n <= cap:
            best_wps = max(best_wps, curve.windows_per_s(n))
        # 1e-9: only the float noise of the product; the slack is the batch already running
        if n * need <= best_wps * duration_s * (1 + 1e-9) + min(cap or n, n):
            bound = n
        elif cap is not None and n > cap:
            break  # the ceiling no longer grows: no larger count fits
    return bound


def windows_needed(budget: Budget, duration_s: float) -> int:
    """The fewest windows a session must deliver in ``duration_s`` for its fps, as the
    report rounds it (:func:`~batchscope.engine.stats.fps_figures`), to meet the budget."""

    def enough(windows: int) -> bool:
        fps = fps_figures([("running", windows / duration_s)])["min_fps"]
        return budget.meets(fps, budget.p99_ms)  # the p99 at its limit: the fps decides

    windows = math.ceil(budget.min_fps * duration_s)
    while windows > 0 and enough(windows - 1):
        windows -= 1
    while not enough(windows):
        windows += 1
    return windows


class _Evaluator:
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
            policy=policy, sessions=sessions, seed=seed, **_knobs(policy, params)
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


def plan_policy(
    evaluator: _Evaluator, curve: BatchCurve, policy: str, seeds: int, max_sessions: int
) -> PolicyPlan:
    """The best setting of ``policy`` on the grid and the most sessions it fits."""
    budget = evaluator.budget
    runs_before = evaluator.runs
    order = list(range(seeds))
    best: tuple[int, float, int] | None = None  # (sessions, -p99, -grid index)
    best_point: Point | None = None
    best_params: dict[str, Any] = {}
    bounds = []
    grid = settings(policy, budget)
    for index, params in enumerate(grid):
        bound = capacity_bound(
            curve, _cap(policy, params), budget, max_sessions, evaluator.duration_s
        )
        bounds.append(bound)
        low = best[0] if best else 1
        for n in range(bound, low - 1, -1):
            if evaluator.fits(policy, params, n, order):
                point = evaluator.point(policy, params, n, seeds)
                rank = (n, -point.p99_worst, -index)
                if best is None or rank > best:
                    best, best_point, best_params = rank, point, params
                break
    if best_point is None:  # nothing fits: the closest point, at 1 session
        candidates = [(evaluator.point(policy, p, 1, seeds), p) for p in grid]
        best_point, best_params = min(candidates, key=lambda c: c[0].shortfall(budget))
        max_n = 0
    else:
        max_n = best_point.sessions
    return PolicyPlan(
        policy=policy,
        params=dict(best_params),
        max_sessions=max_n,
        at_max=best_point,
        bound=max(bounds),
        simulations=evaluator.runs - runs_before,
    )


def recommend(plans: Sequence[PolicyPlan], budget: Budget) -> PolicyPlan:
    """Most sessions; then lower worst p99; then the simpler policy (POLICIES order).

    With nothing fitting anywhere: the smallest shortfall, then the same order.
    """
    if all(p.max_sessions == 0 for p in plans):
        return min(plans, key=lambda p: (p.at_max.shortfall(budget), POLICIES.index(p.policy)))
    return min(
        plans,
        key=lambda p: (-p.max_sessions, p.at_max.p99_worst, POLICIES.index(p.policy)),
    )


def plan(
    profile: DeviceProfile,
    precision: str,
    resolution: tuple[int, int],
    budget: Budget,
    policies: Sequence[str] = POLICIES,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    duration_s: float = DEFAULT_DURATION_S,
    seeds: int = DEFAULT_SEEDS,
    warmup_s: float = DEFAULT_WARMUP_S,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> Plan:
    """Search every policy in ``policies`` (see the module doc); raises ProfileError when
    the profile has no curve for ``precision`` at ``resolution``, ConfigError on a bad
    value, PlanCancelled when ``cancelled()`` turns true."""
    curve = profile.curve(precision, resolution)
    KNOBS["sessions"].check(max_sessions)
    KNOBS["duration_s"].check(duration_s)
    if not (isinstance(seeds, int) and seeds >= 1):
        raise ConfigError("seeds", seeds, "must be a whole number of at least 1")
    if not policies:
        raise ConfigError("policies", "", "give at least one policy")
    for p in policies:
        if p not in POLICIES:
            raise ConfigError("policies", p, f"unknown policy; choose from {', '.join(POLICIES)}")
    base = RunConfig(
        fps=budget.fps,
        profile=profile.name,
        precision=precision,
        resolution=tuple(resolution),
        backend="emulated",
        duration_s=duration_s,
    )
    evaluator = _Evaluator(profile, base, budget, duration_s, warmup_s, cancelled)
    plans = []
    for k, policy in enumerate(policies):
        plans.append(plan_policy(evaluator, curve, policy, seeds, max_sessions))
        if progress is not None:
            progress(k + 1, len(policies), policy)
    return Plan(
        profile=profile.name,
        precision=precision,
        resolution=tuple(resolution),
        budget=budget,
        policies=tuple(plans),
        recommended=recommend(plans, budget),
        seeds=seeds,
        duration_s=duration_s,
        runs=evaluator,
    )


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
        evaluator = _Evaluator(profile, base, plan_.budget, plan_.duration_s, warmup_s, cancelled)
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
