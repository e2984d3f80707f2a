"""What `plan --export` deploys: the export command config.pbtxt names runs as written, and
makes the model the config describes; CPU profiles are served by CPU instances."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from batchscope.cli import build_parser, main
from batchscope.config import RunConfig
from batchscope.setting import export_precision, precision_note, triton_config
from batchscope.ui.capacity.setting_files import export_setting

KIND = model_config_pb2.ModelInstanceGroup
#: ONNX Runtime's name of each output type config.pbtxt can give.
ORT_TYPES = {
    model_config_pb2.TYPE_FP32: "tensor(float)",
    model_config_pb2.TYPE_FP16: "tensor(float16)",
}


def bf16_profile(tmp_path: Path, device_id: str | None) -> Path:
    """A bf16 curve at 64x32 (a fast export); ``device_id`` as `sweep` records it."""
    data = {
        "format": "batchscope-profile/1",
        "name": f"tiny-{device_id or 'gpu'}",
        "device": "a tiny device",
        "curves": [
            {
                "precision": "bf16",
                "resolution": [64, 32],
                "points": [{"batch": 1, "ms": 2.0}, {"batch": 2, "ms": 3.0}],
            }
        ],
    }
    if device_id:
        data["device_id"] = device_id
    path = tmp_path / f"{data['name']}.json"
    path.write_text(json.dumps(data))
    return path


def plan_export(profile: Path, folder: Path, capsys) -> tuple[model_config_pb2.ModelConfig, str]:
    """`plan --precision bf16 --export folder`: config.pbtxt parsed by Triton's protobuf,
    and the export command its comments recommend."""
    code = main(
        ["plan", "--profile", str(profile), "--precision", "bf16", "--resolution", "64x32",
         "--fps", "30", "--p99-ms", "50", "--policies", "oldest", "--duration", "2",
         "--seeds", "1", "--export", str(folder)]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    text = (folder / "config.pbtxt").read_text()
    model = text_format.Parse(text, model_config_pb2.ModelConfig())
    (command,) = re.findall(r"^#\s+(batchscope export-onnx .*)$", text, re.MULTILINE)
    assert "note: the setting's bf16 has no ONNX export" in out
    assert json.loads((folder / "policy.json").read_text())["precision"] == "bf16"
    return model, command


def test_a_bf16_gpu_plan_serves_the_fp16_export_on_one_gpu(tmp_path, capsys):
    """It wrote TYPE_BF16 and `export-onnx --precision bf16`, which export-onnx refuses."""
    model, command = plan_export(bf16_profile(tmp_path, None), tmp_path / "deploy", capsys)
    assert model.output[0].data_type == model_config_pb2.TYPE_FP16
    (group,) = model.instance_group
    assert (group.kind, list(group.gpus)) == (KIND.KIND_GPU, [0])
    argv = shlex.split(command)[1:]
    args = build_parser().parse_args(argv)  # argparse exits on anything it refuses
    assert (args.command, args.precision, args.resolution) == ("export-onnx", "fp16", (64, 32))
    assert args.out == "model.onnx"


@pytest.mark.slow
def test_a_bf16_cpu_plan_names_an_export_that_runs_and_matches(tmp_path, capsys, monkeypatch):
    """A profile from `sweep --device cpu`: a CPU instance (it said KIND_GPU, gpus [0]), and
    the fp32 export, made by running the recommended command as written."""
    ort = pytest.importorskip("onnxruntime")
    model, command = plan_export(bf16_profile(tmp_path, "cpu"), tmp_path / "deploy", capsys)
    (group,) = model.instance_group
    assert (group.kind, list(group.gpus)) == (KIND.KIND_CPU, [])
    assert model.output[0].data_type == model_config_pb2.TYPE_FP32
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(command)[1:]) == 0, capsys.readouterr().err
    session = ort.InferenceSession(str(tmp_path / "model.onnx"))
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type) == (model.input[0].name, "tensor(uint8)")
    assert inp.shape[1:] == list(model.input[0].dims) == [9, 32, 64]
    assert (out.name, out.type) == (model.output[0].name, ORT_TYPES[model.output[0].data_type])
    assert out.shape[1:] == list(model.output[0].dims)


@pytest.mark.parametrize(
    ("precision", "cpu", "served"),
    [
        ("fp32", False, "fp32"),
        ("fp16", False, "fp16"),
        ("fp16", True, "fp16"),  # exportable: served as the setting says
        ("bf16", False, "fp16"),
        ("bf16", True, "fp32"),
    ],
)
def test_the_served_precision(precision, cpu, served):
    assert export_precision(precision, cpu) == served
    assert (precision_note(precision, cpu) is None) == (served == precision)
    text = triton_config(RunConfig(precision=precision), cpu=cpu)
    assert f"--precision {served} " in text
    assert ("# Precision:" in text) == (served != precision)


def test_the_app_exports_cpu_instances_for_a_setting_measured_on_the_cpu(tmp_path):
    def kind(config: RunConfig) -> int:
        folder = export_setting(config, tmp_path / "out")
        text = (folder / "config.pbtxt").read_text()
        return text_format.Parse(text, model_config_pb2.ModelConfig()).instance_group[0].kind

    cpu_profile = str(bf16_profile(tmp_path, "cpu"))
    assert kind(RunConfig(backend="torch", device="cpu")) == KIND.KIND_CPU
    assert kind(RunConfig(backend="torch", device="cuda:0")) == KIND.KIND_GPU
    assert kind(RunConfig(backend="emulated", profile="laptop-8gb")) == KIND.KIND_GPU
    emulated_cpu = RunConfig(backend="emulated", profile=cpu_profile, precision="bf16")
    assert kind(emulated_cpu.with_changes(resolution=(64, 32))) == KIND.KIND_CPU
