"""What read badly on stage and at the desk (issue 48, item 4): each fails on 86228b5."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QApplication, QHBoxLayout, QWidget

from batchscope.config import RunConfig
from batchscope.engine.snapshot import SessionView, Snapshot
from batchscope.ui.theme import Look, look_from_name, stylesheet

ROOT = Path(__file__).resolve().parents[1]


def _snapshot(**changes) -> Snapshot:
    view = SessionView(0, "rally_a.mp4", "running", None, 30.0, 10, 0, {}, {}, None)
    base = dict(
        t=1.0,
        config=RunConfig(),
        running=True,
        paused=False,
        device="emulated: laptop-8gb",
        weights="",
        draws_detections=False,
        policy="all",
        oom_cap=None,
        sessions=[view],
        recent_latency_ms={},
        batch_sizes={},
        throughput_wps=0.0,
        busy=0.0,
        memory={},
        timeline=[],
    )
    return Snapshot(**(base | changes))


def test_change_notes_leave_out_how_long_a_run_plays():
    from batchscope.engine.report.phrases import changes_phrase, segment_phrase

    # an experiment from the menu: its first config sets the run's length and forgiveness
    diff = {"duration_s": (20.0, 30.0), "skip_bad_sources": (True, False), "sessions": (4, 3)}
    assert changes_phrase(diff) == "sessions 4 → 3"
    assert changes_phrase({"duration_s": (20.0, 30.0)}) == "run length 20 → 30 s"
    segment = {"index": 1, "changes": {"skip_bad_sources": False, "policy": "all"}}
    assert segment_phrase(segment, {"config": {"policy": "oldest"}}) == "policy oldest → all"


def test_the_sessions_table_names_each_clip_and_its_state_whole(qtbot):
    from batchscope.ui.sessions import SessionsPanel
    from batchscope.ui.sessions.panel import COLUMNS

    panel = SessionsPanel(Look())
    qtbot.addWidget(panel)
    panel.resize(400, 300)  # the left column's width at 1600×1000
    panel.show()
    views = [
        SessionView(i, f"rally_{c}.mp4", "running", None, 30.0, 10, 0, {}, {}, None)
        for i, c in enumerate("abc")
    ]
    panel.update_sessions(views)
    table = panel.table
    source, state = COLUMNS.index("Source"), COLUMNS.index("State")
    assert [table.item(r, source).text() for r in range(3)] == ["rally_a", "rally_b", "rally_c"]
    metrics = table.fontMetrics()
    for col, text in ((source, "rally_a"), (state, "reconnecting (2)")):
        assert table.columnWidth(col) > metrics.horizontalAdvance(text) + 6, (col, text)
    expired = COLUMNS.index("Expired")
    assert table.isColumnHidden(expired)  # no deadline drop: a column of 0s gives way
    dropped = [SessionView(0, "rally_a.mp4", "running", None, 30.0, 10, 0, {}, {}, None, 3)]
    panel.update_sessions(dropped)
    assert not table.isColumnHidden(expired)


def test_an_elided_label_asks_for_its_padding_too(qtbot):
    from batchscope.ui.plain_text import ElidedLabel

    app = QApplication.instance()
    old = app.styleSheet()
    app.setStyleSheet(stylesheet(Look()) + "QLabel#probe { padding: 0 5px; }")
    try:
        host = QWidget()
        qtbot.addWidget(host)
        row = QHBoxLayout(host)
        label = ElidedLabel("host: busy · late 181 ms")
        label.setObjectName("probe")
        row.addWidget(label)
        row.addStretch(1)
        host.show()
        qtbot.waitUntil(lambda: label.width() > 0)
        label.resize(label.sizeHint())
        label.setText(label.text())
        # at its size hint it shows its whole text (it was 10 px short: "host: busy · l…")
        assert pg.QtWidgets.QLabel.text(label) == "host: busy · late 181 ms"
        whole = ElidedLabel("host: busy · late 181 ms", whole=True)
        assert whole.minimumSizeHint().width() == whole.sizeHint().width()
    finally:
        app.setStyleSheet(old)


def test_percentile_labels_read_top_down_in_order(qtbot):
    from batchscope.ui.plots import LatencyHistogram

    hist = LatencyHistogram(look_from_name("dark", presentation=True))
    qtbot.addWidget(hist)
    hist.resize(420, 300)
    hist.show()
    qtbot.waitUntil(lambda: hist.plot.getViewBox().height() > 100, timeout=5000)
    ms = np.concatenate([np.full(900, 50.0), np.full(80, 90.0), np.full(20, 115.0)])
    hist.update_from(_snapshot(recent_latency_ms={0: ms}))

    def label(name: str) -> pg.InfLineLabel:
        return next(c for c in hist.markers[name].childItems() if isinstance(c, pg.InfLineLabel))

    qtbot.waitUntil(lambda: all(label(n).isVisible() for n in ("p50", "p95", "p99")))
    tops = [label(n).sceneBoundingRect().top() for n in ("p50", "p95", "p99")]
    assert tops[0] < tops[1] < tops[2]  # p50 above p95 above p99: left to right, in order


def test_the_devices_tab_shows_the_one_device(qtbot):
    from batchscope.ui.plots import DeviceBars

    bars = DeviceBars(Look())
    qtbot.addWidget(bars)
    bars.update_from(_snapshot(busy=0.83, batch_sizes={3: 10, 1: 2}))
    assert list(bars.bars.opts["height"]) == [83.0]
    assert bars._texts[0].isVisible() and "1 sessions" in bars._texts[0].toPlainText()
    assert "busy 83%" in bars.title.text() and "one device" in bars.title.text()


def test_record_offers_a_folder_that_exists(tmp_path):
    from batchscope.ui.window.export import RECORDINGS, recordings_folder

    assert recordings_folder(tmp_path) == tmp_path / RECORDINGS
    assert (tmp_path / RECORDINGS).is_dir()
    assert recordings_folder(tmp_path) == tmp_path / RECORDINGS  # there already: the same
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert recordings_folder(blocked) == blocked  # cannot be made: its parent is offered


def test_no_package_init_imports_a_module_that_imports_the_package_back():
    """``ui/window/__init__`` imports ``app``, which imported ``ui.window`` (for
    ``startup_log``): each package's init ran inside the other's import."""
    cycles = []
    for init in (ROOT / "app" / "batchscope").rglob("__init__.py"):
        package = ".".join(init.parent.relative_to(ROOT / "app").parts)
        tree = ast.parse(init.read_text(encoding="utf-8"))
        inner = {
            n.module
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(package + ".")
        }
        for module in inner:
            path = ROOT / "app" / Path(*module.split(".")).with_suffix(".py")
            if not path.is_file():
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == package:
                    cycles.append(f"{module} imports {package}, whose __init__ imports it")
    assert cycles == []


def test_the_guide_lists_the_items_csv_columns_a_recording_has(tmp_path):
    from batchscope.engine.engine import Engine

    engine = Engine(RunConfig(sources=("synthetic",), resolution=(256, 144), sessions=1))
    engine.open()
    engine.start()
    try:
        folder = engine.start_recording(tmp_path / "rec")
        engine.stop_recording()
    finally:
        engine.stop()
    header = (folder / "items.csv").read_text().splitlines()[0]
    guide = (ROOT / "docs" / "USER_GUIDE.md").read_text(encoding="utf-8")
    documented = re.search(r"\| `items\.csv` \| one row per processed window: `([^`]+)`", guide)
    assert documented is not None and documented.group(1) == header


def test_the_guide_names_the_menus_and_counts_the_demos():
    guide = (ROOT / "docs" / "USER_GUIDE.md").read_text(encoding="utf-8")
    demos = len(list((ROOT / "assets" / "experiments").glob("*.toml")))
    words = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    assert f"The {words[demos]} demos are the built-in experiment files" in guide
    assert "**Scenarios**" not in guide and "**Experiments**" in guide
