"""Recordings: complete files while running, and nothing lost but the last second on kill -9."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.recorder import RecordingError
from batchscope.experiment import Fault
from contract import wait_for

APP = str(Path(__file__).resolve().parents[1] / "app")
CFG = dict(sources=("synthetic",), resolution=(256, 144), sessions=3, policy="all")


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def moved(row: dict[str, str]) -> bool:
    """Whether the ball had moved on from the window's frame when its answer came."""
    return row["fresh_px"] != "" and float(row["fresh_px"]) > 0.0


def test_recording_holds_items_batches_timeline_events_and_report(tmp_path):
    engine = Engine(RunConfig(**CFG))
    engine.open()
    engine.start()
    try:
        folder = engine.start_recording(tmp_path / "rec")
        assert wait_for(lambda: engine.store.items.total > 20)
        engine.apply(engine.config.with_changes(policy="oldest"))
        # answers later than a frame (a 10× slower device: ~50 ms): the ball has moved on
        assert engine.inject(Fault("slow_device", 1.0, factor=10.0)) is None
        assert wait_for(lambda: len(rows(folder / "items.csv")) > 30)  # flushed while running
        assert wait_for(lambda: any(moved(r) for r in rows(folder / "items.csv")))
        assert wait_for(lambda: len(rows(folder / "timeline.csv")) >= 6)
        engine.stop_recording()
    finally:
        engine.stop()
    items = rows(folder / "items.csv")
    assert {r["session"] for r in items} == {"0", "1", "2"}
    # each row is the worker's record of that window (times in s since the engine started)
    scored = {
        (int(r["session"]), f"{r['arrival'] - engine._t0:.6f}"): r
        for r in engine.store.items.view()
    }
    for r in items:
        t = [float(r[k]) for k in ("arrival", "start", "prep_end", "compute_end", "result")]
        assert t == sorted(t)
        # the synthetic scene has ground truth; the emulated device no positions: freshness
        # only (the ball's travel during the latency, when it is in view at both instants),
        # as the worker scored it
        assert (r["scored"], r["detected"], r["hit"], r["error_px"]) == ("0", "0", "0", "")
        record = scored[(int(r["session"]), r["arrival"])]
        assert r["visible"] == str(int(record["visible"]))  # the ball in the window's frame
        fresh = record["fresh_px"]
        if np.isnan(fresh):
            assert r["fresh_px"] == ""
        else:
            assert float(r["fresh_px"]) == pytest.approx(fresh, abs=0.005)
    # the ball is in view most of the time: most rows have a freshness
    assert sum(r["fresh_px"] != "" for r in items) > len(items) / 2
    batches = rows(folder / "batches.csv")
    assert sum(int(b["size"]) for b in batches) == len(items)
    assert len(rows(folder / "timeline.csv")) >= 6
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert any("policy all → oldest" in e["message"] for e in events)
    report = json.loads((folder / "report.json").read_text())
    assert report["config"]["policy"] == "oldest"
    assert json.loads((folder / "config.json").read_text())["policy"] == "all"


def test_recording_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "old.txt").write_text("keep me")
    engine = Engine(RunConfig(**CFG))
    engine.open()
    try:
        with pytest.raises(RecordingError, match="not empty"):
            engine.start_recording(tmp_path)
    finally:
        engine.stop()
    assert (tmp_path / "old.txt").read_text() == "keep me"


@pytest.mark.slow
def test_kill_9_leaves_valid_files_up_to_the_last_second(tmp_path):
    folder = tmp_path / "rec"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batchscope",
            "run",
            "synthetic",
            "--sessions",
            "4",
            "--resolution",
            "256x144",
            "--duration",
            "60",
            "--quiet",
            "--record",
            str(folder),
        ],
        env={**os.environ, "PYTHONPATH": APP},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            items = folder / "items.csv"
            if items.exists() and items.stat().st_size > 20_000:
                break
            time.sleep(0.2)
        size = items.stat().st_size
        assert wait_for(lambda: items.stat().st_size > size, timeout=10)  # one more flush
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    # whole lines, but for the last one if the kill landed inside a write (Linux ends a
    # file write short when a fatal signal comes between two pages; seen under two CPU hogs)
    text = (folder / "items.csv").read_text()
    whole, _, cut = text.rpartition("\n")
    assert len(cut) < len(text.splitlines()[0]) + 120  # at most one line, cut short
    (folder / "items.csv").write_text(whole + "\n")
    items = rows(folder / "items.csv")
    assert len(items) > 100
    assert all(len(r) == 15 and None not in r.values() for r in items)
    timeline = rows(folder / "timeline.csv")
    last_item = max(float(r["result"]) for r in items)
    last_sample = float(timeline[-1]["t"])
    assert last_item > last_sample - 1.5  # items are no more than a flush behind
    assert not (folder / "report.json").exists()  # the run never ended


def test_reset_while_recording_loses_nothing(tmp_path):
    engine = Engine(RunConfig(**CFG))
    engine.open()
    engine.start()
    try:
        folder = engine.start_recording(tmp_path / "rec")
        assert wait_for(lambda: engine.store.items.total > 20)
        before_reset = engine.store.items.total
        reset_at = engine.now()
        engine.reset_stats()
        assert wait_for(lambda: engine.store.items.total > before_reset + 20)
        total = engine.store.items.total
        engine.stop_recording()
    finally:
        engine.stop()
    report = json.loads((folder / "report.json").read_text())
    assert "recording_lost_items" not in report
    items = rows(folder / "items.csv")
    assert len(items) >= total  # every window, before and after the reset
    assert sum(float(r["result"]) < reset_at for r in items) >= before_reset


def test_reset_while_recording_keeps_the_timeline(tmp_path):
    engine = Engine(RunConfig(**CFG))
    engine.open()
    engine.start()
    try:
        folder = engine.start_recording(tmp_path / "rec")
        assert wait_for(lambda: len(engine.store.timeline) >= 6)
        engine.reset_stats()
        n = len(engine.store.timeline)
        assert wait_for(lambda: len(engine.store.timeline) >= n + 2)
        engine.stop_recording()
    finally:
        engine.stop()
    times = [float(r["t"]) for r in rows(folder / "timeline.csv")]
    gaps = [b - a for a, b in pairwise(times)]
    assert len(times) >= 6 and max(gaps) < 0.5  # a sample every 0.25 s, none missing
