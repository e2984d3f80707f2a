"""Policies, driven by an injected clock: deterministic, no threads."""

from __future__ import annotations

import random

import pytest

from batchscope.config import RunConfig
from batchscope.engine.policies import (
    AdaptiveAIMD,
    BatchAll,
    Dynamic,
    FixedBatch,
    OldestFirst,
    RoundRobin,
    Waiting,
    make_policy,
)


def overload(
    policy,
    sessions: int = 4,
    fps: float = 30.0,
    batch_ms=lambda n: 9.82 * n,
    seconds: float = 20.0,
    seed: int = 0,
) -> dict[int, int]:
    """A tiny deterministic loop: sessions publish at fps with seeded random phases
    into latest-only mailboxes; the device runs what the policy takes for
    batch_ms(n). Returns results delivered per session."""
    period = 1.0 / fps
    rng = random.Random(seed)
    phases = [rng.random() * period for _ in range(sessions)]
    next_pub = list(phases)
    pending: dict[int, float] = {}
    since: dict[int, float] = {}
    delivered = dict.fromkeys(range(sessions), 0)
    t = 0.0
    while t < seconds:
        for s in range(sessions):
            while next_pub[s] <= t:
                pending[s] = next_pub[s]
                since.setdefault(s, next_pub[s])
                next_pub[s] += period
        waiting = [Waiting(s, a, since[s]) for s, a in pending.items()]
        d = policy.select(waiting, t)
        if d.take:
            for s in d.take:
                del pending[s]
                del since[s]
                delivered[s] += 1
            dt = batch_ms(len(d.take)) / 1000.0
            policy.observe(len(d.take), dt * 1000.0)
            t += dt
        else:
            t = min([*next_pub, d.wait_until or float("inf")])
    return delivered


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_oldest_starves_a_session_under_overload(seed):
    # 4 × 30 fps = 120 windows/s offered; batch 1 serves 101.8/s. The session whose
    # window keeps being overwritten keeps a fresh arrival time and keeps losing.
    got = overload(OldestFirst(), seed=seed)
    fps = [n / 20.0 for n in got.values()]
    assert sum(fps) == pytest.approx(101.8, rel=0.02)
    assert min(fps) < 0.6 * (sum(fps) / len(fps))


def test_all_gives_every_session_the_same_fps():
    got = overload(BatchAll(), batch_ms=lambda n: 9.82 * n)
    fps = [n / 20.0 for n in got.values()]
    assert max(fps) - min(fps) <= 0.1


def test_round_robin_is_fair_one_at_a_time():
    got = overload(RoundRobin())
    fps = [n / 20.0 for n in got.values()]
    assert max(fps) - min(fps) <= 0.2
    assert sum(fps) == pytest.approx(101.8, rel=0.02)


def test_round_robin_cycles_in_id_order_and_skips_absent():
    rr = RoundRobin()
    w = [Waiting(2, 0.0), Waiting(0, 0.5), Waiting(1, 0.1)]
    assert [rr.select(w, 1.0).take for _ in range(4)] == [(0,), (1,), (2,), (0,)]
    assert rr.select([Waiting(2, 0.0)], 1.0).take == (2,)
    assert rr.select([Waiting(0, 0.0), Waiting(1, 0.0)], 1.0).take == (0,)


def test_oldest_takes_earliest_arrival():
    assert OldestFirst().select([Waiting(0, 0.3), Waiting(1, 0.1)], 1.0).take == (1,)
    assert OldestFirst().select([], 1.0).take == ()


def test_all_caps_at_max_batch_oldest_first():
    w = [Waiting(i, 1.0 - i * 0.1) for i in range(5)]
    assert BatchAll(2).select(w, 2.0).take == (4, 3)
    assert len(BatchAll().select(w, 2.0).take) == 5


def test_dynamic_waits_at_most_its_delay():
    p = Dynamic(max_batch=4, max_delay_ms=20)
    w = [Waiting(0, 1.000), Waiting(1, 1.005)]
    d = p.select(w, 1.010)
    assert d.take == () and d.wait_until == pytest.approx(1.020)
    assert p.select(w, 1.020).take == (0, 1)
    full = [Waiting(i, 1.0) for i in range(5)]
    assert len(p.select(full, 1.001).take) == 4


def test_fixed_never_deadlocks_with_fewer_sessions_than_its_batch():
    p = FixedBatch(batch=8, max_delay_ms=30)
    w = [Waiting(0, 0.0), Waiting(1, 0.01)]
    assert p.select(w, 0.02).take == ()
    assert p.select(w, 0.03).take == (0, 1)
    got = overload(FixedBatch(batch=8, max_delay_ms=30), sessions=2, seconds=5)
    assert all(n > 100 for n in got.values())


def test_adaptive_grows_under_objective_and_backs_off_above():
    p = AdaptiveAIMD(slo_ms=50, max_batch=None)
    w = [Waiting(i, 0.0) for i in range(20)]
    for _ in range(5):
        n = len(p.select(w, 0.0).take)
        p.observe(n, 10.0)
    assert p.cap == 6
    p.observe(6, 80.0)
    assert p.cap == 5  # 6 × 0.9 = 5.4
    for _ in range(10):
        p.observe(p.cap, 80.0)
    assert p.cap == 1


def test_adaptive_does_not_grow_when_batch_was_not_limited_by_cap():
    p = AdaptiveAIMD(slo_ms=50, start=4)
    p.observe(2, 10.0)
    assert p.cap == 4


def test_adaptive_respects_max_batch():
    p = AdaptiveAIMD(slo_ms=1000, max_batch=3)
    for _ in range(10):
        p.observe(p.cap, 1.0)
    assert p.cap == 3


def test_adaptive_converges_near_budget_on_a_batch_curve():
    # laptop fp16 512x288: ~10.5 ms per window + waiting; objective 50 ms → a small cap
    p = AdaptiveAIMD(slo_ms=50)
    overload(p, sessions=8, batch_ms=lambda n: 11.0 * n, seconds=10)
    assert 1 <= p.cap <= 5


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_bad_parameters_name_the_value(bad):
    with pytest.raises(ValueError, match="max_batch"):
        BatchAll(bad)


def test_make_policy_for_every_name():
    for name in ("oldest", "round-robin", "all", "dynamic", "fixed", "adaptive"):
        cfg = RunConfig(policy=name, max_batch=8 if name == "dynamic" else None)
        assert make_policy(cfg).name == name


def test_dynamic_deadline_survives_overwrites():
    # A delay longer than the frame interval (33 ms at 30 fps): each overwrite brings a
    # fresh arrival, but the deadline counts from when the session started waiting.
    p = Dynamic(max_batch=8, max_delay_ms=50)
    assert p.select([Waiting(0, 1.033, since=1.0)], 1.040).wait_until == pytest.approx(1.05)
    assert p.select([Waiting(0, 1.033, since=1.0)], 1.050).take == (0,)
    got = overload(Dynamic(max_batch=8, max_delay_ms=50), sessions=4, seconds=5)
    assert all(n > 50 for n in got.values())


@pytest.mark.parametrize(
    "policy",
    [lambda: BatchAll(2), lambda: Dynamic(2, 5), lambda: AdaptiveAIMD(slo_ms=25)],
    ids=["all-capped", "dynamic", "adaptive"],
)
def test_capped_batches_do_not_starve_a_session(policy):
    # 6 sessions offer 180 windows/s; batches of ≤ 2 cannot take all of them. Taking the
    # longest-waiting sessions first (overwrites included) keeps everyone served.
    got = overload(policy(), sessions=6, batch_ms=lambda n: 8.0 + 4.0 * n, seconds=10)
    fps = [n / 10.0 for n in got.values()]
    assert min(fps) > 0.8 * (sum(fps) / len(fps))
