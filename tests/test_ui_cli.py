"""`batchscope gui --screenshot`: the real app, grabbed and closed, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"


def run_gui(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_CONFIG_HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(APP), os.environ.get("PYTHONPATH")])),
    }
    code = "import sys; from batchscope.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "gui", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_screenshot_writes_a_non_blank_png(tmp_path: Path, tiny_video: Path):
    import cv2

    out = tmp_path / "out.png"
    proc = run_gui([str(tiny_video), "--screenshot", str(out), "--after", "2"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    image = cv2.imread(str(out))
    assert image is not None and image.shape[1] >= 1000
    assert float(image.std()) > 10.0  # panels, plots and frames: far from one flat colour
    assert not (tmp_path / "BatchScope").exists()  # a screenshot run keeps no settings


def test_screenshot_to_an_unwritable_path_fails_with_one_line(tmp_path: Path, tiny_video: Path):
    out = tmp_path / "missing-folder" / "out.png"
    proc = run_gui([str(tiny_video), "--screenshot", str(out), "--after", "0"], tmp_path)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("batchscope:")]
    # refused before the window opens (issue 44): the flag, the path, the reason
    assert errors == [
        f"batchscope: error: --screenshot {out}: the folder {out.parent} does not exist"
    ]


def test_unknown_experiment_is_one_line_and_scenario_is_its_old_name(tmp_path: Path):
    for flag in ("--experiment", "--scenario"):
        proc = run_gui([flag, "nope"], tmp_path)
        assert proc.returncode == 2
        assert proc.stderr.startswith(
            "batchscope: error: experiment 'nope': no such experiment or file; "
            "built-in and user experiments: adaptive-budget, bus-or-taxi"
        )
        assert proc.stderr.count("\n") == 1


def test_a_malformed_experiment_file_is_one_line_and_no_window(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("duration = 10\n[[step]]\nat = 20\nsessions = 2\n")
    proc = run_gui(["--experiment", str(bad)], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"batchscope: error: {bad}: step 1: at = 20: past the experiment's duration (10 s)\n"
    )


def test_gui_experiment_plays_it_and_the_segment_table_fills(tmp_path: Path, tiny_video: Path):
    import cv2

    out = tmp_path / "exp.png"
    proc = run_gui(
        [str(tiny_video), "--experiment", "bus-or-taxi", "--screenshot", str(out), "--after", "3"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    image = cv2.imread(str(out))
    assert image is not None and float(image.std()) > 10.0


# -- gui --help, --light and --presentation ---------------------------------------------


def test_gui_help_lists_every_experiment_and_the_look_flags(monkeypatch, capsys):
    from batchscope.cli import main
    from batchscope.experiment import Experiment, list_experiments

    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at $COLUMNS
    try:
        main(["gui", "--help"])
    except SystemExit as exc:
        assert exc.code == 0
    text = capsys.readouterr().out
    names = [e.name for _, e in list_experiments() if isinstance(e, Experiment)]
    assert {"bus-or-taxi", "round-robin", "starvation", "adaptive-budget"} <= set(names)
    experiment = next(line for line in text.splitlines() if "play an experiment:" in line)
    assert f"play an experiment: {', '.join(names)}, or a .toml path" in experiment
    flags = {line.split()[0]: line for line in text.splitlines() if line.startswith("  --")}
    assert "presentation mode" in flags["--presentation"] and "F11" in flags["--presentation"]
    assert "light theme" in flags["--light"]
    assert "F11 toggles presentation mode" in text
    assert "BATCHSCOPE_THEME=light" in text


def test_initial_look_flag_over_environment_over_saved_theme(ui_settings):
    import argparse

    from batchscope.ui.window.app import initial_look

    def look(light: bool, presentation: bool, environ: dict, saved: str | None):
        if saved:
            ui_settings.setValue("theme", saved)
        args = argparse.Namespace(light=light, presentation=presentation)
        got = initial_look(args, ui_settings if saved else None, environ)
        return got.theme.name, got.presentation

    assert look(False, False, {}, None) == ("dark", False)
    assert look(False, False, {}, "light") == ("light", False)
    assert look(True, False, {}, "dark") == ("light", False)
    assert look(False, True, {}, "dark") == ("dark", True)
    assert look(False, False, {"BATCHSCOPE_THEME": "light"}, "dark") == ("light", False)
    assert look(True, False, {"BATCHSCOPE_THEME": "dark"}, None) == ("light", False)
    assert look(False, False, {"BATCHSCOPE_PRESENTATION": "1"}, None) == ("dark", True)


def test_light_and_presentation_flags_open_the_app_in_them(tmp_path: Path):
    import cv2

    out = tmp_path / "look.png"
    proc = run_gui(
        ["synthetic", "--light", "--presentation", "--screenshot", str(out), "--after", "0"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    image = cv2.imread(str(out))
    # full screen: the offscreen platform's 800×800 screen, not the 1600×1000 window
    assert image.shape[:2] == (800, 800)
    assert float(image.mean()) > 200.0  # the light theme (the dark one averages about 35)


def test_size_opens_and_grabs_at_that_size_in_both_modes(tmp_path: Path):
    import cv2

    for mode in ([], ["--presentation"]):
        out = tmp_path / f"size{len(mode)}.png"
        proc = run_gui(
            ["synthetic", "--size", "1280x800", *mode, "--screenshot", str(out), "--after", "0"],
            tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        # the window at 1280×800, whatever the (800×800) offscreen screen, in either mode
        assert cv2.imread(str(out)).shape[:2] == (800, 1280), mode


def test_a_bad_size_is_one_line(tmp_path: Path):
    for size, reason in (("big", "expected WIDTHxHEIGHT"), ("100x100", "must be 800x600 to")):
        proc = run_gui(["synthetic", "--size", size, "--screenshot", "x.png"], tmp_path)
        assert proc.returncode == 2
        errors = [line for line in proc.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and reason in errors[0] and "--size" in errors[0], errors


def test_gui_backend_flags_that_do_not_go_together_are_one_line(tmp_path: Path):
    for args, words in (
        (["--ray-address", "127.0.0.1:1"], "--ray-address needs --backend ray"),
        (["--backend", "triton", "--experiment", "burst"], "names its own engine"),
    ):
        proc = run_gui(args, tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr


def test_on_engine_keeps_the_device_and_says_what_the_engine_cannot_hold():
    from batchscope.config import RunConfig
    from batchscope.ui.window.settings import on_engine

    config = RunConfig(sources=("synthetic",), profile="server-24gb", policy="adaptive")
    same, note = on_engine(config, "a note", None)
    assert (same, note) == (config, "a note")
    on_ray, note = on_engine(config, None, "ray", "127.0.0.1:6379")
    assert (on_ray.backend, on_ray.profile, on_ray.policy) == ("ray", "server-24gb", "adaptive")
    assert on_ray.ray_address == "127.0.0.1:6379" and note is None
    on_triton, note = on_engine(config, None, "triton")
    assert (on_triton.backend, on_triton.profile) == ("triton", "server-24gb")
    assert on_triton.policy != "adaptive"  # Triton has no live cap: the demo's batching
    assert note is not None and "no live batch cap" in note
