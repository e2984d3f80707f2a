"""The real model on several devices in BatchScope's worker (`--devices cpu,cpu`,
`cuda:0,cuda:1`, or N instances on `--device`), and beside emulated devices
(`cpu,emulated:laptop-8gb`): one backend per device, each real device's windows scored,
the report's devices by their names."""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchscope.cli import main
from batchscope.config import ConfigError, RunConfig, parse_real_devices
from batchscope.engine.engine import Engine
from contract import recorded, wait_for

START_S = 120.0  # a torch backend's build and warm-up on a busy CPU
TORCH = dict(
    sources=("synthetic",),
    backend="torch",
    device="cpu",
    precision="fp32",
    resolution=(128, 72),
    policy="all",
    sessions=4,
)


def _batches(engine: Engine) -> np.ndarray:
    return recorded(engine, "batches")


def _items(engine: Engine) -> np.ndarray:
    return recorded(engine, "items")


def test_a_list_naming_a_real_device_may_mix_kinds_or_is_one_clear_error():
    assert parse_real_devices("cpu,cuda:1") == ["cpu", "cuda:1"]
    assert parse_real_devices("3") is None
    assert parse_real_devices("emulated:laptop-8gb,server-24gb") is None  # profiles only
    mixed = ["cpu", "emulated:laptop-8gb", "emulated:server-24gb@1g"]
    assert parse_real_devices("cpu, emulated:laptop-8gb,server-24gb@1g") == mixed
    with pytest.raises(ConfigError, match="does not open a MIG slice by its UUID"):
        parse_real_devices("cuda:0,MIG-5f1c2c4e-0000")
    with pytest.raises(ConfigError, match="an empty name"):
        parse_real_devices("cpu,,cpu")
    assert RunConfig(**{**TORCH, "devices": 2}).device_names() == ["cpu", "cpu"]
    listed = RunConfig(**{**TORCH, "devices": 2, "device_list": ("cpu", "cuda:1")})
    assert listed.device_names() == ["cpu", "cuda:1"]
    assert listed.device_profile(1).device == "cuda:1"
    assert listed.device_profile(1).devices == 1
    mixed = RunConfig(**{**TORCH, "devices": 2, "device_list": ("cpu", "emulated:laptop-8gb")})
    assert mixed.device_names() == ["cpu", "emulated:laptop-8gb"]
    second = mixed.device_profile(1)
    assert (second.backend, second.profile, second.devices) == ("emulated", "laptop-8gb", 1)
    assert mixed.device_profile(0).backend == "torch"
    emulated_first = RunConfig(
        backend="emulated",
        profile="laptop-8gb",
        devices=2,
        device_list=("emulated:laptop-8gb", "cpu"),
    )
    assert emulated_first.device_profile(1).backend == "torch"
    assert emulated_first.device_profile(1).device == "cpu"
    bad_lists = (
        ("cuda:0", "cpu"),  # not the run's first
        ("cpu",),  # short
        ("cpu", "gpu"),  # neither real nor emulated:NAME
        ("emulated:laptop-8gb", "cpu"),  # the torch run's device 0 is cpu
    )
    for bad in bad_lists:
        with pytest.raises(ConfigError, match="one device per device of BatchScope's worker"):
            RunConfig(**{**TORCH, "devices": 2, "device_list": bad})


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--backend", "ray", "--devices", "cpu,cpu"], "with --backend ray give a count"),
        (
            ["--devices", "emulated:laptop-8gb,cpu", "--profile", "server-24gb"],
            "--devices lists emulated:laptop-8gb first",
        ),
        (["--devices", "cpu,emulated:no-such-gpu"], "no-such-gpu"),
        (["--device", "cuda:0", "--devices", "cpu,cpu"], "--devices lists cpu first"),
    ],
)
def test_run_refuses_a_list_it_cannot_serve_in_one_line(argv, says, capsys):
    assert main(["run", "synthetic", "--duration", "1", *argv]) != 0
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_the_real_model_on_two_devices_serves_and_scores_on_each(capsys):
    """``cpu,cpu`` pinned: two torch backends, each device runs its two sessions' windows
    and scores them (the demo weights find the ball), the report names both devices."""
    config = RunConfig(**{**TORCH, "devices": 2, "device_list": ("cpu", "cpu")}, router="pinned")
    engine = Engine(config)
    engine.open()
    engine.start()
    try:
        labels = [w.backend.label for w in engine.workers()]
        assert len(labels) == 2 and all("cpu" in label for label in labels)

        def each_device_scored() -> bool:
            items = _items(engine)
            return all(
                np.count_nonzero(items["scored"] & (items["device"] == d)) >= 6 for d in (0, 1)
            )

        assert wait_for(each_device_scored, START_S)
        items = _items(engine)
        for d, sessions in ((0, {0, 2}), (1, {1, 3})):  # pinned: dealt by id
            assert set(items["session"][items["device"] == d].tolist()) <= sessions
        scored = items["scored"] & items["visible"]
        assert np.count_nonzero(items["hit"] & scored) >= 0.8 * np.count_nonzero(scored)
        report = engine.report()
    finally:
        assert engine.stop(10.0) == []
    assert [d["device"] for d in report["devices"]] == ["cpu", "cpu"]
    assert [d["sessions"] for d in report["devices"]] == [2, 2]
    assert all(d["busy"] > 0 for d in report["devices"])
    assert report["config"]["device_list"] == ["cpu", "cpu"]
    assert report["device_label"].startswith("2 devices (cpu)")


def test_model_instances_are_added_live_and_a_segment_opens():
    """One instance of the real model, then two on the same device (the Devices control):
    the second is built and warmed up while the first serves, then both serve."""
    engine = Engine(RunConfig(**TORCH))
    engine.open()
    engine.start()
    try:
        assert wait_for(lambda: len(_batches(engine)) >= 3, START_S)
        assert engine.apply(engine.config.with_changes(devices=2, router="pinned")) is None
        assert len(engine.workers()) == 2
        assert wait_for(lambda: 1 in set(_batches(engine)["device"].tolist()), START_S)
        assert engine.segments.all()[-1].changes == {"devices": 2, "router": "pinned"}
        report = engine.report()
    finally:
        assert engine.stop(10.0) == []
    assert [d["device"] for d in report["devices"]] == ["cpu", "cpu"]


def test_run_devices_cpu_cpu_prints_each_device(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["run", "synthetic", "--devices", "cpu,cpu", "--sessions", "2", "--resolution",
            "128x72", "--router", "pinned", "--duration", "2", "--warmup", "0.5", "--quiet",
            "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "device 0  cpu" in text and "device 1  cpu" in text
    report = json.loads(out.read_text())
    assert report["config"]["backend"] == "torch" and report["config"]["devices"] == 2


def test_a_real_device_beside_an_emulated_one_serves_each_by_its_own_kind():
    """``cpu,emulated:laptop-8gb`` pinned: device 0 runs the model and scores its
    sessions' windows, device 1 replays laptop-8gb's curve (no detections to score), one
    roster; the report names both, and no prediction is made (no curve for the CPU)."""
    config = RunConfig(
        **{**TORCH, "devices": 2, "device_list": ("cpu", "emulated:laptop-8gb")},
        router="pinned",
    ).with_changes(resolution=(256, 144))  # a size laptop-8gb has a curve for
    engine = Engine(config)
    engine.open()
    engine.start()
    try:
        kinds = [type(w.backend).__name__ for w in engine.workers()]
        assert kinds == ["TorchBackend", "EmulatedBackend"]

        def both_served() -> bool:
            items = _items(engine)
            return np.count_nonzero(items["scored"]) >= 6 and np.any(items["device"] == 1)

        assert wait_for(both_served, START_S)
        items = _items(engine)
        on_model, on_curve = items["device"] == 0, items["device"] == 1
        assert set(items["session"][on_model].tolist()) <= {0, 2}
        assert set(items["session"][on_curve].tolist()) <= {1, 3}
        assert np.all(items["scored"][on_curve] == 0)  # a curve draws no detection
        assert np.count_nonzero(items["scored"][on_model]) >= 6
        report = engine.report()
    finally:
        assert engine.stop(10.0) == []
    assert [d["device"] for d in report["devices"]] == ["cpu", "emulated:laptop-8gb"]
    assert report["device_label"] == "2 devices (cpu, emulated:laptop-8gb), router pinned"
    assert report["config"]["device_list"] == ["cpu", "emulated:laptop-8gb"]


def test_run_takes_an_emulated_device_first_with_a_real_one_beside_it(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["run", "synthetic", "--devices", "laptop-8gb,cpu", "--sessions", "2",
            "--resolution", "256x144", "--router", "pinned", "--duration", "2",
            "--warmup", "0.5", "--quiet", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "device 0  emulated:laptop-8gb" in text and "device 1  cpu" in text
    config = json.loads(out.read_text())["config"]
    assert (config["backend"], config["profile"], config["precision"]) == (
        "emulated",
        "laptop-8gb",
        "fp32",  # a CPU among the devices: fp32, as --device cpu
    )
