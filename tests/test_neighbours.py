"""The noisy-neighbour model and its use on the emulated device."""

from __future__ import annotations

import statistics

import pytest

from batchscope.config import ConfigError, RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.neighbours import SLICE_MS, SWITCH_MS, Neighbours
from contract import SMALL_EMULATED, wait_for


def mean_stretch(count: int, duty: float, ms: float = 10.5, n: int = 2000) -> float:
    model = Neighbours(count, duty, seed=1)
    return statistics.mean(model.stretch(ms) for _ in range(n))


def test_no_neighbours_or_no_duty_changes_nothing():
    assert Neighbours(0).stretch(10.5) == 10.5
    assert Neighbours(3, 0.0).stretch(10.5) == 10.5


def test_busy_neighbours_stretch_a_window_like_the_study():
    # 10.5 ms alone needs 6 slices: 5 rounds of N neighbour slices in between,
    # plus half a slice on average for the one running when the batch arrives
    for count in (2, 3):
        expected = 10.5 + SLICE_MS / 2 + 5 * count * (SLICE_MS + SWITCH_MS)
        assert mean_stretch(count, 1.0) == pytest.approx(expected, rel=0.02)
    # the study: 10.5 ms -> about 34 ms with 2-3 busy jobs
    assert mean_stretch(2, 1.0) < 34 < mean_stretch(3, 1.0)


def test_duty_cycle_scales_the_neighbours_share_and_adds_jitter():
    full, half = mean_stretch(2, 1.0), mean_stretch(2, 0.5)
    assert (half - 10.5) == pytest.approx((full - 10.5) / 2, rel=0.1)
    model = Neighbours(2, 0.5, seed=3)
    times = [model.stretch(10.5) for _ in range(200)]
    assert max(times) - min(times) > 2 * SLICE_MS


def test_the_same_seed_gives_the_same_times():
    a, b = Neighbours(2, 0.7, seed=5), Neighbours(2, 0.7, seed=5)
    assert [a.stretch(8.0) for _ in range(50)] == [b.stretch(8.0) for _ in range(50)]


def test_neighbours_are_refused_off_the_emulated_device():
    with pytest.raises(ConfigError, match="neighbours"):
        RunConfig(backend="torch", device="cpu", neighbours=2)
    with pytest.raises(ConfigError, match="neighbour_duty"):
        RunConfig(neighbour_duty=1.5)
    with pytest.raises(ConfigError, match="neighbours"):
        RunConfig(neighbours=17)


def test_adding_neighbours_live_stretches_batches_without_a_new_backend():
    e = Engine(RunConfig(**SMALL_EMULATED, sessions=1, policy="oldest"))
    e.open()
    e.start()
    try:
        backend = e.backend
        assert wait_for(lambda: e.report()["overall"]["throughput_wps"] > 0)
        assert e.apply(e.config.with_changes(neighbours=2)) is None
        assert e.backend is backend  # the device changed load, not the model
        e.reset_stats(announce=False)
        assert wait_for(lambda: e.report()["sessions"][0]["delivered"] >= 20)
        compute = e.report()["sessions"][0]["stages_ms"]["compute"]
        # 4.69 ms alone (laptop 256x144 fp16, batch 1): 3 slices, 2 rounds of 2 neighbours
        expected = 4.69 + SLICE_MS / 2 + 2 * 2 * (SLICE_MS + SWITCH_MS)
        assert compute == pytest.approx(expected, rel=0.15)
        assert e.report()["config"]["neighbours"] == 2
    finally:
        e.stop()
