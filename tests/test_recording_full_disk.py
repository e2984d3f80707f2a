"""A recording onto a full disk costs the recording's tail, never the run (issue 44).

The disk is simulated: the recorder's ``os`` is one whose ``write`` takes what fits in
``room`` bytes (as Linux does when a disk fills up) and then fails with ENOSPC.
"""

from __future__ import annotations

import csv
import errno
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import batchscope.engine.recorder as recorder_module
from batchscope.cli import main
from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from contract import wait_for

CFG = dict(
    sources=("synthetic",), resolution=(256, 144), sessions=3, policy="all", backend="emulated"
)


class FullDisk:
    """``os`` as the recorder sees it, on a disk with ``room`` bytes left."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.refused = 0  # writes that found the disk full

    def write(self, fd: int, data: bytes) -> int:
        if self.room <= 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        taken = os.write(fd, bytes(data[: self.room]))
        self.room -= taken
        return taken

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def whole_rows(path: Path) -> list[list[str]]:
    """The rows of a CSV file, checked whole: it ends with a line end, every row has
    the header's columns, and the user guide's ``np.genfromtxt`` reads it."""
    text = path.read_text()
    assert text.endswith("\n"), text[-200:]
    rows = list(csv.reader(text.splitlines()))
    assert {len(r) for r in rows} == {len(rows[0])}
    if path.name == "items.csv" and len(rows) > 1:
        items = np.genfromtxt(path, delimiter=",", names=True)
        assert np.atleast_1d(items).shape == (len(rows) - 1,)
    return rows


def test_a_full_disk_ends_the_recording_at_a_whole_line_and_says_so(tmp_path, monkeypatch):
    disk = FullDisk(room=6_000)  # the headers and about the first second
    monkeypatch.setattr(recorder_module, "os", disk)
    engine = Engine(RunConfig(**CFG))
    engine.open()
    engine.start()
    try:
        folder = engine.start_recording(tmp_path / "rec")
        recorder = engine.recorder
        assert recorder is not None
        # said the moment the write failed: an error event, as the status bar shows them
        assert wait_for(lambda: any(e.kind == "error" for e in engine.events()), timeout=10)
        assert wait_for(lambda: not recorder.alive, timeout=5)  # the recording stopped
        items_then = (folder / "items.csv").read_text()
        assert wait_for(lambda: engine.store.items.total > 200, timeout=10)  # the run goes on
        assert (folder / "items.csv").read_text() == items_then  # nothing more appended
        engine.stop_recording()  # no exception
    finally:
        engine.stop()
    errors = [e for e in engine.events() if e.kind == "error"]
    assert "No space left on device" in errors[0].message and str(folder) in errors[0].message
    assert recorder.failures[0].startswith(f"recording to {folder} stopped: cannot write ")
    assert len(whole_rows(folder / "items.csv")) > 1  # what fitted was kept
    for name in ("batches.csv", "timeline.csv"):
        whole_rows(folder / name)
    for line in (folder / "events.jsonl").read_text().splitlines():
        json.loads(line)
    assert not (folder / "report.json").exists()  # not half a JSON file: none
    assert disk.refused <= 2  # it stopped writing: no retry every second


def test_room_for_the_report_only_it_is_written_whole(tmp_path, monkeypatch):
    """The data files fill the disk, then a few kB come free: report.json is written,
    saying the recording was cut short."""
    disk = FullDisk(room=3_000)
    monkeypatch.setattr(recorder_module, "os", disk)
    engine = Engine(RunConfig(**CFG))
    engine.open()
    engine.start()
    try:
        folder = engine.start_recording(tmp_path / "rec")
        assert wait_for(lambda: any(e.kind == "error" for e in engine.events()), timeout=10)
        disk.room = 10**7
        engine.stop_recording()
    finally:
        engine.stop()
    report = json.loads((folder / "report.json").read_text())
    assert "No space left on device" in report["recording_error"]
    assert report["overall"]["throughput_wps"] > 0


@pytest.mark.slow
def test_run_says_so_live_prints_its_summary_and_writes_its_report(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(recorder_module, "os", FullDisk(room=6_000))
    rec, out = tmp_path / "rec", tmp_path / "report.json"
    argv = ["run", "--sessions", "3", "--resolution", "256x144", "--duration", "3"]
    argv += ["--warmup", "0", "--record", str(rec), "--json", str(out), "synthetic"]
    assert main(argv) == 1  # the run went to the end; its recording did not
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert "Traceback" not in captured.err
    live = next(i for i, line in enumerate(err) if line.startswith("batchscope: error at "))
    assert "No space left on device" in err[live]
    last_status = max(i for i, line in enumerate(err) if line.startswith("[  3"))
    assert live < last_status  # said during the run, not after it
    # and at the end, what is missing: the recording's tail, its report.json (no room)
    assert err[-2].startswith(f"batchscope: error: recording to {rec} stopped")
    assert err[-1] == (
        f"batchscope: error: recording to {rec}: report.json not written (No space left on device)"
    )
    assert "sessions  policy" in captured.out and f"recorded to {rec}" in captured.out
    report = json.loads(out.read_text())
    assert report["overall"]["throughput_wps"] > 0
    assert any(e["kind"] == "error" for e in report["events"])
    assert len(whole_rows(rec / "items.csv")) > 1
