"""`fixed` is a constant batch shape: a short batch is padded to it, the padding costs the
device a full batch's time and is counted apart (it was `dynamic` under another name:
`fixed 4, 10 ms` and `dynamic ≤4, 10 ms` gave identical batches, fps and p99)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchscope.cli import main
from batchscope.config import RunConfig
from batchscope.engine.backends import DeviceOutOfMemory, EmulatedBackend
from batchscope.engine.engine import Engine
from batchscope.engine.policies import Waiting, make_policy
from batchscope.engine.session import Window
from batchscope.profiles.profile import load_profile
from batchscope.sim.planner import Budget, plan
from batchscope.sim.simulator import simulate
from contract import SMALL_EMULATED, wait_for
from simulated import simulate_trace

#: laptop-8gb fp16 256x144: 4.69 ms for 1 window, 9.29 ms for 4 (6.22 ms for 2)
CURVE = load_profile("laptop-8gb").curve("fp16", (256, 144))
FIXED = {"policy": "fixed", "batch": 4, "max_delay_ms": 10.0}
DYNAMIC = {"policy": "dynamic", "max_batch": 4, "max_delay_ms": 10.0}


def config(sessions: int, **policy) -> RunConfig:
    return RunConfig(**SMALL_EMULATED, sessions=sessions, fps=30.0, duration_s=10.0, **policy)


def test_only_fixed_has_a_shape_and_a_retune_moves_it():
    for name in ("oldest", "round-robin", "all", "adaptive"):
        assert make_policy(RunConfig(policy=name)).shape is None
    assert make_policy(RunConfig(**DYNAMIC)).shape is None
    fixed = make_policy(RunConfig(**FIXED))
    assert fixed.shape == 4
    # it takes what dynamic takes: 2 windows after the delay, no more
    two = [Waiting(0, 1.0), Waiting(1, 1.001)]
    assert fixed.select(two, 1.02).take == (0, 1)
    fixed.retune(RunConfig(**{**FIXED, "batch": 2}))
    assert fixed.shape == 2


def test_the_simulator_runs_a_short_fixed_batch_at_the_full_shape():
    """3 sessions, batch 4: every batch is short, and each takes ms(4), not ms(size)."""
    trace = simulate_trace(config(3, **FIXED), CURVE)
    batches = trace.batches
    assert len(batches) > 100 and (batches["size"] < 4).all()
    assert (batches["padded"] == 4 - batches["size"]).all()
    assert np.allclose(batches["compute_s"], CURVE.ms(4) / 1000.0)
    dynamic = simulate_trace(config(3, **DYNAMIC), CURVE).batches
    assert (dynamic["padded"] == 0).all()
    sizes = dynamic["size"]
    assert np.allclose(dynamic["compute_s"], [CURVE.ms(int(n)) / 1000.0 for n in sizes])


def test_fixed_and_dynamic_now_differ_and_the_report_counts_the_padding():
    fixed = simulate(config(3, **FIXED))["overall"]
    dynamic = simulate(config(3, **DYNAMIC))["overall"]
    assert fixed["batch_sizes"] == dynamic["batch_sizes"]  # the same windows taken
    assert fixed["latency_ms"]["p99"] > dynamic["latency_ms"]["p99"]
    assert fixed["busy"] > dynamic["busy"]
    real = sum(int(k) * v for k, v in fixed["batch_sizes"].items())
    pads = sum((4 - int(k)) * v for k, v in fixed["batch_sizes"].items())
    assert fixed["padded"] == {"windows": pads, "share": round(pads / (pads + real), 4)}
    assert "padded" not in dynamic  # the report of every other policy is as it was


def test_the_emulated_device_runs_the_padded_rows():
    backend = EmulatedBackend(load_profile("laptop-8gb"), "fp16", (256, 144), oom_above=3)
    ran = []
    backend.compute = lambda rows, start: ran.append(rows) or start
    frame = np.zeros((144, 256, 3), np.uint8)
    windows = [Window(i, 3, 3, (frame,) * 3, 0.0) for i in range(2)]
    result = backend.run(windows[:1], pad=2)
    assert ran == [3] and len(result.detections) == 1
    with pytest.raises(DeviceOutOfMemory, match="batch 4"):  # the padding needs memory too
        backend.run(windows, pad=2)


def test_a_live_report_counts_the_padding_its_worker_ran():
    """The live report counts the padding rows its worker recorded. That the worker pads a
    short batch to the shape (the device runs the rows, the batch records them) is checked
    exactly on the test's clock (test_worker_rules.py); here, that a live run's report
    carries it."""
    e = Engine(config(2, **FIXED))
    e.open()
    e.start()
    try:
        assert wait_for(lambda: sum(e.report()["overall"]["batch_sizes"].values()) > 10)
    finally:
        e.stop()
    overall = e.report()["overall"]  # stopped: every batch is in
    batches = e.store.batches.view()
    batches = batches[batches["end"] >= e.figures.run.lo]
    real, padded = int(batches["size"].sum()), int(batches["padded"].sum())
    assert padded > 0  # 2 sessions, batches of 4: every batch ran short
    assert overall["padded"] == {"windows": padded, "share": round(padded / (padded + real), 4)}


def test_the_torch_backend_runs_the_padded_tensor():
    from batchscope.engine.backends import TorchBackend

    backend = TorchBackend("cpu", "fp32", (64, 32), checkpoint="untrained")
    model, rows = backend.model, []
    backend.model = lambda x: rows.append(len(x)) or model(x)
    frame = np.zeros((32, 64, 3), np.uint8)
    result = backend.run([Window(i, 3, 3, (frame,) * 3, 0.0) for i in range(2)], pad=2)
    assert rows == [4] and len(result.detections) == 2
    backend.close()


@pytest.mark.slow
def test_onnx_runtime_runs_the_padded_tensor():
    pytest.importorskip("onnxruntime")
    from batchscope.engine.backends import OnnxBackend

    backend = OnnxBackend("cpu", "fp32", (64, 32), checkpoint="untrained")  # an export: ~7 s
    session, rows = backend._session, []

    class Spy:
        def run(self, names, feeds):
            rows.extend(len(x) for x in feeds.values())
            return session.run(names, feeds)

    backend._session = Spy()
    frame = np.zeros((32, 64, 3), np.uint8)
    result = backend.run([Window(i, 3, 3, (frame,) * 3, 0.0) for i in range(3)], pad=1)
    assert rows == [4] and len(result.detections) == 3
    backend.close()


def test_the_planner_pays_for_the_padding(tmp_path):
    """20 ms a window, no gain from batching: a fixed batch of 2 at 1 session runs 40 ms."""
    path = tmp_path / "flat.json"
    path.write_text(
        json.dumps(
            {
                "format": "batchscope-profile/1",
                "name": "flat",
                "curves": [
                    {
                        "precision": "fp16",
                        "resolution": [512, 288],
                        "points": [{"batch": 1, "ms": 20.0}, {"batch": 2, "ms": 40.0}],
                    }
                ],
            }
        )
    )
    profile = load_profile(path)
    budget = Budget(10.0, 30.0, 0.9)  # p99 ≤ 30 ms: one window alone (20 ms) meets it
    (fixed,) = plan(profile, "fp16", (512, 288), budget, ["fixed"], 256, 5.0, 2).policies
    assert fixed.max_sessions == 0  # padded to 2, a lone window takes 40 ms (+ its delay)
    assert fixed.at_max.p99_worst >= 40.0
    (dynamic,) = plan(profile, "fp16", (512, 288), budget, ["dynamic"], 256, 5.0, 2).policies
    assert dynamic.max_sessions == 1


def test_the_batch_help_says_what_fixed_means(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "every batch runs this many rows, a short one padded" in help_text
