"""Export: the JSON report schema and the plots PNG, without dialogs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchscope.ui.export import ExportError, export_png, export_report
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
