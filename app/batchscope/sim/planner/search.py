"""The capacity planner's search: the grid of settings, the bound, the scan, the ranking.

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

**The grid** (:func:`settings`, each policy's ``grid`` in :mod:`batchscope.policy_kinds`):

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
search scans the counts down from the largest bound, level by level: at each
count, every setting whose bound reaches it, in grid order; the first count at
which a setting fits for every seed is the answer, exact on the grid, because at
every count above it every setting was simulated and failed (or is above its
bound). The answer's count is the largest of the settings' own largest fitting
counts, so the level scan meets at it the same settings, and only those, as a
scan setting by setting (each from its bound down to the best so far) does: the
plan is the same, whichever order the settings are scanned in.
A count's seeds are tried worst-first (the seed that failed last), and the first
failing seed rejects it. At the answer's count a later setting in the grid must
beat the best so far on the tie-break below (a lower worst-seed p99), so a seed at
or over the best's p99 rejects it too; the seeds are then tried in the order of
the best's p99, highest first.

**Early rejection** (``measure.Tally``): a run that can no longer meet the budget
(or the p99 to beat) stops at the next check, every 0.5 s of virtual time: when a
session cannot reach the fps floor even if it delivered every frame it has left,
or when more windows already took over the p99 limit than the report's percentile
allows among the most windows the run can still deliver. Only rejections are made
early; a run that fits is always played to its end, and a rejected run's figures,
if asked for later (the plot), come from a full run.

**The recommendation** (:func:`recommend`): the most sessions; ties broken by
the lower worst-seed p99 where the two differ by more than the seeds' spread (worst
minus best seed's p99: closer than that, the phases drawn decide, not the policy),
then by the simpler policy in the order of
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
from collections.abc import Generator, Sequence
from typing import Any

from batchscope.config import KNOBS, POLICIES, ConfigError, RunConfig
from batchscope.engine.stats import fps_figures
from batchscope.policy_kinds import KINDS
from batchscope.profiles.profile import BatchCurve, DeviceProfile
from batchscope.sim.host_jitter import HostJitter
from batchscope.sim.planner.measure import Evaluator
from batchscope.sim.planner.results import (
    DEFAULT_DURATION_S,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SEEDS,
    Budget,
    Cancelled,
    Plan,
    Point,
    PolicyPlan,
    Progress,
)
from batchscope.sim.simulator import DEFAULT_WARMUP_S


def settings(policy: str, budget: Budget) -> list[dict[str, Any]]:
    """The knob values searched for ``policy`` (its kind's grid; the module doc), each
    value clipped into its knob's range; two settings that clip alike are searched once."""
    kind = KINDS.get(policy)
    if kind is None:
        raise ConfigError("policy", policy, "unknown policy")
    out: list[dict[str, Any]] = []
    for params in kind.grid(budget.p99_ms):
        clipped = {k: v if v is None else KNOBS[k].clip(v) for k, v in params.items()}
        if clipped not in out:
            out.append(clipped)
    return out


def _cap(policy: str, params: dict[str, Any]) -> int | None:
    return KINDS[policy].cap_of(params)


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
        fps = fps_figures([("running", windows / duration_s)])["min_fps"] or 0.0
        return budget.meets(fps, budget.p99_ms)  # the p99 at its limit: the fps decides

    windows = math.ceil(budget.min_fps * duration_s)
    while windows > 0 and enough(windows - 1):
        windows -= 1
    while not enough(windows):
        windows += 1
    return windows


def candidates(
    policy: str, budget: Budget, curve: BatchCurve, max_sessions: int, duration_s: float
) -> Generator[tuple[dict[str, Any], int], bool, None]:
    """The (setting, sessions) pairs to try for ``policy``, told after each whether it fit.

    A generator of candidates, as Model Analyzer's config generators are: it knows the
    grid and the bound, not how a candidate is measured. It scans the counts down from
    the largest :func:`capacity_bound`, and at each count every setting whose bound
    reaches it, in grid order; the first count at which one fits is the answer, so it
    stops after that count's settings (see the module doc).
    """
    grid = settings(policy, budget)
    bounds = [
        capacity_bound(curve, _cap(policy, p), budget, max_sessions, duration_s) for p in grid
    ]
    for n in range(max(bounds), 0, -1):
        found = False
        for params, bound in zip(grid, bounds, strict=True):
            if bound >= n and (yield params, n):
                found = True
        if found:
            return


def plan_policy(
    evaluator: Evaluator, curve: BatchCurve, policy: str, seeds: int, max_sessions: int
) -> PolicyPlan:
    """The best setting of ``policy`` on the grid and the most sessions it fits."""
    budget = evaluator.budget
    runs_before = evaluator.runs
    order = list(range(seeds))
    grid = settings(policy, budget)
    best: tuple[int, float, int] | None = None  # (sessions, -p99, -grid index)
    best_point: Point | None = None
    best_params: dict[str, Any] = {}
    search = candidates(policy, budget, curve, max_sessions, evaluator.duration_s)
    fits = None
    while True:
        try:
            params, n = search.send(fits) if fits is not None else next(search)
        except StopIteration:
            break
        # at the count of the best so far (the only count left), a later setting in the
        # grid wins only with a lower worst-seed p99: a seed at or over it rejects it
        below = best_point.p99_worst if best_point is not None else None
        fits = evaluator.fits(policy, params, n, order, below)
        if fits:
            point = evaluator.point(policy, params, n, seeds)
            rank = (n, -point.p99_worst, -grid.index(params))
            if best is None or rank > best:
                best, best_point, best_params = rank, point, params
                # the next settings' likeliest p99 miss first: this one's worst seeds
                p99s = {s: evaluator.run(policy, params, n, s)[2] for s in order}
                order.sort(key=lambda s: -p99s[s])
    if best_point is None:  # nothing fits: the closest point, at 1 session
        scored = [(evaluator.point(policy, p, 1, seeds), p) for p in grid]
        best_point, best_params = min(scored, key=lambda c: c[0].shortfall(budget))
        max_n = 0
    else:
        max_n = best_point.sessions
    bound = max(
        capacity_bound(curve, _cap(policy, p), budget, max_sessions, evaluator.duration_s)
        for p in grid
    )
    return PolicyPlan(
        policy=policy,
        params=dict(best_params),
        max_sessions=max_n,
        at_max=best_point,
        bound=bound,
        simulations=evaluator.runs - runs_before,
    )


def recommend(plans: Sequence[PolicyPlan], budget: Budget) -> PolicyPlan:
    """Most sessions; then a lower worst p99, beyond the seeds' spread; then the simpler
    policy (POLICIES order).

    Two worst-seed p99s closer than the seeds' spread (the larger of the two settings'
    worst − best seed) differ by the phases drawn, not by the policy: they tie, and the
    simpler policy wins (``dynamic`` at 45.4 ms was chosen over ``all`` at 45.7 ms, 0.7%
    apart). The lowest p99 is the reference: every setting within
    its spread of it ties with it. With nothing fitting anywhere: the smallest shortfall,
    then the same order.
    """
    if all(p.max_sessions == 0 for p in plans):
        return min(plans, key=lambda p: (p.at_max.shortfall(budget), POLICIES.index(p.policy)))
    most = max(p.max_sessions for p in plans)
    level = [p for p in plans if p.max_sessions == most]
    lowest = min(level, key=lambda p: (p.at_max.p99_worst, POLICIES.index(p.policy)))
    tied = [
        p
        for p in level
        if p.at_max.p99_worst - lowest.at_max.p99_worst
        <= max(p.at_max.p99_spread, lowest.at_max.p99_spread)
    ]
    return min(tied, key=lambda p: (POLICIES.index(p.policy), p.at_max.p99_worst))


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
    jitter: HostJitter | None = None,
    runtime: str = "torch",
) -> Plan:
    """Search every policy in ``policies`` (see the module doc); raises ProfileError when
    the profile has no curve for ``precision`` at ``resolution``, ConfigError on a bad
    value, PlanCancelled when ``cancelled()`` turns true. ``jitter``: a measured host's
    lateness, replayed in every run (``plan --host-jitter``: runs then play to their end).
    ``runtime``: the profile's curve measured on that runtime (``plan --runtime``)."""
    curve = profile.curve(precision, resolution, runtime)
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
        resolution=curve.resolution,
        runtime=runtime,
        backend="emulated",
        duration_s=duration_s,
    )
    evaluator = Evaluator(profile, base, budget, duration_s, warmup_s, cancelled, jitter)
    plans = []
    for k, policy in enumerate(policies):
        plans.append(plan_policy(evaluator, curve, policy, seeds, max_sessions))
        if progress is not None:
            progress(k + 1, len(policies), policy)
    return Plan(
        profile_ref=profile.reference,
        profile=profile.name,
        precision=precision,
        resolution=curve.resolution,
        budget=budget,
        policies=tuple(plans),
        recommended=recommend(plans, budget),
        seeds=seeds,
        duration_s=duration_s,
        runs=evaluator,
        runtime=runtime,
    )
