"""From sweep to a served plan (issue 46): the plan rests on the curve of the runtime that
serves it, every exported setting runs as written, the Triton repository says what it
serves (with the threading its curve was measured with), and the Ray Serve config is one
Ray accepts. The real servers load them in test_triton_backend.py and test_ray_serve_config.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from batchscope.cli import build_parser, main
from batchscope.cli.run import config_from_args
from batchscope.engine.serving.triton_backend import write_repository
from batchscope.engine.serving.triton_model import session_options
from batchscope.setting import load_setting
from batchscope.ui.capacity.setting_files import export_setting

#: A CPU profile as `sweep --device cpu --runtime torch,onnxruntime` writes it (the issue's
#: machine: torch 67.2 ms at batch 1, ONNX Runtime 24.7 ms), measured with 2 threads.
TORCH_MS = {1: 67.2, 2: 120.0, 4: 230.0, 8: 450.0}
ORT_MS = {1: 24.7, 2: 40.0, 4: 70.0, 8: 130.0}


def cpu_profile(tmp_path: Path, runtimes: tuple[str, ...] = ("torch", "onnxruntime")) -> Path:
    curves = {"torch": TORCH_MS, "onnxruntime": ORT_MS}
    data = {
        "format": "batchscope-profile/1",
        "name": "cpu-issue46",  # not in the profile folders: found by its path only
        "device": "CPU (a test's)",
        "source": "test",
        "device_id": "cpu",
        "threads": 2,
        "curves": [
            {
                "precision": "fp32",
                "resolution": [128, 72],
                "runtime": runtime,
                **({"provider": "CPUExecutionProvider"} if runtime == "onnxruntime" else {}),
                "points": [{"batch": b, "ms": ms} for b, ms in curves[runtime].items()],
            }
            for runtime in runtimes
        ],
    }
    path = tmp_path / "cpu-issue46.json"
    path.write_text(json.dumps(data))
    return path


PLAN = ["--precision", "fp32", "--resolution", "128x72", "--fps", "10", "--p99-ms", "150",
        "--policies", "all,dynamic", "--duration", "10", "--seeds", "1"]  # fmt: skip


def plan_json(profile: Path, capsys, *extra: str) -> dict:
    code = main(["plan", "--profile", str(profile), *PLAN, *extra, "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_plan_runtime_picks_the_curve_it_plans_on(tmp_path, capsys):
    """86228b5: plan had no --runtime and always planned on torch's curve."""
    profile = cpu_profile(tmp_path)
    torch_plan = plan_json(profile, capsys, "--runtime", "torch")
    ort_plan = plan_json(profile, capsys, "--runtime", "onnxruntime")
    assert (torch_plan["runtime"], ort_plan["runtime"]) == ("torch", "onnxruntime")
    # ONNX Runtime's curve is 2.7x faster at batch 1: more sessions fit the same budget
    assert ort_plan["recommended"]["max_sessions"] > torch_plan["recommended"]["max_sessions"]
    assert plan_json(profile, capsys)["runtime"] == "torch"  # where a torch curve exists


def test_a_profile_swept_on_onnxruntime_alone_plans_without_the_flag(tmp_path, capsys):
    """86228b5: "profile cpu-issue46: no curve for fp32 at 128x72"."""
    profile = cpu_profile(tmp_path, ("onnxruntime",))
    assert plan_json(profile, capsys)["runtime"] == "onnxruntime"
    code = main(["plan", "--profile", str(profile), *PLAN, "--runtime", "torch"])
    assert code == 2
    assert "no curve for fp32 at 128x72 (it has: fp32 128x72 onnxruntime" in capsys.readouterr().err


@pytest.fixture
def exported(tmp_path, capsys) -> Path:
    folder = tmp_path / "deploy"
    code = main(["plan", "--profile", str(cpu_profile(tmp_path)), *PLAN,
                 "--runtime", "onnxruntime", "--export", str(folder)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "serve_config.yaml" in out and "it serves the ONNX export" in out
    return folder


def run_config(*argv: str):
    args = build_parser().parse_args(["run", *argv])
    args.argv = ["run", *argv]
    return config_from_args(args)


def test_every_exported_setting_runs_as_written_on_its_engine(exported, tmp_path):
    """86228b5: `run --backend triton --device cpu --config policy.json` exited 2 ("needs the
    torch backend (got 'onnxruntime')"), and without --device "no such profile or file":
    policy.json named the profile, not its file."""
    policy = str(exported / "policy.json")
    written = load_setting(policy)
    assert written.runtime == "onnxruntime"
    assert written.profile == str((tmp_path / "cpu-issue46.json").resolve())
    for argv, runner in (
        ((), "emulated"),
        (("--device", "cpu"), "torch"),
        (("--backend", "triton"), "emulated"),
        (("--backend", "triton", "--device", "cpu"), "torch"),
        (("--backend", "ray"), "emulated"),
        (("--backend", "ray", "--device", "cpu"), "torch"),
    ):
        config = run_config(*argv, "--config", policy)
        assert config.runner == runner, argv
        assert config.runtime == "onnxruntime", argv  # the curve planned on, or the model's
        for name in ("policy", "max_batch", "max_delay_ms", "sessions", "fps", "precision"):
            assert getattr(config, name) == getattr(written, name), (argv, name)
        assert config.resolution == (128, 72)
        if runner == "emulated":  # the curve it was planned on, found by its path
            from batchscope.engine.backends import make_backend

            backend = make_backend(config.in_replica())
            assert backend.curve.runtime == "onnxruntime"
            assert backend.curve.ms(1) == ORT_MS[1]
        else:
            assert config.profile is None  # the real model: measured, not replayed
    code = main(["run", "--config", policy, "--duration", "1", "--warmup", "0", "--json", "-"])
    assert code == 0


def triton_model_config(folder: Path) -> tuple[model_config_pb2.ModelConfig, str]:
    text = (folder / "blurball" / "config.pbtxt").read_text()
    return text_format.Parse(text, model_config_pb2.ModelConfig()), text


def test_the_triton_export_serves_with_the_threading_its_curve_was_measured_with(exported):
    """86228b5: model.py opened ONNX Runtime with its default threading (spinning, one
    intra-op thread per physical core) whatever the sweep measured with."""
    model, text = triton_model_config(exported / "triton")
    params = {k: v.string_value for k, v in model.parameters.items()}
    assert params == {"runner": "onnxruntime", "intra_op_threads": "2", "inter_op_threads": "1"}
    assert "2 intra-op threads" in text
    ort = pytest.importorskip("onnxruntime")
    options = session_options(ort, params)
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    # without parameters (BatchScope's own Triton runs): the sweep's rule, the cores
    import os

    assert session_options(ort, {}).intra_op_num_threads == os.cpu_count()


def test_a_gpu_or_built_in_profile_s_export_serves_its_curve_and_says_so(tmp_path, capsys):
    """86228b5: the repository of a plan on laptop-8gb (a GPU) served the real model on the
    CPU (155.8 ms a request where the curve says 4.69 ms), and said nothing."""
    folder = tmp_path / "deploy"
    code = main(["plan", "--profile", "laptop-8gb", "--precision", "fp16", "--resolution",
                 "256x144", "--fps", "30", "--p99-ms", "50", "--policies", "dynamic",
                 "--duration", "5", "--seeds", "1", "--export", str(folder)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "it serves no model: the curve of laptop-8gb" in out
    assert "export-onnx" not in out.split("Triton model repository")[1]  # nothing to add
    model, text = triton_model_config(folder / "triton")
    params = {k: v.string_value for k, v in model.parameters.items()}
    assert params["runner"] == "emulated"
    curve = json.loads(params["curve_ms"])
    assert curve[0] == 4.69 and curve[3] == 9.29  # fp16 256x144: batch 1 and 4
    assert "no model: the curve of laptop-8gb" in text.replace("#   ", "").replace("\n", " ")


def test_the_app_s_export_of_an_emulated_run_serves_its_curve(tmp_path):
    from batchscope.config import RunConfig

    config = RunConfig(profile="laptop-8gb", precision="fp16", resolution=(256, 144))
    folder = export_setting(config, tmp_path / "out")
    model, _ = triton_model_config(folder / "triton")
    assert model.parameters["runner"].string_value == "emulated"
    real = RunConfig(backend="torch", device="cpu", precision="fp32", resolution=(128, 72))
    write_repository(tmp_path / "real", real, None)
    model, _ = triton_model_config(tmp_path / "real")
    assert model.parameters["runner"].string_value == "onnxruntime"


def test_the_ray_serve_config_is_ray_s_serve_deploy_schema(exported):
    from ray.serve.schema import ServeDeploySchema

    data = yaml.safe_load((exported / "serve_config.yaml").read_text())
    schema = ServeDeploySchema.model_validate(data)
    (app,) = schema.applications
    (deployment,) = app.deployments
    setting = load_setting(exported / "policy.json")
    assert deployment.user_config == {
        "max_batch_size": setting.max_batch,
        "batch_wait_timeout_s": setting.max_delay_ms / 1000.0,
    }
    assert deployment.num_replicas == 1
    assert deployment.max_ongoing_requests == setting.sessions
    assert deployment.ray_actor_options.num_cpus == 2  # the threads its curve was measured with
    assert app.args["device"] == "cpu"
    assert app.args["setting"]["runtime"] == "onnxruntime"
    # the builder serve run imports makes the deployment of that setting
    from batchscope.engine.serving.replica import app_from_args

    assert app_from_args(app.args) is not None
