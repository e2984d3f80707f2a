"""policy.json (load_setting, setting_json) and Triton's config.pbtxt (triton_config)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from batchscope.config import RunConfig
from batchscope.setting import (
    KIND,
    TRITON_INPUT,
    TRITON_OUTPUT,
    SettingError,
    load_setting,
    save_setting,
    setting_json,
    triton_config,
)


def parse(text: str) -> model_config_pb2.ModelConfig:
    """Triton's own parser: a field it does not know fails here."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_a_setting_round_trips(tmp_path: Path):
    config = RunConfig(
        policy="dynamic", max_batch=4, max_delay_ms=5.0, sessions=5, fps=30.0,
        precision="fp16", resolution=(512, 288), profile="server-24gb",
    )  # fmt: skip
    path = save_setting(config, tmp_path / "policy.json", planned={"max_sessions": 5})
    data = json.loads(path.read_text())
    assert data["kind"] == KIND and data["version"] == 1 and data["resolution"] == "512x288"
    back = load_setting(path)
    assert back.diff(config) == {}
    base = RunConfig(sources=("synthetic",), duration_s=7.0)
    assert load_setting(path, base).sources == ("synthetic",)  # the rest comes from base


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"kind": "plan", "version": 1}', "kind"),
        ('{"kind": "batchscope-setting", "version": 9}', "version"),
        ('{"kind": "batchscope-setting", "version": 1, "polcy": "all"}', "polcy: unknown field"),
        ('{"kind": "batchscope-setting", "version": 1, "policy": "fastest"}', "policy:"),
        ('{"kind": "batchscope-setting", "version": 1, "max_batch": 0}', "max_batch:"),
        ('{"kind": "batchscope-setting", "version": 1, "fps": -1}', "fps:"),
        ('{"kind": "batchscope-setting", "version": 1, "resolution": "500x1"}', "resolution:"),
        ('{"kind": "batchscope-setting", "version": 1, "policy": "dynamic", "max_batch": null}',
         "max_batch"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_one_line_naming_file_and_field(tmp_path: Path, content, words):
    path = tmp_path / "policy.json"
    path.write_text(content)
    with pytest.raises(SettingError) as exc:
        load_setting(path)
    message = str(exc.value)
    assert message.startswith(str(path)) and words in message and "\n" not in message


def test_a_missing_file(tmp_path: Path):
    with pytest.raises(SettingError, match="cannot read"):
        load_setting(tmp_path / "nope.json")


def test_the_tensor_names_are_the_onnx_exports():
    export = pytest.importorskip("batchscope.models.onnx_export")
    assert (TRITON_INPUT, TRITON_OUTPUT) == (export.INPUT, export.OUTPUT)


@pytest.mark.parametrize(
    ("changes", "max_batch", "preferred", "delay_us"),
    [
        ({"policy": "dynamic", "max_batch": 4, "max_delay_ms": 5.0}, 4, [4], 5000),
        ({"policy": "fixed", "batch": 3, "max_delay_ms": 10.0}, 3, [3], 10000),
        ({"policy": "all", "max_batch": None}, 6, [], 0),
        ({"policy": "all", "max_batch": 2}, 2, [], 0),
        ({"policy": "adaptive", "slo_ms": 40.0}, 3, [], 0),  # settled_cap below
        ({"policy": "oldest"}, 1, [], 0),
        ({"policy": "round-robin"}, 1, [], 0),
    ],
)
def test_config_pbtxt_parses_with_tritons_protobuf(changes, max_batch, preferred, delay_us):
    config = RunConfig(sessions=6, resolution=(512, 288), precision="fp16", **changes)
    text = triton_config(config, settled_cap=3)
    model = parse(text)
    assert model.name == "blurball"
    assert model.platform == "onnxruntime_onnx"
    assert model.max_batch_size == max_batch
    assert list(model.dynamic_batching.preferred_batch_size) == preferred
    assert model.dynamic_batching.max_queue_delay_microseconds == delay_us
    (group,) = model.instance_group
    assert group.count == 1 and group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    (inp,) = model.input
    (out,) = model.output
    assert (inp.name, list(inp.dims)) == ("frames", [9, 288, 512])
    assert inp.data_type == model_config_pb2.TYPE_UINT8  # the export takes uint8 frames
    assert (out.name, list(out.dims)) == ("heatmaps", [3, 288, 512])
    assert out.data_type == model_config_pb2.TYPE_FP16
    assert "drop stale frames" in text  # the latest-window caveat
    assert "# Policy mapping" in text


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("fp32", "TYPE_FP32"), ("fp16", "TYPE_FP16"), ("bf16", "TYPE_FP16")],  # bf16: no export
)
def test_the_output_dtype_follows_the_precision(precision, dtype):
    model = parse(triton_config(RunConfig(precision=precision, resolution=(256, 144))))
    assert model.output[0].data_type == model_config_pb2.DataType.Value(dtype)
    assert list(model.input[0].dims) == [9, 144, 256]


def test_an_unknown_field_would_fail_the_parse():
    with pytest.raises(text_format.ParseError):
        parse(triton_config(RunConfig()) + "max_queue_delay: 5\n")


def test_setting_json_carries_every_field():
    data = setting_json(RunConfig(policy="fixed", batch=3))
    assert data["policy"] == "fixed" and data["batch"] == 3 and "planned" not in data
