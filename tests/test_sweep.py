"""`batchscope sweep` on the CPU at a tiny resolution: the profile it writes is one the
rest of BatchScope accepts, a missing device is one line, and a failing point is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from batchscope.cli import main
from batchscope.engine.backends import EmulatedBackend
from batchscope.profiles import curve_sweep as sweep
from batchscope.profiles.profile import CurvePoint, load_profile

TINY = [
    "--device",
    "cpu",
    "--precision",
    "fp32",
    "--resolution",
    "128x72",
    "--warmup",
    "1",
    "--repeat",
    "2",
    "--rounds",
    "1",
]


@pytest.fixture
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the user profile folder at a temporary one."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "batchscope" / "profiles"


def test_cpu_sweep_writes_a_profile_the_simulator_and_emulator_accept(
    user_config: Path, capsys
) -> None:
    assert main(["sweep", *TINY, "--batch", "1,2", "--name", "tiny-cpu"]) == 0
    captured = capsys.readouterr()
    path = user_config / "tiny-cpu.json"
    assert path.is_file()  # the default --out is the user profile folder
    progress = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert len(progress) == 2 and all("left" in line for line in progress)
    assert "| batch | FP32 ms | FP32 windows/s |" in captured.out

    profile = load_profile("tiny-cpu")  # found by name, like `batchscope profiles` lists it
    (curve,) = profile.curves
    assert (curve.precision, curve.resolution) == ("fp32", (128, 72))
    assert [p.batch for p in curve.points] == [1, 2]
    # A point can only lack a time if CPU noise made it fall below batch 1's twice.
    assert curve.points[0].ms and curve.points[0].ms > 0
    assert all(p.ms > 0 and p.peak_mb is not None for p in curve.measured)
    for key in ("torch_version", "date", "peak_mb_metric", "device_id"):
        assert key in profile.meta
    assert "median of 1x2 runs" in profile.source

    assert (
        main(
            [
                "simulate",
                "--profile",
                str(path),
                "--precision",
                "fp32",
                "--resolution",
                "128x72",
                "--sessions",
                "2",
                "--duration",
                "2",
            ]
        )
        == 0
    )
    assert "mean fps" in capsys.readouterr().out
    EmulatedBackend(profile, "fp32", (128, 72))  # `run --backend emulated` builds this

    assert main(["profiles"]) == 0
    assert "tiny-cpu" in capsys.readouterr().out


def test_a_sweep_per_runtime_writes_a_curve_for_each(tmp_path: Path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    out = tmp_path / "runtimes.json"
    argv = ["sweep", *TINY, "--batch", "1,2", "--runtime", "torch,onnxruntime", "--out", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "| batch | FP32 torch ms | FP32 onnxruntime ms |" in captured.out
    assert "onnxruntime fp32 128x72 batch 2:" in captured.err
    profile = load_profile(out)
    assert [(c.runtime, c.provider) for c in profile.curves] == [
        ("torch", None),
        ("onnxruntime", "CPUExecutionProvider"),
    ]
    assert profile.curve("fp32", (128, 72), "onnxruntime").measured[0].ms > 0
    assert "onnxruntime: the ONNX export" in profile.source
    assert main(["simulate", "--profile", str(out), "--precision", "fp32", "--resolution",
                 "128x72", "--duration", "1"]) == 0  # fmt: skip


def test_profiles_lists_each_curve_with_its_runtime(user_config: Path, capsys) -> None:
    from batchscope.profiles.profile import BatchCurve, DeviceProfile

    points = (CurvePoint(1, 9.0),)
    DeviceProfile(
        "two-runtimes",
        "cpu",
        (
            BatchCurve("fp32", (128, 72), points),
            BatchCurve("fp32", (128, 72), points, "onnxruntime", "CPUExecutionProvider"),
        ),
    ).save(user_config / "two-runtimes.json")
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "    fp32 128x72 torch:  b1 9.00 ms" in out
    assert "    fp32 128x72 onnxruntime (CPU):  b1 9.00 ms" in out


def test_an_unknown_runtime_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse's one line
        main(["sweep", *TINY, "--runtime", "tvm", "--out", str(tmp_path / "x.json")])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown runtime 'tvm'" in err


def test_missing_device_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    out = tmp_path / "never.json"
    assert main(["sweep", "--device", "cuda:0", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cuda:0" in err
    assert not out.exists()


def test_bad_repeat_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["sweep", *TINY, "--repeat", "0", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "repeat" in err


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sweep.time_round

    def out_of_memory_at_two(model, x, repeat):
        if x.shape[0] == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, x, repeat)

    monkeypatch.setattr(sweep, "time_round", out_of_memory_at_two)
    out = tmp_path / "oom.json"
    assert main(["sweep", *TINY, "--batch", "1,2,3", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    points = json.loads(out.read_text())["curves"][0]["points"]
    assert [p["batch"] for p in points] == [1, 2, 3]
    assert "ms" not in points[1] and points[1]["error"].startswith("out of memory")
    assert points[0]["ms"] > 0
    assert "ms" in points[2] or "noise" in points[2]["error"]  # measured after the failure
    assert "| 2 | OOM | OOM |" in captured.out
    curve = load_profile(out).curves[0]
    assert 2 not in [p.batch for p in curve.measured]  # the emulator interpolates over it


def _point(batch: int, ms: float) -> CurvePoint:
    return CurvePoint(batch, ms, peak_mb=1.0)


def test_a_falling_curve_is_measured_again_then_the_later_point_left_out() -> None:
    lines: list[str] = []
    noisy = [_point(1, 40.0), _point(2, 30.0), _point(4, 150.0)]
    again = {1: _point(1, 41.0), 2: _point(2, 80.0)}
    settled, flag = sweep._settle(noisy, again.__getitem__, lines.append)
    assert [p.ms for p in settled] == [41.0, 80.0, 150.0]  # the fall was noise
    assert flag is None  # measuring again settled it
    assert "b1 40.00 ms > b2 30.00 ms" in lines[0]

    still = {1: _point(1, 40.0), 2: _point(2, 35.0)}
    settled, flag = sweep._settle(noisy, still.__getitem__, lines.append)
    assert [p.ms for p in settled] == [40.0, None, 150.0]
    assert "35.00 ms" in settled[1].error and "twice" in settled[1].error
    assert flag is not None and "b2 left out" in flag


def test_an_outlier_measured_again_is_not_kept_over_its_neighbours() -> None:
    """Issue 44: on a loaded machine batch 4 read 173.7 ms, then 3,468 ms when measured
    again, and the sweep kept 3,468 and left batch 8 out as "noise". The reading that
    fits its neighbours is kept, the curve flagged."""
    lines: list[str] = []
    first = [_point(1, 48.0), _point(2, 95.0), _point(4, 173.7), _point(8, 160.0)]
    first.append(_point(16, 690.0))
    again = {4: _point(4, 3468.0), 8: _point(8, 340.0)}
    settled, flag = sweep._settle(first, again.__getitem__, lines.append)
    assert [p.ms for p in settled] == [48.0, 95.0, 173.7, 340.0, 690.0]
    assert flag is not None and "not monotone within its noise" in flag
    assert "b4 read 173.70 then 3468.00 ms" in flag
    assert any(line.startswith("flagged: ") for line in lines)  # the sweep's output says so


def test_a_rising_curve_is_kept_as_measured() -> None:
    points = [_point(1, 40.0), _point(2, 40.0), _point(4, 150.0)]
    assert sweep._settle(points, pytest.fail, pytest.fail) == (points, None)


def _flagged_profile(tmp_path: Path) -> Path:
    laptop = json.loads((Path(__file__).parents[1] / "assets/profiles/laptop-8gb.json").read_text())
    laptop["curves"][0]["noisy"] = "not monotone within its noise: b4 read 173.70 then 3468.00 ms"
    path = tmp_path / "flagged.json"
    path.write_text(json.dumps(laptop))
    return path


def test_the_flag_is_kept_in_the_profile_and_plan_warns_in_one_line(tmp_path, capsys) -> None:
    path = _flagged_profile(tmp_path)
    profile = load_profile(path)
    assert profile.curves[0].noisy and not profile.curves[1].noisy
    assert load_profile(profile.save(tmp_path / "again.json")).curves[0].noisy  # round trip
    plan = ["plan", "--profile", str(path), "--fps", "30", "--p99-ms", "50"]
    assert main([*plan, "--policies", "oldest", "--precision", "fp16"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "3468.00 ms" in warnings[0], warnings
    # a clean curve of the same profile: no warning
    assert main([*plan, "--policies", "oldest", "--precision", "fp32"]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_sweep_times_with_events_and_reads_torch_peak_memory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "gpu.json"
    args = [
        "sweep",
        "--device",
        "cuda:0",
        "--precision",
        "fp16,fp32",
        "--resolution",
        "128x72",
        "--batch",
        "1,2",
        "--warmup",
        "2",
        "--repeat",
        "5",
        "--rounds",
        "2",
    ]
    assert main([*args, "--out", str(out)]) == 0
    profile = load_profile(out)
    assert {c.precision for c in profile.curves} == {"fp16", "fp32"}
    assert all(p.peak_mb and p.peak_mb > 0 for c in profile.curves for p in c.measured)
    assert profile.meta["cuda_version"] and profile.memory_total_mb > 1000
    assert "max_memory_allocated" in profile.meta["peak_mb_metric"]
    assert "| batch | FP16 ms | FP32 ms | FP16 windows/s | FP32 windows/s |" in (
        capsys.readouterr().out
    )
