"""Export: the JSON report schema and the plots PNG, without dialogs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchscope.ui.export import ExportError, export_png, export_report


def test_export_json_follows_the_report_schema(dashboard, qtbot, tmp_path: Path):
    qtbot.waitUntil(
        lambda: dashboard.engine.report()["overall"]["throughput_wps"] > 0, timeout=5000
    )
    path = export_report(dashboard.engine, tmp_path / "numbers.json")
    data = json.loads(path.read_text())
    assert data["kind"] == "run"
    assert {"config", "sessions", "overall", "memory"} <= data.keys()
    assert data["config"]["policy"] == "all" and data["config"]["resolution"] == [256, 144]
    session = data["sessions"][0]
    assert {
        "id",
        "source",
        "fps",
        "delivered",
        "overwritten",
        "latency_ms",
        "stages_ms",
    } <= session.keys()
    assert {
        "throughput_wps",
        "mean_fps",
        "min_fps",
        "jain",
        "overwritten",
        "latency_ms",
        "batch_sizes",
        "busy",
    } <= data["overall"].keys()


def test_export_png_and_errors(dashboard, tmp_path: Path):
    from PySide6.QtGui import QImage

    path = export_png(dashboard.dashboard, tmp_path / "plots")
    assert path.suffix == ".png" and not QImage(str(path)).isNull()
    with pytest.raises(ExportError, match="cannot write"):
        export_png(dashboard.dashboard, tmp_path / "no" / "such" / "plots.png")
    with pytest.raises(ExportError, match="cannot write the report"):
        export_report(dashboard.engine, tmp_path / "no" / "such" / "numbers.json")
