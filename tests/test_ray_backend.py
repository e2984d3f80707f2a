"""--backend ray: a real Ray Serve forms the batches of BatchScope's client-side sessions.

One local Ray for the module (it takes 10-30 s to start on two cores): batches formed
within the cap, a live knob change applied by the replica's setters in the same process,
every listener on loopback, the report's ``serving`` object, and nothing left behind by a
stop or by a BatchScope killed with SIGKILL. Structure, not throughput: the machine has
two cores.
"""

from __future__ import annotations

import os
from collections import Counter

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
from batchscope.engine.engine import Engine
from batchscope.engine.serving.reaper import descendants

pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'ray[serve]'")

pytestmark = pytest.mark.slow
START_S = 120.0  # a cold Ray, Serve and one replica on a busy two-core machine


@pytest.fixture(scope="module")
def ray_engine():
    engine = started_engine("ray", START_S)
    yield engine
    engine.stop(10.0)


def test_ray_forms_the_batches_within_the_cap_and_the_report_says_so(ray_engine):
    engine = ray_engine
    engine.reset_stats()
    assert wait_for(lambda: served(engine) > 60, 60.0)
    report = engine.report()
    serving = report["serving"]
    assert serving["engine"] == "ray"
    import ray

    assert serving["version"] == ray.__version__
    sizes = {int(k): v for k, v in serving["batch_sizes"].items()}
    assert sizes and max(sizes) <= 3  # the cap, as the replica counted its batches
    assert max(sizes) > 1  # six sessions, 20 ms to gather: Ray batched some
    recorded = {int(k): v for k, v in report["overall"]["batch_sizes"].items()}
    assert max(recorded) <= 3
    assert set(serving["stages_ms"]) == {"client", "to_replica", "queue", "compute", "back"}
    assert serving["stages_ms"]["compute"] > 0
    assert report["config"]["backend"] == "ray"
    assert report["config"]["device"].startswith("ray: emulated:")


def test_a_live_knob_change_is_set_in_the_same_replica(ray_engine):
    engine = ray_engine
    backend = engine.backend
    pid = backend.stats()["pid"]
    assert engine.apply(engine.config.with_changes(max_batch=1, max_delay_ms=0.0)) is None
    # the replica holds the new knob: every batch it forms from the reset on has it
    assert wait_for(lambda: backend.stats()["max_batch_size"] == 1, 10.0)
    # Ray's batcher applies it to the batches it starts collecting from then on: the one
    # it was collecting (old knob) can still be formed after the setter answered (seen
    # once in CI: a batch of 3 after the reset), so the reset waits for two more batches
    formed = sum(backend.counts().values())
    assert wait_for(lambda: sum(backend.counts().values()) >= formed + 2, 10.0)
    engine.reset_stats()
    assert wait_for(lambda: served(engine) > 40, 60.0)
    sizes = {int(k) for k in engine.report()["serving"]["batch_sizes"]}
    assert sizes == {1}
    assert backend.stats()["pid"] == pid  # set by the replica's setters: no new replica
    assert engine.apply(engine.config.with_changes(max_batch=3, max_delay_ms=20.0)) is None


def test_a_run_switches_live_onto_ray_and_off_it(ray_engine):
    """A run on BatchScope's worker switches onto Ray and back (the app's Engine list): on
    the module's Ray, which the other engine holds, a deployment of its own, whose replica
    is gone (by PID) once the run is off Ray; the other engine serves throughout. (Ray
    itself shut down when the last run leaves it: tests/test_engine_switch.py, and
    benchmarks/engine_switch.py: no process left.)"""
    config = ray_engine.config.with_changes(backend="emulated", sessions=3)
    engine = Engine(config)
    engine.open()
    engine.start()
    try:
        assert engine.apply(engine.config.with_changes(backend="ray")) is None
        now = served(engine)
        assert wait_for(lambda: served(engine) > now + 30, START_S)
        assert engine.report()["serving"]["engine"] == "ray"
        replica = engine.backend.replica_pid
        assert replica != ray_engine.backend.replica_pid
        said_before = len(engine.events())
        assert engine.apply(engine.config.with_changes(backend="emulated")) is None
        assert engine.config.serving is None and "serving" not in engine.report()
        assert wait_for(lambda: not alive({replica}), 30.0), f"replica {replica} left running"
        now = served(engine)
        assert wait_for(lambda: served(engine) > now + 30, 30.0)  # the worker delivers
        assert [e.message for e in engine.events()[said_before:] if e.kind == "error"] == []
    finally:
        assert engine.stop(10.0) == []
    now = served(ray_engine)
    assert wait_for(lambda: served(ray_engine) > now + 20, 30.0)  # still on its Ray


def test_every_listener_ray_started_is_on_loopback(ray_engine):
    ours = descendants(os.getpid())
    sockets = listening(ours | {os.getpid()})
    assert sockets, "Ray's servers were not found"
    off = [(pid, addr) for pid, addr in sockets if not on_loopback(addr)]
    assert off == [], f"listening off loopback: {off}"


def test_a_bad_ray_address_is_one_clear_error():
    with pytest.raises(ConfigError, match="needs the ray backend"):
        RunConfig(**SMALL_EMULATED, ray_address="127.0.0.1:1")  # emulated, not ray


def test_plan_verify_on_ray_prints_planned_vs_served(ray_engine, tmp_path, capsys):
    """Served by a Ray Serve (the module's Ray: one per process), planned vs served."""
    check_plan_verify("ray", "a real Ray Serve", tmp_path, capsys)


def test_two_replicas_serve_the_sessions_and_the_report_has_each(ray_engine):
    """``--devices 2`` with the Ray backend: a deployment of two replicas on the module's
    Ray, Ray's router spreading the sessions' requests; the report's ``devices`` list has
    each replica (by PID) with what it served; a knob change reaches both replicas (Ray
    has no call to every replica: repeated until each answered); a stop ends both."""
    config = ray_engine.config.with_changes(devices=2, sessions=6)
    engine = Engine(config)
    engine.open()
    engine.start()
    try:
        backend = engine.backend
        assert len(backend.replica_pids) == 2
        engine.reset_stats()
        assert wait_for(lambda: served(engine) > 90, START_S)
        report = engine.report()
        devices = report["devices"]
        assert report["router"] == "least-loaded" and report["serving"]["replicas"] == 2
        pids = {int(d["device"].split("pid ")[1].rstrip(")")) for d in devices}
        assert pids == set(backend.replica_pids)  # both served
        assert all(d["sessions"] > 0 and d["batch_sizes"] and 0 < d["busy"] <= 1 for d in devices)
        # one read of the records: the replicas' batches are the overall ones
        each = sum((Counter({int(k): n for k, n in d["batch_sizes"].items()}) for d in devices),
                   Counter())  # fmt: skip
        assert each == Counter({int(k): n for k, n in report["overall"]["batch_sizes"].items()})
        assert engine.apply(engine.config.with_changes(max_batch=1, max_delay_ms=0.0)) is None

        def knobs() -> dict[int, int]:  # each replica's cap (set by the worker's next step)
            answers = backend._every_replica(backend._handle.stats, 2)
            return {pid: a["max_batch_size"] for pid, a in answers.items()}

        assert wait_for(lambda: set(knobs().values()) == {1}, 30.0)
        assert set(knobs()) == set(backend.replica_pids)  # the same replicas: no redeploy
    finally:
        assert engine.stop(10.0) == []
    assert wait_for(lambda: not alive(set(backend.replica_pids)), 30.0)


def test_plan_verify_on_ray_two_replicas_prints_planned_vs_served(ray_engine, tmp_path, capsys):
    """``plan --verify --on ray --devices 2``: two devices' answer served by two replicas,
    planned on two simulated devices with least-loaded (Ray's rule)."""
    import json

    from batchscope.cli import main

    out = tmp_path / "plan.json"
    args = ["plan", "--profile", "laptop-8gb", "--resolution", "512x288", "--seeds", "2",
            "--p99-ms", "50", "--devices", "2", "--verify", "--on", "ray",
            "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    data = json.loads(out.read_text())
    rec, verify = data["recommended"], data["verify"]
    assert rec["devices"] == 2 and rec["max_sessions"] >= 2 * rec["per_device"]
    assert verify["on"] == "ray" and verify["served"]["throughput_wps"] > 0
    text = capsys.readouterr().out
    assert f"× {rec['max_sessions']} sessions served by a real Ray Serve on 2 replicas" in text


def test_replicas_on_cuda_ask_one_gpu_each_and_a_cluster_without_is_refused(ray_engine):
    """``--device cuda``: each replica asks Ray for a GPU of its own (``cuda:N``: every
    replica shares that one, nothing asked); a cluster with fewer GPUs than replicas is
    refused before deploying (Ray would wait for them), and the run stays as it was."""
    import ray

    from batchscope.device.checks import BackendError
    from batchscope.engine.serving.ray_serve import check_gpus, replica_actor_options

    config = ray_engine.config
    assert replica_actor_options(config) == {"num_cpus": 0}  # the emulated curve
    gpu = config.with_changes(profile=None, device="cuda", devices=2)
    assert gpu.runner == "torch"
    assert replica_actor_options(gpu) == {"num_cpus": 0, "num_gpus": 1}
    assert replica_actor_options(gpu.with_changes(device="cuda:1")) == {"num_cpus": 0}
    check_gpus(gpu, 2.0)
    with pytest.raises(BackendError, match=r"has 1 GPUs: .* give --devices 1 or fewer"):
        check_gpus(gpu, 1.0)
    if ray.cluster_resources().get("GPU", 0) == 0:
        error = ray_engine.apply(gpu)
        assert error is not None and "the Ray cluster has no GPU" in error
        assert ray_engine.config == config
        n = ray_engine.snapshot().sessions[0].delivered
        assert wait_for(lambda: ray_engine.snapshot().sessions[0].delivered > n + 5, START_S)


def test_stopping_batchscope_stops_every_ray_process(ray_engine):
    """The module's engine, stopped (its last test): what Ray started is gone, by PID."""
    ray_processes = descendants(os.getpid())
    assert ray_processes
    assert ray_engine.stop(10.0) == []
    assert wait_for(lambda: not (descendants(os.getpid()) & ray_processes), 30.0), (
        f"left running: {descendants(os.getpid()) & ray_processes}"
    )


def test_a_killed_batchscope_leaves_no_ray_behind():
    started, said = run_then_kill("ray", "ServeReplica", START_S)
    assert "starting a local Ray on loopback" in said  # the terminal says what starts
    # Ray's agents alone waited 60 s for the GCS that died with BatchScope: the reaper
    assert wait_for(lambda: not alive(started), 15.0), f"left behind: {alive(started)}"
