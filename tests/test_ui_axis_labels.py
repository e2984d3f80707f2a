"""Axis labels fit their axis: in a short pane (1280x800 with the Segments dock open) the
Latency plot's "windows (all sessions)" and the batch sizes' "share of batches (%)" ran
past both ends of a 100 px axis. They now take a shorter form that fits."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QFont, QFontMetricsF

from batchscope.ui.plots.distributions import BatchSizeBars, LatencyHistogram
from batchscope.ui.plots.time_plots import fitted_axis_text
from batchscope.ui.theme import Look

from fit_check import _axis_labels


@pytest.fixture
def metrics(qapp) -> QFontMetricsF:
    font = QFont("DejaVu Sans")
    font.setPointSize(Look().axis_pt)
    return QFontMetricsF(font)


def test_a_label_keeps_its_unit_and_drops_who_it_counts(metrics):
    full = metrics.horizontalAdvance("windows (all sessions)")
    assert fitted_axis_text("windows (all sessions)", full + 1, metrics) == "windows (all sessions)"
    assert fitted_axis_text("windows (all sessions)", full - 1, metrics) == "windows"
    share = metrics.horizontalAdvance("share of batches (%)")
    assert fitted_axis_text("share of batches (%)", share - 1, metrics) == "batches (%)"
    tiny = fitted_axis_text("share of batches (%)", 30, metrics)
    assert tiny.endswith("…") and metrics.horizontalAdvance(tiny) <= 30
    assert fitted_axis_text("frames", 10, metrics) in ("", "…")


@pytest.mark.parametrize(
    ("card", "full", "short"),
    [
        (LatencyHistogram, "windows (all sessions)", "windows"),
        (BatchSizeBars, "share of batches (%)", "batches (%)"),
    ],
)
def test_a_short_card_shows_a_label_that_fits_and_a_tall_one_the_whole(qtbot, card, full, short):
    plot = card(Look())
    qtbot.addWidget(plot)
    plot.resize(320, 400)
    plot.show()
    plot.set_axis_label("left", full)  # as the app labels it
    axis = plot.plot.getAxis("left")
    qtbot.waitUntil(lambda: axis.labelText == full, timeout=5000)
    plot.resize(320, 150)  # its view ~85 px tall
    qtbot.waitUntil(lambda: plot.plot.getViewBox().height() < 110, timeout=5000)
    qtbot.waitUntil(lambda: axis.labelText != full, timeout=5000)
    assert axis.labelText == short
    assert _axis_labels(plot.widget) == []
    plot.resize(320, 400)  # and whole again once there is room
    qtbot.waitUntil(lambda: axis.labelText == full, timeout=5000)
