"""Starting a serving engine from the window (issue 44, item 6): the GUI thread keeps
running while it starts (progress in the status line), a stretch without samples is a
gap in the time plots, and a start that fails leaves the Controls panel as it was.

The engine is faked (no Ray): its start waits on the test, or fails with what a real
failed Ray start says (its log's last lines and a traceback)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QTimer

from batchscope.device.checks import BackendError
from batchscope.engine import run_devices
from batchscope.engine.metrics import MONITOR_PERIOD_S, TimelineSample
from batchscope.ui.plots.time_plots import time_window
from fake_serving import FakeServing

CHANGE_MS = 20_000
#: What Ray raised when its GCS did not start, as BatchScope said it before (86228b5)
RAY_DID_NOT_START = (
    "Ray did not start: RuntimeError: Failed to start GCS.  Last 2 lines of error files:\n"
    "[2026-12-06 02:24:37,694 E 20905 20911] gcs_server_main.cc:120: Failed to bind the GCS "
    "server to port 6379 on 127.0.0.1 (address already in use)\n"
    "[2026-12-06 02:24:37,694 E 20905 20911] gcs_server_main.cc:121: GcsServer exited\n"
    ".Please check /tmp/ray/session_2026-12-06_02-24-30_123456_20905/logs/gcs_server.out "
    "for details. Last connection error: Traceback (most recent call last):\n"
    '  File "ray/_private/node.py", line 1001, in _init_gcs_client\n'
    "    client = GcsClient(address=gcs_address, cluster_id=self._ray_params.cluster_id)\n"
    "ray.exceptions.RpcError: failed to connect to all addresses; last error: UNKNOWN: "
    "ipv4:127.0.0.1:6379: Failed to connect to remote host: Connection refused\n"
)


def fake_engine_start(monkeypatch, build) -> None:
    """Every serving engine the run switches to is started by ``build(config, progress)``;
    Ray is not held (there is none)."""
    monkeypatch.setattr(run_devices, "serving_backend", build)
    monkeypatch.setattr(run_devices, "acquire_serving", lambda: None)
    monkeypatch.setattr(run_devices, "release_serving", lambda: None)


def test_the_gui_thread_runs_on_while_an_engine_starts(dashboard, qtbot, monkeypatch):
    """A start that takes as long as the test says: meanwhile a 20 ms QTimer on the GUI
    thread keeps firing, and the status line says what the start is doing."""
    starting, go = threading.Event(), threading.Event()

    def slow_start(config, progress):
        progress("starting a local Ray on loopback…")
        starting.set()
        go.wait(CHANGE_MS / 1000)
        return FakeServing(config, config.serving or "")

    fake_engine_start(monkeypatch, slow_start)
    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    controls = dashboard.controls
    # the clip's note is said on the first ticks: after it, the status line is the start's
    qtbot.waitUntil(lambda: "it loops" in dashboard.status_line.message.text(), timeout=CHANGE_MS)
    controls.engine.setCurrentIndex(controls.engine.findData("ray"))
    qtbot.waitUntil(starting.is_set, timeout=CHANGE_MS)
    during = len(ticks)
    qtbot.waitUntil(lambda: len(ticks) >= during + 25, timeout=CHANGE_MS)
    assert starting.is_set() and not go.is_set() and dashboard.engine.config.serving is None
    qtbot.waitUntil(
        lambda: dashboard.status_line.message.text() == "starting a local Ray on loopback…",
        timeout=CHANGE_MS,
    )
    go.set()
    qtbot.waitUntil(lambda: dashboard.engine.config.serving == "ray", timeout=CHANGE_MS)
    timer.stop()


def test_a_failed_engine_start_leaves_the_controls_laid_out_as_before(
    dashboard, qtbot, monkeypatch, tmp_path: Path
):
    """86228b5 put the whole page of a failed Ray start under the controls: the panel
    grew by it and was cut off. Now: its first line (the tooltip has the whole), the run
    on the engine it had."""

    def failing_start(config, progress):
        progress("starting a local Ray on loopback…")
        raise BackendError(RAY_DID_NOT_START)

    fake_engine_start(monkeypatch, failing_start)
    controls = dashboard.controls
    qtbot.waitUntil(lambda: dashboard.tick_stats.ticks >= 2, timeout=CHANGE_MS)
    before = controls.sizeHint()
    rows = {w: w.geometry() for w in (controls.policy, controls.engine, controls.device)}
    controls.engine.setCurrentIndex(controls.engine.findData("ray"))
    qtbot.waitUntil(controls.error.isVisible, timeout=CHANGE_MS)
    qtbot.waitUntil(lambda: controls.engine.currentData() == "inprocess", timeout=CHANGE_MS)
    dashboard.grab().save(str(tmp_path / "failed_start.png"))
    first = "Not applied: " + RAY_DID_NOT_START.splitlines()[0]
    assert controls.error.text() == first
    assert "Connection refused" in controls.error.toolTip()
    line = controls.error.fontMetrics().lineSpacing()
    assert controls.sizeHint().height() - before.height() <= 4 * line
    assert controls.sizeHint().width() == before.width()
    for widget, was in rows.items():  # where they were (the form's spare pixels aside)
        now = widget.geometry()
        assert (now.x(), now.width()) == (was.x(), was.width())
        assert abs(now.y() - was.y()) <= 3 and abs(now.height() - was.height()) <= 1
    assert dashboard.engine.config.serving is None


def sample(t: float, fps: float) -> TimelineSample:
    return TimelineSample(t, {0: fps}, 2 * fps, 0.5, 1.0, {"rss_mb": 100.0})


def test_a_stretch_without_samples_is_drawn_as_a_gap():
    """20 fps until 5 s, nothing for 30 s (the process stood still), then 0 fps: the lines
    break at the gap (NaN between), not a fall from 20 to 0 drawn across it."""
    period = MONITOR_PERIOD_S
    before = [sample(i * period, 20.0) for i in range(1, 21)]  # to 5 s
    after = [sample(35.0 + i * period, 0.0) for i in range(8)]
    window = time_window([*before, *after], now=37.0)
    t = window.t
    assert len(t) == len(before) + len(after) + 1
    gap = int(np.flatnonzero(np.isnan(window.fps[0]))[0])
    assert 5.0 < t[gap] < 35.0
    for series in (window.fps[0], window.throughput, window.memory["rss_mb"]):
        assert np.isnan(series[gap]) and np.isfinite(np.delete(series, gap)).all()
    # samples a monitor period apart (or a little late) stay joined
    steady = time_window(before, now=5.0)
    assert np.isfinite(steady.fps[0]).all() and len(steady.t) == len(before)
