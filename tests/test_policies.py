"""Policies: unit rules on an injected clock, their knobs' setters, and their behaviour
under load in the real simulator (the one that answers `batchscope simulate`), so the
feedback they get is the worker's: the worst end-to-end latency of each batch."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from batchscope.config import ConfigError, RunConfig
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
from batchscope.profiles.profile import BatchCurve, CurvePoint, DeviceProfile
from batchscope.sim.simulator import Trace, simulate
from simulated import simulate_trace


def linear_curve(base_ms: float, per_window_ms: float) -> BatchCurve:
    """A device whose batch of n windows takes base_ms + n × per_window_ms."""
    points = (CurvePoint(1, base_ms + per_window_ms), CurvePoint(2, base_ms + 2 * per_window_ms))
    return BatchCurve("fp16", (512, 288), points)


# laptop-8gb fp16 512x288 made linear: batch 1 serves 1000 / 9.82 = 101.8 windows/s.
LAPTOP = linear_curve(0.0, 9.82)


def scenario(policy: str, sessions: int, seconds: float, **knobs: Any) -> RunConfig:
    """Sessions at 30 fps, measured from t = 0 (no warm-up), on the curve's precision/size."""
    return RunConfig(
        sessions=sessions, policy=policy, fps=30.0, duration_s=seconds, profile="test", **knobs
    )


def report(config: RunConfig, curve: BatchCurve = LAPTOP) -> dict[str, Any]:
    return simulate(config, DeviceProfile("test", "a linear test device", (curve,)), warmup_s=0.0)


def trace(config: RunConfig, curve: BatchCurve = LAPTOP) -> Trace:
    return simulate_trace(config, curve, warmup_s=0.0)


def session_fps(rep: dict[str, Any]) -> list[float]:
    return [s["fps"] for s in rep["sessions"]]


def worst_latency_ms(tr: Trace) -> np.ndarray:
    """Per batch: result - earliest arrival of its windows (what the worker feeds `observe`)."""
    first = np.minimum.reduceat(tr.items["arrival"], np.r_[0, np.cumsum(tr.batches["size"])[:-1]])
    return (tr.batches["end"] - first) * 1000.0


# -- under load, in the simulator -------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_oldest_starves_a_session_under_overload(seed: int) -> None:
    # 4 × 30 fps = 120 windows/s offered; batch 1 serves 101.8/s. The session whose
    # window keeps being overwritten keeps a fresh arrival time and keeps losing.
    overall = report(scenario("oldest", 4, 20.0, seed=seed))["overall"]
    assert overall["throughput_wps"] == pytest.approx(101.8, rel=0.02)
    assert overall["min_fps"] < 0.6 * overall["mean_fps"]


def test_all_gives_every_session_the_same_fps() -> None:
    fps = session_fps(report(scenario("all", 4, 20.0)))
    assert max(fps) - min(fps) <= 0.1


def test_round_robin_is_fair_one_at_a_time() -> None:
    rep = report(scenario("round-robin", 4, 20.0))
    fps = session_fps(rep)
    assert max(fps) - min(fps) <= 0.2
    assert rep["overall"]["throughput_wps"] == pytest.approx(101.8, rel=0.02)
    assert set(rep["overall"]["batch_sizes"]) == {"1"}


def test_round_robin_serves_in_id_order_under_load() -> None:
    # The first two windows run as they arrive (sessions 3, then 2, by phase); from then
    # on all four always wait, and the cursor goes round 0, 1, 2, 3.
    served = trace(scenario("round-robin", 4, 20.0)).items["session"].tolist()
    assert served[:2] == [3, 2]
    assert served[2:] == [i % 4 for i in range(len(served) - 2)]


def test_fixed_takes_what_is_there_after_its_delay_padded_to_its_shape() -> None:
    # A batch of 8 never fills with 2 sessions: every batch is the 2 there are, taken once
    # the first of them has waited 30 ms, and run padded to 8 rows: 8 × 9.82 ms, not 2 ×.
    config = scenario("fixed", 2, 5.0, batch=8, max_delay_ms=30.0)
    tr = trace(config)
    assert set(tr.batches["size"].tolist()) == {2}
    assert (tr.batches["padded"] == 6).all()
    assert np.allclose(tr.batches["compute_s"], 8 * 9.82 / 1000.0)
    first = tr.batches[0]  # both windows arrive in the first frame interval, then wait
    assert first["start"] == pytest.approx(tr.items["arrival"][:2].min() + 0.030)
    rep = report(config)
    assert rep["overall"]["padded"] == {"windows": 6 * len(tr.batches), "share": 0.75}
    assert min(s["delivered"] for s in rep["sessions"]) == len(tr.batches) > 50


def test_dynamic_deadline_survives_overwrites_under_load() -> None:
    # 50 ms is longer than the 33 ms frame interval: counted from the newest arrival,
    # every overwrite would push the deadline back and nothing would ever run.
    rep = report(scenario("dynamic", 4, 5.0, max_batch=8, max_delay_ms=50.0))
    assert set(rep["overall"]["batch_sizes"]) == {"4"}
    assert min(s["delivered"] for s in rep["sessions"]) > 50


def test_adaptive_settles_where_batches_cross_its_objective() -> None:
    # 8 sessions offer 240 windows/s to an 11 ms-per-window device, objective 50 ms.
    # The cap grows 1, 2, 3; a batch of 3 ends 51–66 ms after its oldest arrival (over:
    # cap × 0.9 = 2), a batch of 2 28–43 ms (under: +1), so it alternates 3 and 2.
    tr = trace(scenario("adaptive", 8, 10.0, slo_ms=50.0), linear_curve(0.0, 11.0))
    sizes = tr.batches["size"].tolist()
    worst = worst_latency_ms(tr)
    assert sizes[:3] == [1, 2, 3]
    assert sizes[2:] == [3 if i % 2 == 0 else 2 for i in range(len(sizes) - 2)]
    assert np.all(worst[tr.batches["size"] == 3] > 50.0)
    assert np.all(worst[tr.batches["size"] <= 2] <= 50.0)


@pytest.mark.parametrize(
    ("policy", "knobs"),
    [
        ("all", {"max_batch": 2}),
        ("dynamic", {"max_batch": 2, "max_delay_ms": 5.0}),
        ("adaptive", {"slo_ms": 25.0}),
    ],
    ids=["all-capped", "dynamic", "adaptive"],
)
def test_capped_batches_do_not_starve_a_session(policy: str, knobs: dict[str, Any]) -> None:
    # 6 sessions offer 180 windows/s; batches of ≤ 2 cannot take all of them. Taking the
    # longest-waiting sessions first (overwrites included) keeps everyone served.
    overall = report(scenario(policy, 6, 10.0, **knobs), linear_curve(8.0, 4.0))["overall"]
    assert overall["min_fps"] > 0.8 * overall["mean_fps"]


# -- the rules, one decision at a time --------------------------------------------------


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
    assert BatchAll().select(w, 2.0).take == (4, 3, 2, 1, 0)


def test_dynamic_waits_at_most_its_delay():
    p = Dynamic(max_batch=4, max_delay_ms=20)
    w = [Waiting(0, 1.000), Waiting(1, 1.005)]
    d = p.select(w, 1.010)
    assert d.take == () and d.wait_until == pytest.approx(1.020)
    assert p.select(w, 1.020).take == (0, 1)
    full = [Waiting(i, 1.0 + i * 1e-3) for i in range(5)]
    assert p.select(full, 1.005).take == (0, 1, 2, 3)


def test_dynamic_deadline_counts_from_since():
    p = Dynamic(max_batch=8, max_delay_ms=50)
    assert p.select([Waiting(0, 1.033, since=1.0)], 1.040).wait_until == pytest.approx(1.05)
    assert p.select([Waiting(0, 1.033, since=1.0)], 1.050).take == (0,)


def test_fixed_never_deadlocks_with_fewer_sessions_than_its_batch():
    p = FixedBatch(batch=8, max_delay_ms=30)
    w = [Waiting(0, 0.0), Waiting(1, 0.01)]
    assert p.select(w, 0.02).wait_until == pytest.approx(0.03)
    assert p.select(w, 0.03).take == (0, 1)


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


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_bad_parameters_name_the_value(bad):
    with pytest.raises(ConfigError, match="max_batch") as exc:
        BatchAll(bad)
    assert exc.value.value == bad


def test_make_policy_for_every_name():
    kinds = {
        "oldest": OldestFirst,
        "round-robin": RoundRobin,
        "all": BatchAll,
        "dynamic": Dynamic,
        "fixed": FixedBatch,
        "adaptive": AdaptiveAIMD,
    }
    for name, kind in kinds.items():
        cfg = RunConfig(policy=name, max_batch=8 if name == "dynamic" else None)
        policy = make_policy(cfg)
        assert type(policy) is kind and policy.name == name


# -- knobs changed while a policy runs --------------------------------------------------


def learnt(cap: int, **knobs: Any) -> AdaptiveAIMD:
    """An adaptive policy that has grown its cap to ``cap`` under its objective."""
    p = AdaptiveAIMD(slo_ms=50.0, **knobs)
    while p.cap < cap:
        p.observe(p.cap, 10.0)
    assert p.cap == cap
    return p


def test_retuning_the_objective_keeps_the_learnt_cap():
    p = learnt(6)
    p.retune(RunConfig(policy="adaptive", slo_ms=80.0))
    assert (p.slo_ms, p.cap) == (80.0, 6)
    # What retune avoids: a policy rebuilt for the same config starts again at 1.
    assert make_policy(RunConfig(policy="adaptive", slo_ms=80.0)).cap == 1


def test_lowering_max_batch_clips_the_cap():
    p = learnt(6)
    p.retune(RunConfig(policy="adaptive", max_batch=4))
    assert p.cap == 4
    w = [Waiting(i, 0.0) for i in range(8)]
    assert p.select(w, 0.0).take == (0, 1, 2, 3)
    p.max_batch = None  # lifting the cap does not give back what was clipped
    assert p.cap == 4


def test_a_bad_value_raises_and_changes_nothing():
    p = learnt(6, max_batch=8)
    # Retune is all or none: max_batch (checked first) is fine, slo_ms is not.
    with pytest.raises(ConfigError) as exc:
        p.retune(SimpleNamespace(max_batch=4, slo_ms=-1.0))
    assert exc.value.field == "slo_ms"
    assert (p.max_batch, p.slo_ms, p.cap) == (8, 50.0, 6)
    with pytest.raises(ConfigError, match="max_delay_ms"):
        Dynamic(4, 20.0).max_delay_ms = -5.0


def test_setters_take_effect_on_the_next_select():
    w = [Waiting(i, 1.0 + i * 1e-3) for i in range(5)]

    everything = BatchAll()
    assert everything.select(w, 1.01).take == (0, 1, 2, 3, 4)
    everything.max_batch = 2
    assert everything.select(w, 1.01).take == (0, 1)

    dynamic = Dynamic(max_batch=8, max_delay_ms=20.0)
    assert dynamic.select(w, 1.01).wait_until == pytest.approx(1.02)
    dynamic.max_delay_ms = 5.0
    assert dynamic.select(w, 1.01).take == (0, 1, 2, 3, 4)
    dynamic.max_delay_ms = 20.0
    dynamic.max_batch = 3
    assert dynamic.select(w, 1.01).take == (0, 1, 2)

    fixed = FixedBatch(batch=8, max_delay_ms=30.0)
    assert fixed.select(w, 1.01).take == ()
    fixed.batch = 4
    assert fixed.select(w, 1.01).take == (0, 1, 2, 3)
    fixed.retune(RunConfig(policy="fixed", batch=8, max_delay_ms=5.0))
    assert fixed.select(w, 1.01).take == (0, 1, 2, 3, 4)
