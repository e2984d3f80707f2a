"""The real model on several devices in BatchScope's worker (`--devices cpu,cpu`,
`cuda:0,cuda:1`, or N instances on `--device`): one torch backend per device, each
device's windows scored, the report's devices by their real names."""

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


def test_a_list_of_real_devices_is_all_real_or_one_clear_error():
    assert parse_real_devices("cpu,cuda:1") == ["cpu", "cuda:1"]
    assert parse_real_devices("3") is None
    assert parse_real_devices("emulated:laptop-8gb,server-24gb") is None
    with pytest.raises(ConfigError, match="one run does not mix the two kinds"):
        parse_real_devices("cpu,emulated:laptop-8gb")
    assert RunConfig(**{**TORCH, "devices": 2}).device_names() == ["cpu", "cpu"]
    listed = RunConfig(**{**TORCH, "devices": 2, "device_list": ("cpu", "cuda:1")})
    assert listed.device_names() == ["cpu", "cuda:1"]
    assert listed.device_profile(1).device == "cuda:1"
    assert listed.device_profile(1).devices == 1
    for bad in (("cuda:0", "cpu"), ("cpu",), ("cpu", "gpu")):  # not the run's first, short
        with pytest.raises(ConfigError, match="one real device per device"):
            RunConfig(**{**TORCH, "devices": 2, "device_list": bad})


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--devices", "cpu,emulated:laptop-8gb"], "one run does not mix the two kinds"),
        (["--backend", "ray", "--devices", "cpu,cpu"], "with --backend ray give a count"),
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
