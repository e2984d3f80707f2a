"""Outputs (issue 44): every path checked before the work starts, Ctrl-C during a run
still writes what was measured, and each file has the mode every other output has."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from batchscope.cli import main
from batchscope.cli.args import CliError
from batchscope.cli.outputs import check_file
from batchscope.engine.recorder import check_folder
from batchscope.models.onnx_export import write_onnx
from contract import wait_for


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_the_onnx_file_has_the_mode_of_any_other_output(tmp_path: Path, mask: int) -> None:
    """export-onnx wrote model.onnx 0600 (mkstemp's private mode) where every other
    output is 0666 less the umask, as ``open()`` makes it."""
    with umask(mask):
        model = write_onnx(b"bytes of a model", tmp_path / "model.onnx")
        assert os.umask(mask) == mask  # reading the umask put it back as it was
        other = tmp_path / "report.json"
        other.write_text("{}")
    assert stat.S_IMODE(model.stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(model.stat().st_mode) == stat.S_IMODE(other.stat().st_mode)
    assert model.read_bytes() == b"bytes of a model"


# -- every output path is checked before the work starts ------------------------------

RUN = ["run", "--sessions", "2", "--resolution", "256x144", "--duration", "1", "--warmup", "0"]
SIMULATE = ["simulate", "--sessions", "2", "--duration", "2"]
PLAN = ["plan", "--fps", "30", "--p99-ms", "50", "--policies", "all"]
EXPERIMENT = ["--experiment", "round-robin"]

BAD_PLACES = {  # where a file cannot be written, and what the tree there holds
    "missing-folder": "missing/out.{ext}",
    "file-as-folder": "afile/out.{ext}",
    "a-folder": "adir",
}
OUTPUTS = [
    (RUN, "--json", "json"),
    (RUN, "--csv", "csv"),
    (RUN, "--report", "html"),
    ([*RUN[:1], *EXPERIMENT], "--json", "json"),
    (SIMULATE, "--json", "json"),
    ([*SIMULATE[:1], *EXPERIMENT], "--csv", "csv"),
    ([*SIMULATE[:1], *EXPERIMENT], "--report", "html"),
    (PLAN, "--json", "json"),
    (PLAN, "--plot", "png"),
]
CASES = [
    (command, flag, BAD_PLACES[place].format(ext=ext), f"{command[0]}{len(command)} {flag} {place}")
    for command, flag, ext in OUTPUTS
    for place in BAD_PLACES
] + [  # a recording makes a missing folder; it needs a new or empty one it can write in
    (RUN, "--record", "afile/rec", "run --record under-a-file"),
    (RUN, "--record", "adir", "run --record not-empty"),
]


@pytest.mark.parametrize(
    ("command", "flag", "place"), [c[:3] for c in CASES], ids=[c[3] for c in CASES]
)
def test_an_output_that_cannot_be_written_is_refused_before_the_work(
    tmp_path: Path, capsys, monkeypatch, command: list[str], flag: str, place: str
) -> None:
    """`run --json` into a missing folder was refused only after the whole run."""
    (tmp_path / "afile").write_text("a file, not a folder")
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir" / "something").write_text("a folder with something in it")
    target = tmp_path / place
    monkeypatch.chdir(tmp_path)
    assert main([*command, flag, str(target)]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert len(err.splitlines()) == 1, err  # nothing opened, simulated or planned first
    assert captured.out == ""  # no table: the work never started
    assert err.startswith("batchscope: error: ") and str(target) in err
    assert not list(tmp_path.rglob(".batchscope-probe-*"))


def test_a_read_only_folder_is_refused_before_the_run(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root writes anyway: the check probes, as writing would
            pytest.skip("this user can write in a read-only folder (root)")
        assert main([*RUN, "--json", str(folder / "out.json")]) == 2
    finally:
        folder.chmod(0o755)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Permission denied" in err, err


def test_writable_places_pass_and_leave_nothing(tmp_path: Path) -> None:
    check_file("--json", str(tmp_path / "new.json"))
    check_file("--json", "-")
    check_file("--out", str(tmp_path / "made" / "by" / "sweep.json"), make_folder=True)
    check_folder(tmp_path / "rec" / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(CliError, match="does not exist"):
        check_file("--out", str(tmp_path / "made" / "sweep.json"))


# -- Ctrl-C during run ------------------------------------------------------------------

APP = str(Path(__file__).resolve().parents[1] / "app")


@pytest.mark.slow
def test_ctrl_c_during_run_reports_what_was_measured(tmp_path: Path) -> None:
    out, rec = tmp_path / "report.json", tmp_path / "rec"
    cmd = [sys.executable, "-m", "batchscope", *RUN[:-4], "--duration", "120", "--warmup", "0"]
    cmd += ["--json", str(out), "--record", str(rec), "synthetic"]
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    with stdout.open("w") as so, stderr.open("w") as se:
        proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": APP}, stdout=so, stderr=se)
    try:
        items = rec / "items.csv"  # flushed once a second: the run is measuring
        assert wait_for(lambda: items.exists() and items.stat().st_size > 3_000, timeout=60)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    report = json.loads(out.read_text())
    assert report["interrupted"] is True
    assert sum(s["delivered"] for s in report["sessions"]) > 0
    assert json.loads((rec / "report.json").read_text())["interrupted"] is True
    assert "sessions  policy" in stdout.read_text()  # the summary table
    err = stderr.read_text()
    assert "Traceback" not in err
    assert "batchscope: interrupted: reporting what was measured" in err
