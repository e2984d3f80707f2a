"""The ONNX export and the ONNX Runtime backend: the same numbers as torch, the same stages
in the engine, the runtime in configs and profiles, and one-line errors for bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from batchscope.cli import main
from batchscope.config import ConfigError, RunConfig, default_runtime
from batchscope.device.checks import BackendError
from batchscope.device.onnx_runtime import open_session, runtime_availability
from batchscope.engine.backends import OnnxBackend, TorchBackend, make_backend
from batchscope.engine.engine import Engine
from batchscope.engine.session import Window
from batchscope.models.onnx_export import INPUT, OUTPUT, export_model, exportable
from batchscope.profiles.profile import ProfileError, load_profile, parse_profile
from contract import wait_for

ort = pytest.importorskip("onnxruntime")

RES = (128, 72)
CPU = torch.device("cpu")

#: Largest |ONNX Runtime − torch| allowed for the fp16 export (both in fp16 on the CPU).
#: Measured on the 5 batches below: 2.4e-4 (fp32: 1.0e-7); 1e-3 is one fp16 step at 1.0.
FP16_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def fp32_export() -> tuple[torch.nn.Module, bytes]:
    torch.manual_seed(0)
    model = exportable("fp32")
    return model, export_model(model, RES)


def _frames(batch: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, 9, RES[1], RES[0]), dtype=torch.uint8, generator=gen)


def _max_diff(model: torch.nn.Module, data: bytes, batches: list[int]) -> float:
    session, providers = open_session(data, CPU, 2, False, "test")
    assert providers == ["CPUExecutionProvider"]
    worst = 0.0
    for seed, n in enumerate(batches):
        x = _frames(n, seed)
        with torch.inference_mode():
            want = model(x).float().numpy()
        got = session.run([OUTPUT], {INPUT: x.numpy()})[0].astype(np.float32)
        assert got.shape == (n, 3, RES[1], RES[0])
        worst = max(worst, float(np.abs(got - want).max()))
    return worst


def test_fp32_export_gives_torch_s_logits_at_every_batch_size(fp32_export) -> None:
    model, data = fp32_export
    session, _ = open_session(data, CPU, 2, False, "test")
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type, inp.shape[1:]) == ("frames", "tensor(uint8)", [9, 72, 128])
    assert (out.name, out.type, out.shape[1:]) == ("heatmaps", "tensor(float)", [3, 72, 128])
    assert isinstance(inp.shape[0], str)  # the batch axis is dynamic
    assert _max_diff(model, data, [1, 3, 4]) <= 1e-4  # measured: about 1e-7


def test_fp16_export_is_within_its_measured_tolerance() -> None:
    torch.manual_seed(1)
    model = exportable("fp16")
    data = export_model(model, RES)
    session, _ = open_session(data, CPU, 2, False, "test")
    assert session.get_outputs()[0].type == "tensor(float16)"
    diff = _max_diff(model, data, [1, 2, 2, 3, 4])
    assert 0.0 < diff <= FP16_TOLERANCE  # fp16: not bit-equal to torch's kernels


def test_the_backend_runs_in_the_engine_on_cpu_and_reports_its_stages() -> None:
    config = RunConfig(
        sources=("synthetic",),
        sessions=2,
        fps=30.0,
        backend="torch",
        runtime="onnxruntime",
        device="cpu",
        profile=None,
        precision="fp32",
        resolution=RES,
        duration_s=2.0,
    )
    engine = Engine(config)
    try:
        engine.open()
        engine.start()
        assert wait_for(lambda: sum(s.delivered for s in engine.snapshot().sessions) >= 6, 30)
        report = engine.report()
    finally:
        engine.stop()
    assert report["device_label"] == "cpu onnxruntime (CPU)"
    assert report["config"]["runtime"] == "onnxruntime"
    assert report["weights"] == "demo weights (synthetic scene)"
    served = [s for s in report["sessions"] if s["delivered"]]
    assert served and all(s["stages_ms"]["compute"] > 1.0 for s in served)
    assert all(s["stages_ms"]["post"] > 0.0 for s in served)
    assert report["memory"]["peak_rss_mb"] > 100


def test_same_weights_same_detections_as_the_torch_backend(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = exportable("fp32").model
    with torch.no_grad():  # a bias that puts the newest frame's peak above threshold
        model.final_layers[0].bias.fill_(1.0)
    ckpt = tmp_path / "blurball.pt"
    torch.save({"model_state_dict": model.state_dict()}, ckpt)
    onnx = OnnxBackend("cpu", "fp32", RES, checkpoint=str(ckpt))
    eager = TorchBackend("cpu", "fp32", RES, checkpoint=str(ckpt))
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 256, (RES[1], RES[0], 3), np.uint8) for _ in range(5)]
    windows = [Window(s, 1, 1, tuple(frames[s : s + 3]), 0.0, (2.0, 2.0)) for s in range(3)]
    got, want = onnx.run(windows).detections, eager.run(windows).detections
    assert all(d is not None for d in want)
    for a, b in zip(got, want, strict=True):
        assert (a.x, a.y, a.blur_angle) == pytest.approx((b.x, b.y, b.blur_angle), abs=1e-3)
        assert a.score == pytest.approx(b.score, rel=1e-4)
    assert onnx.weights == f"checkpoint {ckpt}" and onnx.draws_detections


def test_an_exported_file_is_used_as_it_is(fp32_export, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(fp32_export[1])
    config = RunConfig(
        backend="torch", runtime="onnxruntime", precision="fp32", resolution=RES,
        profile=None, checkpoint=str(path),
    )  # fmt: skip
    backend = make_backend(config)
    assert backend.label == "cpu onnxruntime (CPU)"
    assert backend.weights == f"ONNX file {path}"


def test_the_runtime_in_the_config() -> None:
    assert RunConfig().runtime == "torch"
    assert RunConfig(backend="torch", runtime="onnxruntime").to_json()["runtime"] == "onnxruntime"
    assert "runtime" in RunConfig().diff(RunConfig(backend="torch", runtime="onnxruntime"))
    for bad, field in (
        ({"runtime": "tensorrt", "backend": "torch"}, "runtime"),
        ({"runtime": "onnxruntime", "backend": "torch", "compile": True}, "compile"),
        ({"backend": "torch", "checkpoint": "m.onnx"}, "checkpoint"),
    ):
        with pytest.raises(ConfigError) as err:
            RunConfig(**bad)
        assert err.value.field == field
    # the emulated backend runs no model: it replays the profile's curve of that runtime
    assert RunConfig(runtime="onnxruntime").runner == "emulated"
    assert default_runtime("cpu") == "onnxruntime"  # measured faster (docs/BENCHMARKS.md)
    assert default_runtime("cuda:0") == "torch"


def test_availability_says_why_a_runtime_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    assert runtime_availability("cpu") == {"torch": None, "onnxruntime": None}
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    why = runtime_availability("cpu")["onnxruntime"]
    assert why and "not installed" in why and "pip install onnxruntime" in why
    assert default_runtime("cpu") == "torch"


def test_a_missing_gpu_provider_is_refused_not_fallen_back(monkeypatch) -> None:
    from batchscope.device import onnx_runtime

    monkeypatch.setattr(onnx_runtime, "check_device", lambda d: torch.device("cuda", 0))
    why = runtime_availability("cuda:0")["onnxruntime"]
    assert why and "no GPU provider" in why and "CPUExecutionProvider" in why


# -- bad input: one line, exit 2 ---------------------------------------------------------

RUN = ["run", "synthetic", "--device", "cpu", "--resolution", "128x72", "--duration", "1"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def test_runtime_not_installed_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert main([*RUN, "--quiet", "--runtime", "onnxruntime"]) == 2
    line = _one_line(capsys)
    assert "runtime onnxruntime: not installed" in line


def test_an_onnx_file_of_another_shape_is_one_line(fp32_export, tmp_path, capsys) -> None:
    path = tmp_path / "small.onnx"
    path.write_bytes(fp32_export[1])  # exported at 128x72
    argv = [*RUN, "--quiet", "--checkpoint", str(path)]
    argv[argv.index("128x72")] = "256x144"
    assert main(argv) == 2
    line = _one_line(capsys)
    assert "not BlurBall's ONNX model at 256x144" in line
    assert "frames: tensor(uint8) [batch, 9, 72, 128]" in line  # what the file has


def test_a_file_that_is_not_onnx_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"not a model")
    assert main([*RUN, "--quiet", "--checkpoint", str(path)]) == 2
    assert f"{path}: ONNX Runtime cannot load it" in _one_line(capsys)


@pytest.mark.parametrize("where", ["missing/model.onnx", "afile/model.onnx", "."])
def test_export_to_a_place_that_cannot_be_written_is_one_line(where, tmp_path, capsys) -> None:
    (tmp_path / "afile").write_text("a file, not a folder")
    out = tmp_path / where
    assert main(["export-onnx", "--resolution", "128x72", "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"batchscope: error: {out}")


def test_export_onnx_writes_a_file_the_backend_takes(tmp_path, capsys) -> None:
    out = tmp_path / "blurball.onnx"
    assert main(["export-onnx", "--resolution", "128x72", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "demo weights (synthetic scene)" in text  # the default, as the backends'
    assert "input  frames   uint8 [batch, 9, 72, 128]" in text
    assert "output heatmaps float32 [batch, 3, 72, 128]" in text
    diff = float(text.split("max |onnxruntime - torch| = ")[1].split()[0])
    assert diff <= 1e-4
    assert OnnxBackend("cpu", "fp32", RES, checkpoint=str(out)).weights.startswith("ONNX file")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no leftovers


def test_onnxruntime_builds_refuse_bf16() -> None:
    with pytest.raises(BackendError, match="precision bf16"):
        OnnxBackend("cpu", "bf16", RES)


# -- profiles carry the runtime --------------------------------------------------------


def _profile(curves: list[dict]) -> dict:
    return {"name": "p", "curves": curves}


def _curve(**extra) -> dict:
    return {"precision": "fp32", "resolution": [128, 72], "points": [{"batch": 1, "ms": 9.0}]} | (
        extra
    )


def test_a_curve_without_runtime_means_torch_and_runtimes_are_told_apart(tmp_path) -> None:
    old = parse_profile(_profile([_curve()]), "old.json")
    assert old.curve("fp32", RES).runtime == "torch"
    with pytest.raises(ProfileError, match="no curve for fp32 at 128x72 on onnxruntime"):
        old.curve("fp32", RES, "onnxruntime")

    both = parse_profile(
        _profile(
            [_curve(), _curve(runtime="onnxruntime", provider="CPUExecutionProvider", points=[
                {"batch": 1, "ms": 4.5}])]
        ),
        "both.json",
    )  # fmt: skip
    assert both.curve("fp32", RES).ms(1) == 9.0
    fast = both.curve("fp32", RES, runtime="onnxruntime")
    assert (fast.ms(1), fast.label) == (4.5, "fp32 128x72 onnxruntime (CPU)")
    assert both.covers() == [("fp32", RES)]
    saved = json.loads(both.save(tmp_path / "p.json").read_text())
    assert [c["runtime"] for c in saved["curves"]] == ["torch", "onnxruntime"]
    assert "provider" not in saved["curves"][0]
    assert load_profile(tmp_path / "p.json").curves == both.curves

    with pytest.raises(ProfileError, match=r"curves\[0\]\.runtime: unknown runtime 'tvm'"):
        parse_profile(_profile([_curve(runtime="tvm")]), "bad.json")
