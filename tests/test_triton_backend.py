"""--backend triton: a real Triton server (the nvidia-pytriton wheel's, from .venv-triton)
forms the batches of BatchScope's client-side sessions; and plan --export's repository
loads into it.

Structure, not throughput (two cores): batches within the cap as the server counted them,
a live change applied by a reload of the same server, every listener on loopback, the
report's ``serving`` object, the exported repository's config, refusals and outputs, and
nothing left behind by a stop or by a BatchScope killed with SIGKILL. ``./batchscope.sh
test`` sets Triton up on Linux x86_64; elsewhere (or set up by hand without it) these
tests skip, except under CI, where a missing Triton fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from tests.contract import SMALL_EMULATED, check_plan_verify, wait_for
from tests.processes import (
    alive,
    listening,
    on_loopback,
    run_then_kill,
    served,
    started_engine,
)

from batchscope.config import ConfigError, RunConfig
from batchscope.device.checks import BackendError
from batchscope.engine.serving.triton_backend import MODEL
from batchscope.engine.serving.triton_server import ENV_VAR, TritonServer, find_triton
from batchscope.setting import load_setting, triton_batching

pytestmark = pytest.mark.slow
START_S = 90.0  # the server, and the model's process, on a busy two-core machine

try:
    find_triton()
    MISSING = None
except BackendError as exc:
    MISSING = str(exc)
if MISSING and os.environ.get("CI"):
    raise RuntimeError(f"CI runs the Triton tests: {MISSING}")
if MISSING:
    pytest.skip(MISSING, allow_module_level=True)

grpcclient = pytest.importorskip("tritonclient.grpc")


def batch_counts(report: dict) -> dict[int, int]:
    return {int(k): v for k, v in report["serving"]["batch_sizes"].items()}


@pytest.fixture(scope="module")
def triton_engine():
    engine = started_engine("triton", START_S)
    yield engine
    engine.stop(10.0)


def test_triton_forms_the_batches_within_the_cap_and_the_report_says_so(triton_engine):
    engine = triton_engine
    engine.reset_stats()
    assert wait_for(lambda: served(engine) > 60, 60.0)
    report = engine.report()
    serving = report["serving"]
    assert (serving["engine"], serving["version"]) == ("triton", "2.51.0")
    sizes = batch_counts(report)
    assert sizes and max(sizes) <= 3  # the cap, as Triton's statistics counted the batches
    assert max(sizes) > 1  # six sessions, 20 ms to gather: Triton batched some
    recorded = {int(k): v for k, v in report["overall"]["batch_sizes"].items()}
    assert max(recorded) <= 3
    assert set(serving["stages_ms"]) == {"client", "to_engine_and_queue", "compute", "back"}
    assert serving["stages_ms"]["compute"] > 0
    assert set(serving["server_ms"]) == {"queue", "compute_input", "compute_infer",
                                         "compute_output"}  # fmt: skip
    assert serving["server_ms"]["compute_infer"] > 0
    assert serving["config"] == {
        "max_batch_size": 3,
        "preferred_batch_size": 3,
        "max_queue_delay_us": 20000,
    }
    assert report["config"]["device"] == "triton: emulated:laptop-8gb"


def test_a_live_change_reloads_the_model_in_the_same_server(triton_engine):
    engine = triton_engine
    backend = engine.backend
    server_pid = backend.server.pid
    assert engine.apply(engine.config.with_changes(max_batch=1, max_delay_ms=0.0)) is None
    assert wait_for(lambda: backend.knobs == (1, 1, 0), 30.0)
    # the old configuration's instance finishes the requests it holds (one a session)
    after = served(engine)
    assert wait_for(lambda: served(engine) > after + 24, 60.0)
    engine.reset_stats()
    assert wait_for(lambda: served(engine) > 40, 60.0)
    report = engine.report()
    assert set(batch_counts(report)) == {1}  # every batch from the reset on
    reloads = report["serving"]["reloads"]
    assert reloads[-1]["max_batch_size"] == 1 and reloads[-1]["seconds"] > 0
    said = [e.message for e in engine.events() if "Triton loaded the new batching" in e.message]
    assert said and "max_batch_size 1" in said[-1]  # the reload's time, said as an event
    assert backend.server.pid == server_pid  # a new configuration, not a new server
    assert engine.apply(engine.config.with_changes(max_batch=3, max_delay_ms=20.0)) is None


def test_a_slow_device_fault_is_refused_with_the_reason(triton_engine):
    from batchscope.experiment import Fault

    error = triton_engine.inject(Fault("slow_device", 2.0, None, 3.0))
    assert error is not None and "slow-device faults run on BatchScope's worker" in error


def test_every_listener_triton_started_is_on_loopback(triton_engine):
    pids = triton_engine.backend.server.processes()
    sockets = listening(pids)
    assert sockets, "Triton's gRPC server was not found"
    off = [(pid, addr) for pid, addr in sockets if not on_loopback(addr)]
    assert off == [], f"listening off loopback: {off}"


def test_switching_live_to_batchscope_s_worker_stops_triton_and_back_starts_it(triton_engine):
    """The engine switched live (the app's Engine list): off Triton its server and model
    process are gone (by PID) and its workspace removed; back on Triton a new server."""
    engine = triton_engine
    server = engine.backend.server
    pids = server.processes()
    said_before = len(engine.events())
    assert engine.apply(engine.config.with_changes(backend="emulated")) is None
    assert engine.config.serving is None and "serving" not in engine.report()
    assert wait_for(lambda: not alive(pids), 30.0), f"left running: {alive(pids)}"
    assert not server.workspace.exists()
    now = served(engine)
    assert wait_for(lambda: served(engine) > now + 30, 30.0)  # the worker delivers
    assert engine.apply(engine.config.with_changes(backend="triton")) is None
    assert engine.backend.server.pid not in pids
    now = served(engine)
    assert wait_for(lambda: served(engine) > now + 30, START_S)
    serving = engine.report()["serving"]
    assert serving["engine"] == "triton" and max(batch_counts(engine.report())) <= 3
    assert [e.message for e in engine.events()[said_before:] if e.kind == "error"] == []


def test_plan_verify_on_triton_prints_planned_vs_served(tmp_path, capsys):
    check_plan_verify("triton", "a real Triton server", tmp_path, capsys)


def test_stopping_batchscope_stops_every_triton_process(triton_engine):
    """The module's engine, stopped (after the tests that use it): gone, by PID."""
    server = triton_engine.backend.server
    pids = server.processes()
    # the server and its model's process; if not, say what became of the server
    errors = [e.message for e in triton_engine.events() if e.kind == "error"]
    why = f"server exit {server.process and server.process.poll()}: {server.log_tail()}; {errors}"
    assert len(pids) >= 2, why
    assert triton_engine.stop(10.0) == []
    assert wait_for(lambda: not alive(pids), 30.0), f"left running: {alive(pids)}"


# -- what Triton refuses, said before it starts ----------------------------------------


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"policy": "adaptive"}, "Triton has no live batch cap"),
        ({"profile": None, "device": "cuda:0", "precision": "fp16"}, "on the CPU"),
        ({"profile": None, "precision": "bf16"}, "Triton runs the ONNX export"),
        ({"neighbours": 2}, "no neighbours to stretch"),
    ],
)
def test_what_triton_cannot_serve_is_one_clear_error(changes, words):
    with pytest.raises(ConfigError, match=words):
        RunConfig(**{**SMALL_EMULATED, "backend": "triton", **changes})


def test_a_missing_triton_is_one_line_naming_the_set_up(tmp_path):
    env = {**os.environ, ENV_VAR: str(tmp_path / "nowhere")}
    cmd = [sys.executable, "-m", "batchscope", "run", "synthetic", "--backend", "triton",
           "--sessions", "1", "--resolution", "256x144", "--duration", "1"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Triton is not set up" in proc.stderr and "./batchscope.sh triton" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_killed_batchscope_leaves_no_triton_behind(tmp_path):
    started, said = run_then_kill("triton", "triton_python_backend_stub", START_S, tmp_path)
    assert "starting Triton on 127.0.0.1:" in said  # the terminal says what starts
    assert wait_for(lambda: not alive(started), 30.0), f"left behind: {alive(started)}"
    # nor its workspace and model repository (the reaper removes them after the kills)
    assert wait_for(lambda: not list(tmp_path.glob("batchscope-*")), 30.0), (
        f"left behind: {sorted(p.name for p in tmp_path.glob('batchscope-*'))}"
    )


# -- plan --export's repository, in the real server -------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """plan --export's folder with the export-onnx command it names run (fp32 256x144), for
    a profile swept on this CPU with ONNX Runtime (a GPU's export serves its curve)."""
    from batchscope.cli import main

    folder = tmp_path_factory.mktemp("deploy")
    profile = folder / "cpu.json"
    points = [{"batch": b, "ms": ms} for b, ms in ((1, 8.0), (2, 14.0), (4, 26.0))]
    profile.write_text(json.dumps({
        "name": "cpu-test", "device": "CPU", "device_id": "cpu", "threads": 2,
        "curves": [{"precision": "fp32", "resolution": [256, 144], "runtime": "onnxruntime",
                    "points": points}],
    }))  # fmt: skip
    assert main(["plan", "--profile", str(profile), "--precision", "fp32", "--resolution",
                 "256x144", "--p99-ms", "60", "--policies", "dynamic", "--seeds", "1",
                 "--duration", "5", "--runtime", "onnxruntime",
                 "--export", str(folder)]) == 0  # fmt: skip
    onnx = folder / "triton" / MODEL / "1" / "model.onnx"
    assert main(["export-onnx", "--out", str(onnx), "--precision", "fp32",
                 "--resolution", "256x144"]) == 0  # fmt: skip
    server = TritonServer(folder / "triton")
    client = grpcclient.InferenceServerClient(server.url)
    client.load_model(MODEL)  # as written, config.pbtxt and all
    yield folder, server, client
    client.close()
    server.close()


def frames(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 9, 144, 256), dtype=np.uint8)


def infer(client, x: np.ndarray):
    tensor = grpcclient.InferInput("frames", list(x.shape), "UINT8")
    tensor.set_data_from_numpy(x)
    return client.infer(MODEL, [tensor])


def test_the_exported_repository_loads_with_the_setting_of_policy_json(exported):
    folder, _, client = exported
    assert client.is_model_ready(MODEL)
    setting = load_setting(folder / "policy.json")
    cap, preferred, delay_us = triton_batching(
        setting.policy, setting.max_batch, setting.batch, setting.max_delay_ms, setting.sessions
    )
    config = client.get_model_config(MODEL, as_json=True)["config"]
    assert config["max_batch_size"] == cap
    batching = config.get("dynamic_batching", {})
    assert [int(b) for b in batching.get("preferred_batch_size", [])] == (
        [preferred] if preferred else []
    )
    assert int(batching.get("max_queue_delay_microseconds", 0)) == delay_us
    assert config["backend"] == "python"


def test_the_exported_model_runs_with_the_threading_its_curve_was_measured_with(exported):
    _, _, client = exported
    parameters = client.get_model_config(MODEL, as_json=True)["config"]["parameters"]
    threads = {k: v["string_value"] for k, v in parameters.items()}
    assert threads == {"runner": "onnxruntime", "intra_op_threads": "2", "inter_op_threads": "1"}


def test_a_gpu_profile_s_export_serves_its_curve_in_the_real_server(tmp_path):
    """Issue 46: a laptop-8gb plan's repository served the real model on the CPU (155.8 ms
    a request where the curve says 4.69); it serves the curve now, no model.onnx needed."""
    import time

    from batchscope.cli import main

    assert main(["plan", "--profile", "laptop-8gb", "--precision", "fp16", "--resolution",
                 "256x144", "--p99-ms", "50", "--policies", "oldest", "--seeds", "1",
                 "--duration", "5", "--export", str(tmp_path)]) == 0  # fmt: skip
    server = TritonServer(tmp_path / "triton")
    client = grpcclient.InferenceServerClient(server.url)
    try:
        client.load_model(MODEL)
        took = []
        for _ in range(5):
            t0 = time.perf_counter()
            heatmaps = infer(client, frames(1)).as_numpy("heatmaps")
            took.append((time.perf_counter() - t0) * 1000)
        assert heatmaps.shape == (1, 3, 144, 256) and not heatmaps.any()  # no model ran
        assert 4.69 <= min(took) < 100  # the curve's wait, not a CPU model's 150 ms
    finally:
        client.close()
        server.close()


def test_a_batch_over_the_cap_is_refused(exported):
    _, _, client = exported
    cap = client.get_model_config(MODEL, as_json=True)["config"]["max_batch_size"]
    with pytest.raises(Exception, match="batch-size must be <="):
        infer(client, frames(cap + 1))


def test_its_outputs_equal_onnx_runtime_s(exported):
    import onnxruntime as ort

    folder, _, client = exported
    x = frames(2, seed=3)
    got = infer(client, x).as_numpy("heatmaps")
    session = ort.InferenceSession(
        str(folder / "triton" / MODEL / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    want = session.run(["heatmaps"], {"frames": x})[0]
    assert got.shape == want.shape == (2, 3, 144, 256)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_concurrent_sessions_never_get_a_batch_over_the_cap_and_a_live_change_applies(exported):
    _, _, client = exported
    config = client.get_model_config(MODEL, as_json=True)["config"]
    cap = config["max_batch_size"]

    def burst(n: int) -> None:
        threads = [threading.Thread(target=infer, args=(client, frames(1, i))) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    burst(2 * cap + 2)
    stats = client.get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
    sizes = {int(b["batch_size"]) for b in stats["batch_stats"]}
    assert sizes and max(sizes) <= cap
    # a new batching setting, live: load_model with the configuration changed
    config["max_batch_size"] = 1
    config["dynamic_batching"] = {"max_queue_delay_microseconds": 0}
    client.load_model(MODEL, config=json.dumps(config))
    assert client.get_model_config(MODEL, as_json=True)["config"]["max_batch_size"] == 1
    with pytest.raises(Exception, match="batch-size must be <= 1"):
        infer(client, frames(2))
    assert infer(client, frames(1)).as_numpy("heatmaps").shape == (1, 3, 144, 256)
