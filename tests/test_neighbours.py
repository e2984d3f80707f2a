"""The noisy-neighbour model and its use on the emulated device."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from batchscope.config import ConfigError, RunConfig
from batchscope.device.load import NeighbourLoad
from batchscope.engine.engine import Engine
from batchscope.engine.neighbours import SLICE_MS, Neighbours
from contract import SMALL_EMULATED, wait_for


def mean_stretch(count: int, duty: float, ms: float = 10.5, n: int = 2000) -> float:
    model = Neighbours(count, duty, seed=1)
    return statistics.mean(model.stretch(ms) for _ in range(n))


def test_no_neighbours_or_no_duty_changes_nothing():
    assert Neighbours(0).stretch(10.5) == 10.5
    assert Neighbours(3, 0.0).stretch(10.5) == 10.5


def test_busy_neighbours_stretch_a_window_like_the_study():
    # the study: 10.5 ms -> about 34 ms with 2-3 busy jobs
    assert mean_stretch(2, 1.0) < 34 < mean_stretch(3, 1.0)
    # time-slicing takes turns: each busy neighbour adds the same time to every batch
    added = [mean_stretch(count, 1.0) - 10.5 for count in (1, 2, 3, 4)]
    steps = np.diff(added)
    assert steps.min() > 0 and steps.max() - steps.min() < 0.05 * steps.mean()
    # ... once per slice of ours after the first: twice the device time, twice the wait
    twice = mean_stretch(2, 1.0, ms=21.0) - 21.0
    assert twice == pytest.approx(2 * added[1], rel=0.1)
    # a batch that fits in one slice waits at most for the slice running when it arrives
    model = Neighbours(3, 1.0, seed=2)
    assert all(0 <= model.stretch(1.5) - 1.5 < SLICE_MS for _ in range(500))


def test_duty_cycle_scales_the_neighbours_share_and_adds_jitter():
    full, half = mean_stretch(2, 1.0), mean_stretch(2, 0.5)
    assert (half - 10.5) == pytest.approx((full - 10.5) / 2, rel=0.1)
    model = Neighbours(2, 0.5, seed=3)
    times = [model.stretch(10.5) for _ in range(200)]
    assert max(times) - min(times) > 2 * SLICE_MS


def test_the_same_seed_gives_the_same_times():
    a, b = Neighbours(2, 0.7, seed=5), Neighbours(2, 0.7, seed=5)
    assert [a.stretch(8.0) for _ in range(50)] == [b.stretch(8.0) for _ in range(50)]


def test_neighbour_knobs_are_checked():
    with pytest.raises(ConfigError, match="neighbour_duty"):
        RunConfig(neighbour_duty=1.5)
    with pytest.raises(ConfigError, match="neighbours"):
        RunConfig(neighbours=17)


def test_adding_neighbours_live_gives_the_running_device_the_model_without_a_new_backend():
    """A live change of neighbours hands the running emulated device the model of the
    config's neighbours between two batches, and the run goes on. What the model does to
    each batch (its seeded stretch of the profile's time) is checked exactly on the test's
    clock (test_worker_rules.py)."""
    e = Engine(RunConfig(**SMALL_EMULATED, sessions=1, policy="oldest"))
    e.open()
    e.start()
    try:
        backend = e.backend
        assert wait_for(lambda: e.store.batches.total >= 10)
        assert not backend.neighbours  # none to begin with
        assert e.apply(e.config.with_changes(neighbours=2)) is None
        assert e.backend is backend  # the device changed load, not the model
        assert (backend.neighbours.count, backend.neighbours.duty) == (2, 1.0)
        since = e.segments.current().start  # batches from here on share the device
        assert wait_for(lambda: np.sum(e.store.batches.view()["start"] >= since) >= 10)
        assert e.report()["config"]["neighbours"] == 2
    finally:
        e.stop()


# -- real neighbours: child processes loading the device --------------------------------------


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        try:  # a zombie waiting for its (dead) parent's reaper has ended too
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                continue
        except OSError:
            continue
        return False
    return True


def test_real_neighbours_start_and_stop_with_the_setting():
    load = NeighbourLoad("cpu", 2, 0.5)
    load.start()
    try:
        assert len(load.pids) == 2
        assert wait_for(lambda: load.alive() == 2)
    finally:
        load.stop()
    assert _gone(load.pids or [])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_no_neighbour_outlives_a_killed_parent(tmp_path):
    # the parent: starts two neighbours, prints their pids, then waits to be killed
    code = (
        "import sys, time\n"
        "from batchscope.device.load import NeighbourLoad\n"
        "load = NeighbourLoad('cpu', 2, 1.0)\n"
        "load.start()\n"
        "print(' '.join(map(str, load.pids)), flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2
        assert wait_for(lambda: not _gone(pids))
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
    assert wait_for(lambda: _gone(pids), timeout=10)


def test_torch_engine_runs_and_stops_its_neighbour_processes():
    config = RunConfig(
        sources=("synthetic",),
        resolution=(128, 72),
        sessions=1,
        backend="torch",
        device="cpu",
        precision="fp32",
        profile=None,
    )
    e = Engine(config)
    e.open()
    e.start()
    try:
        assert e.apply(e.config.with_changes(neighbours=1, neighbour_duty=0.5)) is None
        assert "1 neighbour processes" in e.threads_alive()
        pids = list(e._load.pids)
        assert e.apply(e.config.with_changes(neighbours=0)) is None
        assert _gone(pids)
        assert e.apply(e.config.with_changes(neighbours=2)) is None
        pids = list(e._load.pids)
    finally:
        e.stop()
    assert e.threads_alive() == []
    assert _gone(pids)


def test_the_simulator_stretches_batches_by_the_same_model():
    from batchscope.sim.simulator import simulate

    alone = simulate(RunConfig(sessions=1, policy="oldest", duration_s=10.0))
    shared = simulate(RunConfig(sessions=1, policy="oldest", duration_s=10.0, neighbours=2))
    compute = [r["sessions"][0]["stages_ms"]["compute"] for r in (alone, shared)]
    # laptop-8gb fp16 512x288, batch 1: 9.82 ms alone, and what the model gives 2 neighbours
    assert compute[0] == pytest.approx(9.82, abs=0.01)
    assert compute[1] == pytest.approx(mean_stretch(2, 1.0, ms=9.82), rel=0.03)
    assert compute[1] > 2 * compute[0]
    assert shared["config"]["neighbours"] == 2


def test_the_noisy_neighbour_experiment_predicts_what_the_emulated_device_does():
    from batchscope.experiment import load_experiment
    from batchscope.sim.simulated_experiment import simulate_experiment

    report = simulate_experiment(load_experiment("noisy-neighbour"))
    p50 = [s["overall"]["latency_ms"]["p50"] for s in report["segments"]]
    assert [s["changes"].get("neighbours") for s in report["segments"]][1:] == [2, 3]
    assert p50[0] == pytest.approx(9.8, abs=0.5)  # the GPU to ourselves
    assert p50[1] > 2.5 * p50[0] and p50[2] > p50[1]  # each neighbour takes its slices


class FakeNVML:
    """Just what gpu_sharing asks of pynvml."""

    NVML_DEVICE_MIG_ENABLE = 1

    class NVMLError(Exception):
        pass

    def __init__(self, mig: int | None) -> None:
        self.mig = mig

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        if self.mig is None:
            raise self.NVMLError("Not Supported")
        return self.mig, self.mig


@pytest.mark.parametrize(
    ("mig", "pipe", "said"),
    [
        (1, False, "MIG on"),
        (0, True, "MPS on"),
        (None, False, "time-sliced"),
        (0, False, "time-sliced"),
    ],
)
def test_the_status_says_how_the_gpu_is_shared(monkeypatch, tmp_path, mig, pipe, said):
    from batchscope.device import memory

    monkeypatch.setattr(memory, "_nvml", lambda: FakeNVML(mig))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    if pipe:
        (tmp_path / "control").write_text("")
    assert memory.gpu_sharing(0) == said


def test_no_nvml_says_nothing(monkeypatch):
    from batchscope.device import memory

    monkeypatch.setattr(memory, "_nvml", lambda: None)
    assert memory.gpu_sharing(0) == ""


def test_a_segment_with_neighbours_is_predicted_with_them():
    from batchscope.sim.prediction import add_predictions
    from batchscope.sim.simulator import simulate

    config = RunConfig(sessions=1, policy="oldest", duration_s=5.0, neighbours=2)
    report = simulate(config)
    segment = {  # a measured segment (one too short to measure has no figures to predict)
        "changes": {"neighbours": 2},
        "config": report["config"],
        "measured_s": 5.0,
        "too_short": False,
        "overall": report["overall"],
    }
    predicted = add_predictions({"segments": [segment]})["segments"][0]["predicted"]
    assert predicted["latency_ms"]["p50"] > 2.5 * 9.82  # each window waits out the slices
    fault = {**segment, "changes": {"fault": {"kind": "stall", "for_s": 2.0, "session": 0}}}
    assert add_predictions({"segments": [fault]})["segments"][0]["predicted"] is None
