"""Export: the JSON report schema and the plots PNG, without dialogs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchscope.ui.window.export import ExportError, export_png, export_report
from contract import OVERALL_KEYS, SESSION_KEYS


def test_export_json_follows_the_report_schema(dashboard, qtbot, tmp_path: Path):
    qtbot.waitUntil(
        lambda: dashboard.engine.report()["overall"]["throughput_wps"] > 0, timeout=5000
    )
    path = export_report(dashboard.engine, tmp_path / "numbers.json")
    data = json.loads(path.read_text())
    assert data["kind"] == "run"
    assert {"config", "sessions", "overall", "memory"} <= data.keys()
    assert data["config"]["policy"] == "all" and data["config"]["resolution"] == [256, 144]
    assert data["sessions"][0].keys() >= SESSION_KEYS
    assert data["overall"].keys() >= OVERALL_KEYS


def test_export_png_and_errors(dashboard, tmp_path: Path):
    from PySide6.QtGui import QImage

    path = export_png(dashboard.dashboard, tmp_path / "plots")
    assert path.suffix == ".png" and not QImage(str(path)).isNull()
    with pytest.raises(ExportError, match="cannot write"):
        export_png(dashboard.dashboard, tmp_path / "no" / "such" / "plots.png")
    with pytest.raises(ExportError, match="cannot write the report"):
        export_report(dashboard.engine, tmp_path / "no" / "such" / "numbers.json")


def test_record_toggle_writes_a_recording_and_close_finishes_it(dashboard, qtbot, tmp_path):
    qtbot.waitUntil(lambda: dashboard.engine.running, timeout=5000)
    folder = dashboard.presenter.toggle_recording(tmp_path)
    dashboard.set_recording(folder)
    assert folder is not None and folder.parent == tmp_path
    assert dashboard.record_action.isChecked()
    assert folder.name in dashboard.record_action.text()
    qtbot.waitUntil(lambda: (folder / "items.csv").read_text().count("\n") > 10, timeout=8000)
    dashboard.close()  # closing stops the engine, which finishes the recording
    report = json.loads((folder / "report.json").read_text())
    assert report["kind"] == "run" and report["sessions"]
    assert dashboard.engine.threads_alive() == []


HOSTILE = """
name = "<img src=x onerror=alert(1)>"
caption = "<script>alert(1)</script>"
duration = 30
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
[[step]]
at = 0
sessions = 2
policy = "oldest"
caption = "two sessions <script>alert(2)</script>"
[[step]]
at = 1.5
sessions = 3
caption = "three & <b onmouseover=x>more</b>"
"""


def test_export_report_writes_the_html_off_the_gui_thread(dashboard, qtbot, tmp_path: Path):
    from batchscope.experiment import parse_experiment

    dashboard.play_experiment(parse_experiment(HOSTILE, "hostile.toml"))
    engine = dashboard.engine
    qtbot.waitUntil(
        lambda: (
            len(engine.report()["segments"]) >= 3
            and engine.report()["segments"][-1]["measured_s"] > 1.2  # predicted from 1 s on
        ),
        timeout=15_000,
    )
    status = dashboard.status_line.message
    dashboard.export_html(tmp_path / "talk")  # .html added
    assert status.text() == "Writing the report…"  # the GUI thread did not wait for it
    target = tmp_path / "talk.html"
    qtbot.waitUntil(lambda: status.text().startswith("Report saved"), timeout=30_000)
    assert status.text() == f"Report saved to {target}"
    text = target.read_text(encoding="utf-8")
    assert '<table class="segments">' in text and "<th>what changed</th>" not in text
    assert '<th class="text">what changed</th>' in text and "predicted mean fps" in text
    assert "policy all → oldest" in text and "sessions 2 → 3" in text  # the rows
    assert "two sessions &lt;script&gt;alert(2)&lt;/script&gt;" in text
    assert "three &amp; &lt;b onmouseover=x&gt;more&lt;/b&gt;" in text
    assert "<script" not in text.lower() and "<img src=x" not in text and "<b " not in text
    assert "[[step]]" in text  # the experiment file itself
    assert "segment 1: the bus view" in text  # each segment's last seconds, kept by the tick
    # the run began before the experiment: the report is the run's, not titled by the
    # experiment, which it names with the segments it played; segment 0 keeps its own
    # caption (issue 43 item 8; 86228b5 titled the run with the experiment and put its
    # first caption on segment 0)
    assert "BatchScope report: live run" in text
    assert "<li>&lt;img src=x onerror=alert(1)&gt;: segments 1–" in text
    segments = engine.report()["segments"]
    assert segments[0]["caption"] == "" and segments[1]["caption"].startswith("two sessions")


def test_export_report_to_a_missing_folder_is_one_line(dashboard, qtbot, tmp_path: Path):
    status = dashboard.status_line.message
    target = tmp_path / "no" / "such" / "r.html"
    dashboard.export_html(target)
    qtbot.waitUntil(lambda: "cannot write the report" in status.text(), timeout=30_000)
    assert status.text() == f"{target}: cannot write the report (No such file or directory)"
    assert dashboard.engine.running
