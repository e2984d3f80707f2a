"""The capacity planner's shortcuts give the answers the long way gives, exactly.

Three shortcuts make `batchscope plan` answer at once (docs/BENCHMARKS.md "Capacity
planner: the default search"); each is checked here against the long way:

- a plain run plays in the compiled loop (``sim/fast_loop.py``) with its policy's rule
  inline: its trace is the loop's Python form's, record for record (random plain runs of
  every policy; tests/test_fast_loop.py holds the loop to the records of the general
  Python loop it replaced);
- a run that can no longer meet the budget stops early (``measure.Tally``): a stopped
  run's full verdict is a miss, on runs whose figures sit right at the limits;
- the search scans the counts level by level over every setting and asks a later setting
  to beat the best's p99: its plans equal those of the original setting-by-setting scan,
  here re-implemented on full runs only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from batchscope.config import POLICIES, RunConfig
from batchscope.engine.stats import fps_figures, latencies_ms, latency_summary
from batchscope.profiles.profile import load_profile
from batchscope.sim import devices
from batchscope.sim.planner import Budget, Evaluator, plan, settings
from batchscope.sim.planner.measure import P99_MARGIN_MS, Tally
from batchscope.sim.planner.results import Point, PolicyPlan
from batchscope.sim.planner.search import _cap, capacity_bound, recommend
from batchscope.sim.simulator import ProfileCurves, Trace, one_step, play, play_records

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Knobs that bind: caps below the session count, delays under and over a frame.
KNOBS: tuple[dict[str, Any], ...] = (
    {"policy": "oldest"},
    {"policy": "round-robin"},
    {"policy": "all"},
    {"policy": "all", "max_batch": 3},
    {"policy": "dynamic", "max_batch": 4, "max_delay_ms": 5.0},
    {"policy": "dynamic", "max_batch": 8, "max_delay_ms": 40.0},
    {"policy": "fixed", "batch": 3, "max_delay_ms": 10.0},
    {"policy": "fixed", "batch": 2, "max_delay_ms": 50.0},
    {"policy": "adaptive", "slo_ms": 30.0},
    {"policy": "adaptive", "slo_ms": 60.0, "max_batch": 6},
)
CURVES = (
    ("laptop-8gb", "fp16", (512, 288)),
    ("laptop-8gb", "fp16", (256, 144)),
    ("laptop-8gb", "fp32", (256, 144)),
    ("server-24gb", "fp16", (512, 288)),
)


def random_configs(seed: int, count: int) -> Iterator[tuple[RunConfig, float]]:
    """(plain config, warm-up s): every policy, light load to deep overload."""
    rng = random.Random(seed)
    for k in range(count):
        profile, precision, resolution = rng.choice(CURVES)
        config = RunConfig(
            sessions=rng.randint(1, 24),
            profile=profile,
            precision=precision,
            resolution=resolution,
            duration_s=rng.choice([2.0, 4.0, 6.0]),
            seed=rng.randint(0, 99),
            fps=rng.choice([10.0, 15.0, 25.0, 30.0, 60.0]),
            **KNOBS[k % len(KNOBS)],
        )
        yield config, rng.choice([0.0, 0.5, 1.0])


def same_trace(a: Trace, b: Trace) -> bool:
    for x, y in ((a.items, b.items), (a.batches, b.batches), (a.overwrites, b.overwrites)):
        if x.dtype != y.dtype or x.tobytes() != y.tobytes():
            return False
    return (a.start, a.end, a.sessions, a.config, a.segments, a.peak_mb) == (
        b.start,
        b.end,
        b.sessions,
        b.config,
        b.segments,
        b.peak_mb,
    ) and np.array_equal(a.expiries, b.expiries)


def test_a_plain_run_plays_in_the_loops_python_form_as_compiled(monkeypatch):
    configs = list(random_configs(1, 120))
    fast = [play(one_step(c), ProfileCurves(None, c), w) for c, w in configs]
    monkeypatch.setattr(devices, "compiled", lambda: False)  # the Python form
    for (config, warmup), trace in zip(configs, fast, strict=True):
        python = play(one_step(config), ProfileCurves(None, config), warmup)
        assert same_trace(trace, python), (config, warmup)


def full_figures(config: RunConfig, warmup: float) -> tuple[float, float, list[int]]:
    """(slowest fps, p99 ms, windows per session) by the report's rules, from the trace."""
    trace = play(one_step(config), ProfileCurves(None, config), warmup)
    counts = np.bincount(trace.items["session"], minlength=config.sessions)[: config.sessions]
    duration = trace.end - trace.start
    fps = fps_figures(("running", d / duration) for d in counts.tolist())
    p99 = latency_summary(latencies_ms(trace.items))["p99"]
    return fps["min_fps"], p99, counts.tolist()


def stopped(config: RunConfig, warmup: float, need: int, p99_limit: float) -> bool:
    """Whether the reject-only rules end ``config``'s run early."""
    curves = ProfileCurves(None, config)
    curve = curves(config)
    assert config.fps is not None
    from batchscope.sim.planner.measure import _windows_per_s

    tally = Tally(
        config.sessions,
        config.fps,
        warmup + config.duration_s,
        need,
        p99_limit,
        _windows_per_s(curve, config),
    )
    return play_records(one_step(config), curves, warmup, tally) is None


def test_an_early_stop_only_ever_rejects_a_run_that_misses():
    """Limits put right at each run's own figures (a hair under: a miss; at: a pass): a
    stop must never fire where the full run passes, and does fire on clear misses."""
    fired = 0
    for config, warmup in random_configs(2, 70):
        min_fps, p99, counts = full_figures(config, warmup)
        need_now = min(counts)  # the slowest session's windows: a floor it just meets
        for need, limit, passes in (
            (need_now, p99, True),  # both at the run's own figures: it passes
            (need_now, p99 + 0.0004, True),
            (need_now + 1, p99 + 1.0, False),  # one window short of the floor
            (0, p99 - 0.001, False),  # the p99 a hair over the limit
            (0, p99 - 0.0005, False),
            (need_now, max(p99 / 3, 0.001), False),  # a clear p99 miss
            (need_now + 25, math.inf, False),  # a clear fps miss
        ):
            if stopped(config, warmup, need, limit):
                assert not passes, (config, warmup, need, limit, min_fps, p99)
                fired += 1
    assert fired > 40  # the rules do cut runs short


def test_the_percentile_rule_is_the_reports_definition():
    """At least ``N_max - floor(0.99 (N_max - 1)) + 1`` of ``N <= N_max`` latencies at
    limit + margin puts ``latency_summary``'s p99 over the limit, whatever N and the rest."""
    rng = np.random.default_rng(3)
    for _ in range(3000):
        n_max = int(rng.integers(1, 3000))
        n = int(rng.integers(1, n_max + 1))
        over = n_max - math.floor(0.99 * (n_max - 1)) + 1
        if over > n:
            continue
        limit = float(rng.choice([0.09, 20.0, 33.333, 50.0, 49.9996, 100.0]))
        high = limit + P99_MARGIN_MS
        lat = np.concatenate(
            [
                rng.uniform(0.0, limit * 1.01, n - over),
                high + rng.choice([0.0, 1e-12, 1.0], over),
            ]
        )
        rng.shuffle(lat)
        assert latency_summary(lat)["p99"] > limit, (n, n_max, limit)


def test_a_verdict_cut_short_equals_the_full_runs_verdict():
    """The planner's own path: ``Evaluator.passes`` (which may stop a run) against the
    budget applied to the full run, over budgets right at the runs' figures."""
    profile = load_profile("laptop-8gb")
    base = RunConfig(
        fps=30.0,
        profile="laptop-8gb",
        precision="fp16",
        resolution=(256, 144),
        backend="emulated",
        duration_s=6.0,
    )
    rng = random.Random(4)
    for p99_ms, ratio in ((20.0, 0.95), (33.0, 0.9), (45.0, 0.95), (80.0, 1.0)):
        budget = Budget(30.0, p99_ms, ratio)
        quick = Evaluator(profile, base, budget, 6.0, 1.0, None)
        for _ in range(24):
            policy = rng.choice(POLICIES)
            params = rng.choice(settings(policy, budget))
            n, seed = rng.randint(4, 24), rng.randint(0, 7)
            config = quick.config(policy, params, n, seed)
            min_fps, p99, _ = full_figures(config, 1.0)
            assert quick.passes(policy, params, n, seed) == budget.meets(min_fps, p99)
            below = p99 + rng.choice([-0.001, 0.0, 0.001])
            expect = budget.meets(min_fps, p99) and p99 < below
            assert quick.passes(policy, params, n, seed, below) == expect


def original_plan_policy(
    ev: Evaluator, curve: Any, policy: str, seeds: int, top: int
) -> PolicyPlan:
    """The scan before the shortcuts: setting by setting in grid order, each from its bound
    down to the best so far, every candidate judged on full runs."""
    budget = ev.budget
    grid = settings(policy, budget)
    best: tuple[int, float, int] | None = None
    best_point: Point | None = None
    best_params: dict[str, Any] = {}
    found = 0
    for params in grid:
        bound = capacity_bound(curve, _cap(policy, params), budget, top, ev.duration_s)
        for n in range(bound, max(found, 1) - 1, -1):
            runs = [ev.run(policy, params, n, s) for s in range(seeds)]
            if all(budget.meets(r[0], r[2]) for r in runs):
                point = ev.point(policy, params, n, seeds)
                rank = (n, -point.p99_worst, -grid.index(params))
                if best is None or rank > best:
                    best, best_point, best_params = rank, point, params
                found = max(found, n)
                break
    if best_point is None:
        scored = [(ev.point(policy, p, 1, seeds), p) for p in grid]
        best_point, best_params = min(scored, key=lambda c: c[0].shortfall(budget))
    bound = max(capacity_bound(curve, _cap(policy, p), budget, top, ev.duration_s) for p in grid)
    return PolicyPlan(policy, dict(best_params), found, best_point, bound, 0)


@pytest.mark.parametrize(
    ("profile_name", "resolution", "p99_ms", "ratio"),
    [
        ("laptop-8gb", (256, 144), 50.0, 0.95),
        ("laptop-8gb", (256, 144), 30.0, 0.9),
        ("laptop-8gb", (512, 288), 100.0, 0.95),
        ("server-24gb", (512, 288), 50.0, 0.9),
        ("laptop-8gb", (512, 288), 5.0, 0.95),  # nothing fits: the closest points
    ],
)
def test_the_level_scan_answers_as_the_setting_by_setting_scan(
    profile_name, resolution, p99_ms, ratio
):
    profile = load_profile(profile_name)
    budget = Budget(30.0, p99_ms, ratio)
    result = plan(profile, "fp16", resolution, budget, duration_s=4.0, seeds=3)
    base = RunConfig(
        fps=30.0,
        profile=profile_name,
        precision="fp16",
        resolution=resolution,
        backend="emulated",
        duration_s=4.0,
    )
    ev = Evaluator(profile, base, budget, 4.0, 1.0, None)
    curve = profile.curve("fp16", resolution)
    plans = [original_plan_policy(ev, curve, p, 3, 256) for p in POLICIES]
    want = [p.to_json() for p in plans]
    assert [p.to_json() for p in result.policies] == want
    assert [p.bound for p in result.policies] == [p.bound for p in plans]
    assert result.recommended.to_json() == recommend(plans, budget).to_json()


class Watch(Tally):
    """A tally that never stops a run and notes its bounds at every check."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.noted: list[tuple[np.ndarray, int]] = []

    def __call__(self, now, waiting, measured, delivered) -> bool:
        self._tally(measured, delivered)
        self.noted.append((self.most_windows(now, waiting), self.most_items(now, waiting)))
        return False


def test_the_bounds_hold_at_every_check():
    """Each session's most windows and the most windows in all, as the rules bound them
    at a check, are never below what the run then delivers (here including the runs that
    reach neither limit)."""
    from batchscope.sim.planner.measure import _windows_per_s

    checks = 0
    for config, warmup in random_configs(5, 60):
        curves = ProfileCurves(None, config)
        assert config.fps is not None
        rate = _windows_per_s(curves(config), config)
        watch = Watch(config.sessions, config.fps, warmup + config.duration_s, 1, 1.0, rate)
        played = play_records(one_step(config), curves, warmup, watch)
        assert played is not None
        final = Tally(config.sessions, config.fps, warmup + config.duration_s)
        final.figures(played)
        for most, n_max in watch.noted:
            assert np.all(final.counts <= most), config
            assert len(played.delivered.arrivals) <= n_max, config
            checks += 1
    assert checks > 300
