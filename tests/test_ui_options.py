"""Device options and settings: which choices are offered, and what is remembered."""

from __future__ import annotations

from batchscope.config import RunConfig
from batchscope.ui.controls.device_options import (
    device_choices,
    fit,
    precision_reasons,
    resolution_options,
)
from batchscope.ui.window.settings import NO_CUDA_NOTE, demo_config, initial_config, save_config


def choices() -> dict:
    return {c.key: c for c in device_choices(gpus=["Test GPU"])}


def test_device_list_has_cpu_gpus_and_profiles():
    keys = list(choices())
    # each real device with its runtimes, its default (the fastest measured there) first
    assert keys[:4] == ["cpu", "cpu/torch", "cuda:0", "cuda:0/onnxruntime"]
    assert "emulated:laptop-8gb" in keys and "emulated:server-24gb" in keys
    cpu, cpu_torch = choices()["cpu"], choices()["cpu/torch"]
    assert (cpu.runtime, cpu_torch.runtime) == ("onnxruntime", "torch")
    # the fastest path this CPU has (int8 with VNNI, else fp32: cpu_features)
    assert "ONNX Runtime (fastest here" in cpu.label and cpu.unavailable is None
    assert cpu.changes()["runtime"] == "onnxruntime"


def test_a_runtime_that_cannot_run_is_greyed_out_with_its_reason(monkeypatch):
    from batchscope.device import onnx_runtime
    from batchscope.ui.controls import device_options

    monkeypatch.setattr(device_options, "default_runtime", lambda device: "torch")
    monkeypatch.setattr(
        onnx_runtime,
        "runtime_availability",
        lambda device: {"torch": None, "onnxruntime": "onnxruntime is not installed"},
    )
    found = {c.key: c for c in device_choices(gpus=[])}
    assert found["cpu"].runtime == "torch" and found["cpu"].unavailable is None
    assert found["cpu/onnxruntime"].unavailable == "onnxruntime is not installed"


def test_emulated_device_offers_only_measured_curves():
    laptop = choices()["emulated:laptop-8gb"]
    reasons = precision_reasons(laptop, (512, 288))
    assert reasons["fp16"] is None and reasons["fp32"] is None
    assert "no bf16" in reasons["bf16"]
    res = resolution_options(laptop)
    assert res[(256, 144)] is None and res[(512, 288)] is None
    assert "not measured" in res[(1024, 576)]
    server = choices()["emulated:server-24gb"]
    assert fit(server, "fp32", (256, 144)) == ("fp16", (512, 288))
    assert fit(laptop, "fp32", (256, 144)) == ("fp32", (256, 144))


def test_cpu_disables_fp16_with_a_reason_and_falls_back_to_its_default():
    from batchscope.config import default_cpu_precision

    cpu = choices()["cpu"]
    assert "slow" in precision_reasons(cpu, (512, 288))["fp16"]
    # the CPU's own default: int8 where it has VNNI, else fp32
    assert fit(cpu, "fp16", (768, 432)) == (default_cpu_precision(), (768, 432))


def test_settings_round_trip(ui_settings):
    config = demo_config(("synthetic",), cuda=False).with_changes(
        policy="dynamic", max_batch=6, sessions=7, resolution=(256, 144)
    )
    save_config(ui_settings, config)
    loaded, note = initial_config(ui_settings, (), cuda=False)
    assert note == NO_CUDA_NOTE
    assert (loaded.policy, loaded.max_batch, loaded.sessions, loaded.resolution) == (
        "dynamic",
        6,
        7,
        (256, 144),
    )
    assert loaded.sources == ("synthetic",)
    save_config(ui_settings, config.with_changes(profile="server-24gb", resolution=(512, 288)))
    assert "emulating server-24gb" in initial_config(ui_settings, (), cuda=False)[1]


def test_unusable_settings_fall_back_to_the_demo(ui_settings, tmp_path):
    saved = RunConfig(
        backend="torch", device="cuda:3", profile=None, sources=(str(tmp_path / "gone.mp4"),)
    )
    save_config(ui_settings, saved)
    config, note = initial_config(ui_settings, (), cuda=False)
    assert config.backend == "emulated" and config.profile == "laptop-8gb"
    assert "Last settings not usable" in note and NO_CUDA_NOTE in note
    assert "gone.mp4" not in " ".join(config.sources)


def test_demo_default_without_settings(ui_settings):
    config, note = initial_config(ui_settings, ("synthetic",), cuda=False)
    assert (config.policy, config.sessions, config.precision) == ("all", 4, "fp16")
    assert note == NO_CUDA_NOTE
    gpu, gpu_note = initial_config(ui_settings, ("synthetic",), cuda=True)
    assert (gpu.backend, gpu.device, gpu_note) == ("torch", "cuda:0", None)
