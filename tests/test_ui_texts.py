"""Texts that used to be cut: tile footers, the device combo, the latency histogram's labels."""

from __future__ import annotations

import itertools

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFont, QImage, QPainter

from batchscope.config import RunConfig
from batchscope.engine.snapshot import SessionView, Snapshot
from batchscope.ui.controls.device_options import device_choices
from batchscope.ui.controls.panel import ControlsPanel
from batchscope.ui.plots.distributions import LatencyHistogram
from batchscope.ui.sessions.video_wall import VideoWall, footer_text
from batchscope.ui.theme import Look, look_from_name

FOOTER = "emulated device: no model runs"


def _snapshot(latencies: dict[int, np.ndarray]) -> Snapshot:
    view = SessionView(0, "clip.mp4", "running", None, 30.0, 10, 0, {}, {}, None)
    return Snapshot(
        t=1.0,
        config=RunConfig(),
        running=True,
        paused=False,
        device="d",
        weights=FOOTER,
        draws_detections=False,
        policy="all",
        oom_cap=None,
        sessions=[view],
        recent_latency_ms=latencies,
        batch_sizes={},
        throughput_wps=0.0,
        busy=0.0,
        memory={},
        timeline=[],
    )


def test_a_tile_footer_gets_smaller_type_before_it_is_cut(qtbot):
    image = QImage(400, 100, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    font = QFont("DejaVu Sans")
    font.setPointSizeF(11.0)
    painter.setFont(font)
    wide = painter.fontMetrics().horizontalAdvance(FOOTER)
    assert footer_text(painter, FOOTER, wide * 0.8) == FOOTER  # was "emulated device: no mo…"
    assert painter.font().pointSizeF() < 11.0
    cut = footer_text(painter, FOOTER, 60)
    painter.end()
    assert cut.endswith("…") and FOOTER.startswith(cut[:-1])


def test_the_tiles_carry_the_whole_footer_as_tooltip(qtbot):
    wall = VideoWall(Look())
    qtbot.addWidget(wall)
    wall.update_from(_snapshot({}), {})
    assert wall.toolTip() == FOOTER


def test_the_device_combo_shows_its_whole_label_in_the_list_and_as_tip(qtbot):
    panel = ControlsPanel(device_choices(gpus=[]))
    qtbot.addWidget(panel)
    panel.show_config(RunConfig(backend="emulated", profile="laptop-8gb"))
    combo = panel.device
    assert combo.toolTip() == combo.currentText() and "laptop-8gb" in combo.currentText()
    widest = max(
        combo.fontMetrics().horizontalAdvance(combo.itemText(i)) for i in range(combo.count())
    )
    assert combo.view().minimumWidth() >= widest
    combo.setCurrentIndex((combo.currentIndex() + 1) % combo.count())
    assert combo.toolTip() == combo.currentText()


def test_the_empty_latency_histogram_has_no_negative_axis_and_no_stacked_labels(qtbot):
    hist = LatencyHistogram(Look())
    qtbot.addWidget(hist)
    hist.resize(420, 300)
    hist.show()
    assert not any(line.isVisible() for line in hist.markers.values())
    assert not hist.objective.isVisible()
    assert hist.plot.getViewBox().viewRange()[1] == [0.0, 1.0]
    hist.update_from(_snapshot({0: np.array([])}))
    assert hist.plot.getViewBox().viewRange()[1] == [0.0, 1.0]


def test_close_percentile_labels_never_cover_each_other(qtbot):
    hist = LatencyHistogram(look_from_name("dark", presentation=True))
    qtbot.addWidget(hist)
    hist.resize(420, 300)
    hist.show()
    qtbot.waitUntil(lambda: hist.plot.getViewBox().height() > 100, timeout=5000)
    # p95 and p99 a few ms apart: their lines almost touch
    ms = np.concatenate([np.full(900, 50.0), np.full(95, 80.0), np.full(5, 81.0)])
    hist.update_from(_snapshot({0: ms}))
    labels = [
        child
        for line in hist.markers.values()
        for child in line.childItems()
        if isinstance(child, pg.InfLineLabel)
    ]
    qtbot.waitUntil(lambda: all(label.isVisible() for label in labels), timeout=2000)
    boxes = [label.sceneBoundingRect() for label in labels]
    for a, b in itertools.combinations(boxes, 2):  # beside or below each other, never on
        assert not a.intersects(b)
    view = hist.plot.getViewBox().sceneBoundingRect()
    assert all(view.adjusted(-2, -2, 2, 2).contains(box) for box in boxes)
    assert hist.plot.getViewBox().viewRange()[1][0] == 0.0
