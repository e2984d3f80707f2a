"""int8 (ONNX Runtime, statically quantized) and bf16 (torch, oneDNN) on the CPU: the
quantized model close to fp32, bf16 refused where the CPU lacks it, the config's refusals,
the CPU default chosen by the CPU's features, and sweep curves naming runtime and
precision."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batchscope import cpu_features
from batchscope.cli import main
from batchscope.config import (
    ConfigError,
    RunConfig,
    default_cpu_precision,
    default_runtime,
    precision_refusal,
)
from batchscope.device.checks import BackendError, check_precision, supported_precisions
from batchscope.engine.backends import TorchBackend
from batchscope.profiles.curve_sweep import SweepPlan, markdown_table, run_sweep
from batchscope.profiles.profile import BatchCurve, CurvePoint, DeviceProfile, parse_profile

ort = pytest.importorskip("onnxruntime")

RES = (128, 72)
CPU = torch.device("cpu")
#: flags of a CPU with AVX-512 but neither VNNI nor BF16 (a Skylake-SP server)
PLAIN_AVX512 = frozenset({"avx2", "avx512f", "avx512bw"})
#: flags of this project's measuring machine (an EPYC with AVX512-VNNI and -BF16, no AMX)
EPYC = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"})


@pytest.fixture
def flags(monkeypatch):
    """Set the CPU's flags for a test: ``flags(EPYC)``."""

    def set_flags(value: frozenset[str]) -> None:
        monkeypatch.setattr(cpu_features, "cpu_flags", lambda: value)

    return set_flags


# -- bf16 on the CPU: refused in one line where the CPU has neither AVX512-BF16 nor AMX --


def test_bf16_is_refused_in_one_line_on_a_cpu_without_bf16(flags):
    flags(PLAIN_AVX512)
    why = supported_precisions("cpu")["bf16"]
    assert why and "neither AVX512-BF16 nor AMX-BF16" in why and "\n" not in why
    with pytest.raises(
        BackendError, match=r"^precision bf16 on cpu: this CPU .* use fp32 or int8$"
    ):
        check_precision("bf16", CPU)
    with pytest.raises(BackendError, match="neither AVX512-BF16 nor AMX-BF16"):
        TorchBackend("cpu", "bf16", RES, checkpoint="untrained")


def test_bf16_runs_on_a_cpu_with_avx512_bf16_or_amx(flags):
    for have in (EPYC, frozenset({"avx2", "amx_bf16", "amx_tile"})):
        flags(have)
        assert supported_precisions("cpu")["bf16"] is None
        assert check_precision("bf16", CPU) is torch.bfloat16


def test_bf16_on_the_cpu_runs_an_fp32_model_in_channels_last_under_autocast(flags):
    if cpu_features.bf16_refusal() is not None:
        pytest.skip("this CPU has no native bf16")
    backend = TorchBackend("cpu", "bf16", RES, checkpoint="untrained")
    try:
        assert backend.channels_last and "bf16 (oneDNN autocast, channels_last)" in backend.label
        assert next(backend.model.parameters()).dtype == torch.float32  # type: ignore[union-attr]
    finally:
        backend.close()


# -- the config: which runtime runs which precision, refused with the field and a reason --


def test_config_refuses_int8_outside_onnxruntime_on_the_cpu_and_bf16_in_onnxruntime():
    real = {"backend": "torch", "device": "cpu", "profile": None}
    with pytest.raises(ConfigError) as exc:
        RunConfig(**real, precision="int8", runtime="torch")
    assert str(exc.value) == (
        "precision = 'int8': int8 is the ONNX export statically quantized: use --runtime "
        "onnxruntime"
    )
    with pytest.raises(ConfigError, match=r"int8 runs on the CPU .* use --device cpu"):
        RunConfig(**{**real, "device": "cuda:0"}, precision="int8", runtime="onnxruntime")
    with pytest.raises(
        ConfigError, match="ONNX Runtime has no bf16 convolutions: use --runtime torch"
    ):
        RunConfig(**real, precision="bf16", runtime="onnxruntime")
    RunConfig(**real, precision="int8", runtime="onnxruntime")
    RunConfig(**real, precision="bf16", runtime="torch")
    # an emulated device replays whatever curve its profile has
    assert precision_refusal("fp32", "onnxruntime", "cpu") is None


def test_cli_refuses_a_precision_its_runtime_cannot_run_in_one_line(capsys):
    code = main(["run", "--device", "cpu", "--runtime", "torch", "--precision", "int8"])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1
    assert "precision = 'int8'" in err and "use --runtime onnxruntime" in err


def test_a_precision_one_runtime_has_picks_that_runtime():
    assert default_runtime("cpu", "int8") == "onnxruntime"
    assert default_runtime("cpu", "bf16") == "torch"
    assert default_runtime("cpu", "fp32") == "onnxruntime"  # the measured CPU default


# -- the CPU default: the fastest measured path for what the CPU has ---------------------


def test_the_cpu_default_is_int8_where_the_cpu_has_vnni_else_fp32(flags):
    flags(EPYC)
    runtime, precision, why = cpu_features.fastest_cpu_path(onnxruntime_ok=True)
    assert (runtime, precision) == ("onnxruntime", "int8") and "AVX512-VNNI" in why
    assert default_cpu_precision() == "int8"
    flags(frozenset({"avx2", "avx_vnni"}))  # Alder Lake's 256-bit VNNI counts
    assert cpu_features.fastest_cpu_path(True)[1] == "int8"
    flags(PLAIN_AVX512)
    assert cpu_features.fastest_cpu_path(True)[:2] == ("onnxruntime", "fp32")
    assert cpu_features.fastest_cpu_path(False)[:2] == ("torch", "fp32")


def test_the_cpu_is_described_with_its_int8_and_bf16_features(flags):
    flags(EPYC)
    text = cpu_features.describe_cpu(cores=2)
    assert text.endswith("· 2 cores · AVX2, AVX-512, AVX512-VNNI, AVX512-BF16, no AMX")
    flags(frozenset({"avx512f", "amx_int8", "amx_bf16", "amx_tile"}))
    assert "AMX-INT8, AMX-BF16" in cpu_features.describe_cpu(cores=1)
    assert "no AMX" not in cpu_features.describe_cpu(cores=1)


def test_the_apps_cpu_choice_names_its_features_and_offers_int8_in_onnxruntime(flags):
    from batchscope.ui.controls.device_options import fit, precision_reasons, real_device_choices

    flags(EPYC)
    ort_choice, torch_choice = real_device_choices("cpu", "CPU")
    assert ort_choice.runtime == "onnxruntime" and "(fastest here: int8)" in ort_choice.label
    assert precision_reasons(ort_choice, RES)["int8"] is None
    assert "ONNX Runtime has no bf16" in (precision_reasons(ort_choice, RES)["bf16"] or "")
    assert "onnxruntime" in (precision_reasons(torch_choice, RES)["int8"] or "")
    # from the emulated default (fp16), the CPU lands on its fastest path
    assert fit(ort_choice, "fp16", RES) == ("int8", RES)
    assert fit(ort_choice, "fp32", RES) == ("fp32", RES)  # what fits is kept


# -- sweep: curves carry their runtime and precision, side by side -----------------------


def test_sweep_measures_each_runtime_with_the_precisions_it_runs():
    plan = SweepPlan(
        "cpu", ("fp32", "int8", "bf16"), (RES,), (1,), runtimes=("onnxruntime", "torch")
    )
    assert plan.pairs == [
        ("onnxruntime", "fp32"),
        ("onnxruntime", "int8"),
        ("torch", "fp32"),
        ("torch", "bf16"),
    ]
    chosen = SweepPlan(
        "cpu",
        ("fp32", "int8", "bf16"),
        (RES,),
        (1, 2),
        runtimes=("onnxruntime", "torch"),
        curves=(("onnxruntime", "fp32"), ("onnxruntime", "int8"), ("torch", "bf16")),
    )
    assert [p[:2] for p in chosen.points[:3]] == list(chosen.curves)  # side by side
    with pytest.raises(ConfigError, match="use --runtime onnxruntime"):
        SweepPlan("cpu", ("int8",), (RES,), runtimes=("torch",))
    with pytest.raises(ConfigError, match="int8 runs on the CPU"):
        SweepPlan("cuda:0", ("int8",), (RES,), runtimes=("onnxruntime",))


def test_a_sweep_table_puts_the_curves_side_by_side_with_best_rounds_and_ratios():
    def curve(precision: str, runtime: str, ms: float) -> BatchCurve:
        points = (CurvePoint(1, ms, best_ms=ms * 0.9), CurvePoint(4, ms * 3, best_ms=ms * 2.5))
        return BatchCurve(precision, (256, 144), points, runtime)

    profile = DeviceProfile(
        "cpu",
        "CPU",
        (curve("fp32", "onnxruntime", 50.0), curve("int8", "onnxruntime", 20.0)),
    )
    table = markdown_table(profile)
    assert "| FP32 onnxruntime best windows/s | INT8 onnxruntime best windows/s |" in table
    assert "| INT8 onnxruntime × FP32 onnxruntime |" in table
    assert "| 1 | 50.00 | 20.00 | 20.0 | 50.0 | 22.2 | 55.6 | 2.50× |" in table
    again = parse_profile(profile.to_json(), "test")
    assert again.curves[1].points[0].best_ms == 18.0 and again.curves[1].precision == "int8"


# -- int8: the quantized model, made once and cached, close to fp32 ----------------------


@pytest.fixture(scope="module")
def int8_cache(tmp_path_factory):
    """The demo weights' int8 model at 128x72, made in a fresh cache folder."""
    import os

    from batchscope.models.onnx_export import export_blurball
    from batchscope.models.weights import resolve_weights

    folder = tmp_path_factory.mktemp("cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(folder)
    checkpoint = resolve_weights(None)[0]
    if checkpoint is None:
        pytest.skip("the demo weights are missing")
    said: list[str] = []
    try:
        data = export_blurball("int8", RES, checkpoint, progress=said.append)
        fp32 = export_blurball("fp32", RES, checkpoint)
        yield data, fp32, checkpoint, said, folder
    finally:
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old


@pytest.mark.slow
def test_the_int8_model_is_quantized_with_progress_and_cached(int8_cache, monkeypatch):
    import onnx

    from batchscope.models import onnx_quantize

    data, _, checkpoint, said, folder = int8_cache
    assert said[0] == "int8: exporting the fp32 model to quantize"
    assert "int8: calibrating, window 32/32" in said
    assert any(line.startswith("int8: kept in ") for line in said)
    path = onnx_quantize.cache_path(checkpoint, RES, lean=False)
    assert path.is_relative_to(folder) and path.read_bytes() == data
    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    # BlurBall's int8 arrangement: the SE pooling quantized (no float ReduceMean)
    assert "AveragePool" in ops and "ReduceMean" not in ops
    # a second build reads the file: no export, no calibration
    monkeypatch.setattr(onnx_quantize, "quantize", lambda *a, **k: pytest.fail("quantized again"))
    nothing = lambda *_: pytest.fail("written again")  # noqa: E731
    again = onnx_quantize.int8_model(checkpoint, RES, False, lambda: b"", nothing)
    assert again == data


def test_the_calibration_windows_are_the_synthetic_sources_frames():
    """Calibrated on what the engine feeds: at 16:9 a window's frames are the synthetic
    source's own (rendered by the scene, fitted the same way), seed by seed."""
    from batchscope.engine.sources import SyntheticSource
    from batchscope.models.onnx_quantize import CALIBRATION_SEEDS, calibration_windows

    first = next(calibration_windows(RES))
    frames = SyntheticSource(RES, seed=CALIBRATION_SEEDS[0])._frames
    w, h = RES
    want = frames[0:3].transpose(0, 3, 1, 2).reshape(1, 9, h, w)
    assert first.shape == (1, 9, h, w) and first.dtype == np.uint8
    assert np.array_equal(first, want)


@pytest.mark.slow
def test_int8_heatmaps_are_close_to_fp32_on_scene_windows(int8_cache):
    from batchscope.engine.sources import SyntheticSource
    from batchscope.models.onnx_export import INPUT, OUTPUT
    from batchscope.models.onnx_quantize import calibration_windows

    data, fp32, *_ = int8_cache
    # windows of the demo scene (seed 0), which the calibration never saw
    source = SyntheticSource(RES, seed=0)
    frames = source._frames
    w, h = RES
    picks = (20, 100, 260, 340, 540)  # the ball in view, then out of view (340, 540)
    x = np.stack([frames[i - 2 : i + 1].transpose(0, 3, 1, 2).reshape(9, h, w) for i in picks])
    got, want = (
        ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run([OUTPUT], {INPUT: x})[0]
        for m in (data, fp32)
    )
    p_got, p_want = (1 / (1 + np.exp(-a[:, 2])) for a in (got, want))
    # measured 3.7e-5 mean |Δp| over 16 windows of this scene
    assert float(np.abs(p_got - p_want).mean()) < 1e-3
    for i, g, t in zip(picks, p_got, p_want, strict=True):
        if not source.truth(i).visible:  # no ball: no peak over the threshold in either
            assert g.max() < 0.5 and t.max() < 0.5
            continue
        gy, gx = np.unravel_index(np.argmax(g), g.shape)
        ty, tx = np.unravel_index(np.argmax(t), t.shape)
        assert g.max() > 0.5 and t.max() > 0.5
        assert abs(int(gy) - int(ty)) <= 1 and abs(int(gx) - int(tx)) <= 1
    assert sum(1 for _ in calibration_windows(RES)) == 32


@pytest.mark.slow
def test_a_sweep_records_runtime_and_precision_in_each_curve(int8_cache):
    plan = SweepPlan(
        "cpu",
        ("fp32", "int8"),
        (RES,),
        (1,),
        warmup=0,
        repeat=1,
        rounds=2,
        runtimes=("onnxruntime",),
    )
    curves = run_sweep(plan, lambda _: None)
    assert [(c.runtime, c.precision) for c in curves] == [
        ("onnxruntime", "fp32"),
        ("onnxruntime", "int8"),
    ]
    assert all(c.provider == "CPUExecutionProvider" for c in curves)
    assert all(p.best_ms is not None and p.best_ms <= p.ms for c in curves for p in c.points)
