"""`batchscope run`: the report contract and one clear line for every bad input."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from batchscope.cli import build_parser, main
from batchscope.config import DEFAULT_RESOLUTION, KNOBS

APP = str(Path(__file__).resolve().parents[1] / "app")


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


FAST = ["--duration", "1", "--warmup", "0.2", "--quiet"]


def test_run_emulated_json_to_stdout(capsys):
    code, out, err = run_cli(
        [
            "run",
            "synthetic",
            "--sessions",
            "3",
            "--policy",
            "round-robin",
            "--resolution",
            "256x144",
            *FAST,
            "--json",
            "-",
        ],
        capsys,
    )
    assert code == 0
    report = json.loads(out)
    assert report["kind"] == "run"
    assert report["config"]["policy"] == "round-robin"
    assert report["config"]["profile"] == "laptop-8gb"
    assert len(report["sessions"]) == 3
    assert report["overall"]["throughput_wps"] > 50
    assert "mean fps" in err  # the table goes to stderr when stdout carries JSON


def test_run_postprocess_reference_reaches_the_backend_and_the_report(capsys):
    """--postprocess flows through the config to the real model's backend; the report's
    config and its notes say which rules measured the detections."""
    argv = ["run", "synthetic", "--device", "cpu", "--resolution", "128x72", "--sessions", "1"]
    code, out, err = run_cli([*argv, *FAST, "--postprocess", "reference", "--json", "-"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["config"]["postprocess"] == "reference"
    assert "post-processing: reference (the authors' rules exactly" in err
    accuracy = report["overall"]["accuracy"]
    assert {"visible", "no_ball", "false_detection_rate"} <= set(accuracy)
    code, out, err = run_cli([*argv, *FAST, "--json", "-"], capsys)
    assert json.loads(out)["config"]["postprocess"] == "weighted"
    assert "post-processing: weighted (BatchScope's" in err


def test_run_writes_json_file_and_prints_table(tmp_path, capsys):
    target = tmp_path / "r.json"
    code, out, _ = run_cli(
        [
            "run",
            "synthetic",
            "--sessions",
            "2",
            "--resolution",
            "256x144",
            *FAST,
            "--json",
            str(target),
        ],
        capsys,
    )
    assert code == 0
    assert "mean fps" in out and "synthetic" in out
    assert json.loads(target.read_text())["config"]["sessions"] == 2


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    text = tmp_path / "notes.mp4"
    text.write_text("hello, I am not a video\n" * 20)
    profile = tmp_path / "broken.json"
    profile.write_text('{"name": "x", "curves": [{"precision": "fp16"}]}')
    ckpt = tmp_path / "garbage.pt"
    ckpt.write_bytes(b"\x00garbage" * 100)
    return {"empty": empty, "text": text, "profile": profile, "ckpt": ckpt}


@pytest.mark.parametrize(
    ("case", "argv", "expect"),
    [
        ("missing file", ["run", "nope.mp4"], "nope.mp4: no such file"),
        ("empty file", ["run", "{empty}"], "empty file"),
        ("text renamed .mp4", ["run", "{text}"], "notes.mp4:"),
        ("camera that is not there", ["run", "camera:99"], "camera:99: no camera at index 99"),
        (
            "malformed profile",
            ["run", "synthetic", "--profile", "{profile}"],
            "curves[0].resolution: missing field",
        ),
        ("unknown profile", ["run", "synthetic", "--profile", "nope"], "profile nope"),
        ("unknown policy", ["run", "--policy", "fastest"], "invalid choice: 'fastest'"),
        ("unknown precision", ["run", "--precision", "int4"], "invalid choice: 'int4'"),
        ("bad resolution", ["run", "--resolution", "500x283"], "multiples of 8"),
        ("negative duration", ["run", "synthetic", "--duration", "-3"], "duration"),
        ("zero sessions", ["run", "--sessions", "0"], "at least 1"),
        (
            "corrupt checkpoint",
            [
                "run",
                "synthetic",
                "--device",
                "cpu",
                "--resolution",
                "128x72",
                "--checkpoint",
                "{ckpt}",
            ],
            "garbage.pt",
        ),
        ("no cuda", ["run", "synthetic", "--device", "cuda:0"], "device cuda:0"),
        (
            "cuda graphs on the cpu",
            ["run", "synthetic", "--device", "cpu", "--resolution", "128x72", "--cuda-graphs"],
            "CUDA graphs: need a CUDA device (device is cpu)",
        ),
        ("cuda graphs emulated", ["run", "synthetic", "--cuda-graphs"], "need the torch backend"),
        (
            "reference post-processing emulated",
            ["run", "synthetic", "--postprocess", "reference"],
            "postprocess = 'reference': needs the torch backend (--device)",
        ),
        ("unknown post-processing", ["run", "--postprocess", "pca"], "invalid choice: 'pca'"),
        (
            "profile lacks resolution",
            ["run", "synthetic", "--resolution", "1024x576"],
            "no curve for fp16 at 1024x576",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(case, argv, expect, tmp_path, capsys):
    if case == "no cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    files = _bad_files(tmp_path)
    argv = [argv[0], *FAST, *(a.format(**files) for a in argv[1:])]
    code, _, err = run_cli(argv, capsys)
    assert code == 2, (case, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, (case, err)
    assert expect in lines[0], (case, lines[0])
    assert "Traceback" not in err


def test_one_bad_source_stops_everything_unless_skipped(tmp_path, capsys):
    code, _, err = run_cli(["run", "synthetic", str(tmp_path / "gone.mp4"), *FAST], capsys)
    assert code == 2 and "gone.mp4: no such file" in err
    code, out, _ = run_cli(
        [
            "run",
            "synthetic",
            str(tmp_path / "gone.mp4"),
            "--sessions",
            "2",
            "--resolution",
            "256x144",
            "--skip-bad-sources",
            *FAST,
            "--json",
            "-",
        ],
        capsys,
    )
    assert code == 0
    report = json.loads(out)
    states = {s["id"]: s.get("state", "running") for s in report["sessions"]}
    assert states == {0: "running", 1: "error"}
    assert report["sessions"][0]["delivered"] > 0


def stderr_of_process(*args: str) -> tuple[int, list[str]]:
    """Run ``python -m batchscope ARGS`` in a new process: exit code and stderr lines.

    In a process of its own, so that what C libraries (OpenCV, FFmpeg) print on the
    real stderr is seen too.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "batchscope", *args, "--quiet"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": APP},
        timeout=120,
    )
    return proc.returncode, proc.stderr.strip().splitlines()


def test_module_entry_point_no_traceback_on_bad_input():
    assert stderr_of_process("run", "camera:99") == (
        2,
        ["batchscope: error: camera:99: no camera at index 99"],
    )


def test_not_a_video_is_one_line_even_from_ffmpeg(tmp_path):
    fake = tmp_path / "notes.mp4"
    fake.write_text("hello, I am not a video\n" * 20)
    assert stderr_of_process("run", str(fake)) == (
        2,
        [f"batchscope: error: {fake}: not a video OpenCV can open"],
    )


NUMERIC = ("sessions", "fps", "max_batch", "max_delay_ms", "batch", "slo_ms", "duration_s")


def test_numeric_flags_default_to_their_knobs():
    args = build_parser().parse_args(["run"])
    for name in NUMERIC:
        assert getattr(args, KNOBS[name].flag[2:].replace("-", "_")) == KNOBS[name].default
    assert args.resolution == DEFAULT_RESOLUTION
    assert build_parser().parse_args(["run", "--max-batch", "none"]).max_batch is None


@pytest.mark.parametrize(
    ("command", "name", "value"),
    [
        ("run", "sessions", "0"),
        ("run", "sessions", "257"),
        ("run", "fps", "0"),
        ("run", "max_batch", "0"),
        ("run", "max_delay_ms", "-1"),
        ("run", "batch", "1025"),
        ("run", "slo_ms", "0"),
        ("run", "duration_s", "0"),
        ("simulate", "sessions", "2,300"),
        ("simulate", "slo_ms", "-5"),
    ],
)
def test_a_value_outside_its_knob_names_the_flag_and_the_range(command, name, value, capsys):
    knob = KNOBS[name]
    code, _, err = run_cli([command, knob.flag, value], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"argument {knob.flag}: must be {knob.range_text()}" in lines[0]


def test_simulate_starts_light_without_torch_or_qt():
    code = (
        "import sys\n"
        "from batchscope.cli import main\n"
        "main(['simulate', '--duration', '1', '--sessions', '2'])\n"
        "print(sorted(m for m in ('torch', 'PySide6', 'pyqtgraph') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_run_takes_a_setting_file_and_refuses_a_flag_it_sets(tmp_path, capsys):
    import json

    from batchscope.config import RunConfig
    from batchscope.setting import save_setting

    path = tmp_path / "policy.json"
    config = RunConfig(
        policy="dynamic", max_batch=3, max_delay_ms=7.0, sessions=2, resolution=(256, 144)
    )
    save_setting(config, path)
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                "synthetic",
                "--config",
                str(path),
                "--duration",
                "1",
                "--warmup",
                "0.2",
                "--quiet",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    cfg = json.loads(out.read_text())["config"]
    assert (cfg["policy"], cfg["max_batch"], cfg["max_delay_ms"], cfg["sessions"]) == (
        "dynamic",
        3,
        7.0,
        2,
    )
    assert cfg["resolution"] == [256, 144] and cfg["duration_s"] == 1.0
    capsys.readouterr()
    assert main(["run", "--config", str(path), "--sessions", "5"]) == 2
    assert "--sessions conflicts with the setting file" in capsys.readouterr().err


# -- help texts and the profiles listing ------------------------------------------------


def command_helps() -> dict[str, str]:
    """Every command's --help, as argparse prints it at 1000 columns (no wrapping)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"": parser.format_help(), **{n: p.format_help() for n, p in sub.choices.items()}}


@pytest.fixture
def wide_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at $COLUMNS


def test_run_help_gives_sessions_and_resolution_their_meaning_and_default(wide_help):
    text = command_helps()["run"]
    sessions = next(line for line in text.splitlines() if line.lstrip().startswith("--sessions"))
    assert "client sessions" in sessions
    assert "at least 1 and at most 256 sessions (default 4)" in sessions
    res = next(line for line in text.splitlines() if line.lstrip().startswith("--resolution"))
    assert "the model's input size in pixels" in res
    assert res.endswith("(default 512x288)")
    policy = next(line for line in text.splitlines() if "batching policy" in line)
    assert policy.endswith("(default all)")


def test_no_help_text_speaks_of_this_machine(wide_help):
    helps = command_helps()
    assert {"gui", "run", "simulate", "sweep", "profiles", "plan"} <= set(helps)
    for name, text in helps.items():
        assert "this 2-core" not in text, name
        assert "this machine" not in text, name
    assert "measured on a 2-core CPU it is 1.5x faster per batch" in helps["run"]


def test_profiles_prints_ms_to_the_hundredth_as_sweep_does(capsys):
    from batchscope.profiles.curve_sweep import markdown_table
    from batchscope.profiles.profile import load_profile

    code, out, _ = run_cli(["profiles"], capsys)
    assert code == 0
    lines = out.splitlines()
    laptop = lines.index(next(line for line in lines if line.startswith("laptop-8gb  [built-in]")))
    assert lines[laptop + 2] == (
        "    fp32 512x288 torch:  b1 15.11 ms  b2 34.21 ms  b3 57.10 ms  b4 79.69 ms  "
        "b8 178.09 ms  b16 366.10 ms"
    )
    assert "    fp32 256x144 torch:  b1 4.07 ms  b4 15.40 ms" in lines
    assert "    fp16 512x288 torch:  b1 8.00 ms  b3 20.00 ms" in lines  # server-24gb
    # the same digits as sweep's table of the same profile
    table = markdown_table(load_profile("laptop-8gb"))
    assert "| 3 | 32.71 | 57.10 | 91.7 | 52.5 |" in table
    assert "| 16 | 221.25 | 366.10 | 72.3 | 43.7 |" in table


def test_the_apps_options_work_without_the_gui_command():
    args = build_parser().parse_args(["gui", "--light"])
    assert args.light is True
    import batchscope.cli as cli

    seen = {}
    parser = cli.build_parser
    try:
        cli.build_parser = lambda: _recording(parser(), seen)
        cli.main(["--light", "--presentation"])
    finally:
        cli.build_parser = parser
    assert seen["command"] == "gui" and seen["light"] and seen["presentation"]


def _recording(parser, seen):
    """``parser`` whose gui handler only records what it was given."""
    real = parser.parse_args

    def parse(argv=None):
        args = real(argv)
        args.handler = lambda a: seen.update(vars(a)) or 0
        return args

    parser.parse_args = parse
    return parser
