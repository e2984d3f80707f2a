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
    width = metrics.horizontalAdvance
    full = width("windows (all sessions)")
    assert fitted_axis_text("windows (all sessions)", full + 1, width) == "windows (all sessions)"
    assert fitted_axis_text("windows (all sessions)", full - 1, width) == "windows"
    share = width("share of batches (%)")
    assert fitted_axis_text("share of batches (%)", share - 1, width) == "batches (%)"
    tiny = fitted_axis_text("share of batches (%)", width("batc…") + 1, width)
    assert tiny == "batc…"
    assert fitted_axis_text("frames", 5, width) == ""
    assert fitted_axis_text("windows", width("wi…") + 1, width) == ""  # a stub says nothing


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
    # a view as tall as halfway between the short form's length and the whole's (the
    # card's chrome above and below the view depends on the application's type)
    view = plot.plot.getViewBox()
    qtbot.waitUntil(lambda: view.height() > 300, timeout=5000)
    chrome = plot.height() - view.height()
    font = QFont(axis.label.font())
    font.setPointSize(plot.look.axis_pt)
    m = QFontMetricsF(font)
    target = (m.horizontalAdvance(short) + m.horizontalAdvance(full)) / 2 + 8
    plot.resize(320, int(chrome + target))
    qtbot.waitUntil(lambda: abs(view.height() - target) < 3, timeout=5000)
    qtbot.waitUntil(lambda: axis.labelText != full, timeout=5000)
    assert axis.labelText == short
    assert _axis_labels(plot.widget) == []
    plot.resize(320, 400)  # and whole again once there is room
    qtbot.waitUntil(lambda: axis.labelText == full, timeout=5000)
