"""run/simulate --experiment, experiments, compare: the segment reports and every bad input."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from batchscope.cli import main

EXPERIMENT = """name = "tiny"
caption = "two steps and a failing one"
duration = 5
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
fps = 30
sources = ["synthetic"]
[[step]]
at = 0
sessions = 2
policy = "oldest"
caption = "two sessions"
[[step]]
at = 2
resolution = "1024x576"
[[step]]
at = 2.5
sessions = 3
"""


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(EXPERIMENT)
    return path


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    folder = tmp_path / "config" / "batchscope" / "experiments"
    folder.mkdir(parents=True)
    return folder


def test_run_experiment_reports_segments_with_predictions(tiny, tmp_path, capsys):
    table = tmp_path / "segments.csv"
    code, out, err = run_cli(
        ["run", "--experiment", str(tiny), "--quiet", "--json", "-", "--csv", str(table)], capsys
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["kind"] == "run"
    assert report["experiment"]["name"] == "tiny"
    assert report["experiment"]["text"] == EXPERIMENT
    assert report["experiment"]["duration"] == 5
    segments = report["segments"]
    assert [s["changes"] for s in segments] == [
        {"sessions": 2, "policy": "oldest"},
        {"resolution": [1024, 576]},
        {"sessions": 3},
    ]
    assert "1024x576" in segments[1]["error"]
    assert segments[0]["caption"] == "two sessions"
    assert segments[0]["predicted"]["mean_fps"] == pytest.approx(30, rel=0.1)
    assert segments[2]["overall"]["mean_fps"] > 0
    # 2.0–2.5 s is 0.5 s, all settling: too short to measure, no figures anywhere
    assert segments[1]["too_short"] and segments[1]["measured_s"] == 0.0
    assert segments[1]["overall"] is None and segments[1]["sessions"] is None
    assert segments[1]["predicted"] is None
    assert "too short" in err
    # the table goes to stderr when stdout carries JSON: one row per segment, and the error
    assert "sessions 2, policy oldest" in err
    assert "live vs the simulator's prediction" in err
    assert "not applied:" in err and "1024x576" in err
    rows = list(csv.reader(io.StringIO(table.read_text())))
    assert rows[0][:3] == ["segment", "start–end s", "what changed"]
    assert [r[0] for r in rows[1:]] == ["0", "1", "2"]
    assert rows[1][rows[0].index("predicted mean fps")] != ""
    assert rows[2][rows[0].index("mean fps")] == "too short"


def test_simulate_experiment_has_the_same_schema(capsys):
    code, out, err = run_cli(["simulate", "--experiment", "bus-or-taxi", "--json", "-"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert isinstance(report, dict) and report["kind"] == "simulate"
    assert report["experiment"]["name"] == "bus-or-taxi"
    assert "[[step]]" in report["experiment"]["text"]
    assert [s["index"] for s in report["segments"]] == [0, 1, 2]
    assert [s["start_s"] for s in report["segments"]] == [0, 10, 20]
    keys = {"index", "start_s", "end_s", "changes", "config", "stable", "overall", "sessions"}
    assert all(keys <= s.keys() for s in report["segments"])
    assert "6 sessions want 180 windows/s" in err


def test_experiments_lists_built_in_and_user_files_and_spoiled_ones(user_dir, capsys):
    (user_dir / "mine.toml").write_text(EXPERIMENT.replace('"tiny"', '"mine"'))
    (user_dir / "broken.toml").write_text("duration = 10\n[[step]]\nat = 20\nsessions = 2\n")
    code, out, _ = run_cli(["experiments"], capsys)
    assert code == 0
    lines = out.splitlines()
    bus = next(ln for ln in lines if ln.startswith("bus-or-taxi"))
    assert "built-in" in bus and "30 s" in bus and " 3 " in bus and "keeps up" in bus
    mine = next(ln for ln in lines if ln.startswith("mine"))
    assert "user" in mine and "5 s" in mine and "two steps and a failing one" in mine
    broken = next(ln for ln in lines if "broken.toml" in ln)
    assert "unusable" in broken and "past the experiment's duration" in broken


@pytest.fixture
def reports(tmp_path: Path, capsys) -> dict[str, Path]:
    """bus-or-taxi simulated (one report) and a two-cell simulate grid (a list)."""
    one, grid = tmp_path / "bus.json", tmp_path / "grid.json"
    assert main(["simulate", "--experiment", "bus-or-taxi", "--json", str(one)]) == 0
    argv = ["simulate", "--sessions", "3,6", "--policy", "oldest", "--json", str(grid)]
    assert main(argv) == 0
    capsys.readouterr()
    return {"one": one, "grid": grid}


def figure_line(out: str, label: str) -> list[str]:
    return next(ln for ln in out.splitlines() if ln.startswith(label)).split()


def test_compare_segments_side_by_side_with_ratios(reports, capsys):
    bus = str(reports["one"])
    code, out, _ = run_cli(["compare", bus, bus, "--segment", "1,2"], capsys)
    assert code == 0
    assert "segment 1 (10.0–20.0 s, sessions 3 → 6)" in out
    assert "segment 2 (20.0–30.0 s, policy oldest → all)" in out
    a, b, ratio = (float(x) for x in figure_line(out, "mean fps")[2:])
    assert ratio == pytest.approx(b / a, abs=0.01)
    assert "policy oldest → all" in out
    code, out, _ = run_cli(["compare", bus, bus], capsys)
    assert code == 0 and "whole run" in out and "same config" in out
    assert figure_line(out, "p95 ms")[-1] == "1.00"


def test_compare_picks_a_report_of_a_grid_with_index(reports, capsys):
    grid = str(reports["grid"])
    code, out, _ = run_cli(["compare", grid, grid, "--index", "0,1"], capsys)
    assert code == 0
    assert "sessions 3 → 6" in out


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["run", "--experiment", "nope"], "experiment 'nope': no such experiment"),
        (["simulate", "--experiment", "nope"], "no such experiment"),
        (["run", "--experiment", "{bad_toml}"], "not valid TOML"),
        (["run", "--experiment", "{unknown_key}"], "step 1: unknown field 'sessionz'"),
        (["run", "--experiment", "{out_of_range}"], "step 1: sessions = 0"),
        (["run", "--experiment", "{backwards}"], "step 2: at = 1"),
        (["run", "--experiment", "{tiny}", "--policy", "all"], "--policy conflicts"),
        (["run", "--experiment", "{tiny}", "--sess", "3"], "--sess conflicts"),
        (["run", "--experiment", "{tiny}", "--fps=10"], "--fps conflicts"),
        (["run", "synthetic", "--experiment", "{tiny}"], "the source 'synthetic' conflicts"),
        (["simulate", "--experiment", "{tiny}", "--profile", "x"], "--profile conflicts"),
        (["simulate", "--csv", "x.csv"], "--csv and --report need --experiment"),
        (["compare", "{gone}", "{grid}"], "gone.json: no such file"),
        (["compare", "{notjson}", "{grid}"], "notjson.json: not JSON"),
        (["compare", "{one}", "{notreport}"], "notreport.json: not a BatchScope report"),
        (["compare", "{grid}", "{one}"], "a list of 2 reports (a simulate grid); pick one"),
        (["compare", "{grid}", "{grid}", "--index", "5"], "no report 5 (the list has 0…1)"),
        (["compare", "{one}", "{one}", "--segment", "7"], "no segment 7 (it has 0…2)"),
        (["compare", "{one}", "{one}", "--segment", "x"], "expected N or N,M"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, expect, tiny, reports, tmp_path, capsys):
    files = {"tiny": tiny, "gone": tmp_path / "gone.json", **reports}
    texts = {
        "bad_toml": "duration = [",
        "unknown_key": "duration = 5\n[[step]]\nat = 0\nsessionz = 2\n",
        "out_of_range": "duration = 5\n[[step]]\nat = 0\nsessions = 0\n",
        "backwards": "duration = 5\n[[step]]\nat = 2\n[[step]]\nat = 1\n",
        "notjson": "{not json",
        "notreport": '{"kind": "run"}',
    }
    for name, text in texts.items():
        suffix = ".json" if name.startswith("not") else ".toml"
        files[name] = tmp_path / f"{name}{suffix}"
        files[name].write_text(text)
    code, out, err = run_cli([a.format(**files) for a in argv], capsys)
    assert code == 2, (argv, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert expect in lines[0], lines[0]
    assert "Traceback" not in err and out == ""
