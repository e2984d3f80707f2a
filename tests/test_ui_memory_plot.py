"""The memory plot's device-total ceiling keeps its label inside the plot, however short
the pane: CI's suite, grown to 1.6–2.5 GB RSS, put an 8 GB ceiling on scale and its
label 8–23 px above the plot's top edge."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyqtgraph as pg
import pytest

from batchscope.ui.plots.time_plots import MemoryPlot, TimeWindow
from batchscope.ui.theme import Look
from fit_check import _plot


def memory_plot(qtbot, height: int, rss_mb: float, total_mb: float = 8192.0) -> MemoryPlot:
    plot = MemoryPlot(Look())
    qtbot.addWidget(plot)
    height = max(height, plot.minimumSizeHint().height())  # no layout makes it shorter
    plot.resize(400, height)
    plot.show()
    qtbot.waitUntil(lambda: plot.plot.getViewBox().height() > height / 3, timeout=5000)
    t = np.linspace(0.0, 30.0, 31)
    window = TimeWindow(t, memory={"rss_mb": np.full_like(t, rss_mb)}, x_range=(0.0, 60.0))
    snap = SimpleNamespace(memory={"rss_mb": rss_mb, "device_total_mb": total_mb})
    plot.update_from(snap, window)
    return plot


def settled(plot: MemoryPlot) -> bool:
    """The label drawn where the last range put its line (the scene catches up with a new
    view range after the event loop runs)."""
    line_y = plot.plot.getViewBox().mapViewToScene(pg.Point(0.0, plot.ceiling.value())).y()
    rect = plot._ceiling_label.sceneBoundingRect()
    return min(abs(rect.top() - line_y), abs(rect.bottom() - line_y)) < 1.5


@pytest.mark.parametrize("height", [110, 160, 300])
@pytest.mark.parametrize("rss_mb", [1700.0, 2500.0, 7900.0])
def test_the_device_total_label_stays_inside_the_plot(qtbot, height, rss_mb):
    plot = memory_plot(qtbot, height, rss_mb)
    assert plot.ceiling.isVisible()  # on scale: RSS above a fifth of the device
    assert plot._ceiling_label.isVisible()
    # said at once: the first update set the text while the line was still hidden
    assert plot._ceiling_label.textItem.toPlainText() == "device total 8,192 MB"
    qtbot.waitUntil(lambda: settled(plot), timeout=5000)
    assert _plot(plot.widget) == []


def test_a_small_process_leaves_the_ceiling_off_scale_and_says_so_in_the_title(qtbot):
    plot = memory_plot(qtbot, 160, 600.0)
    assert not plot.ceiling.isVisible()
    assert "(device 8 GB)" in plot._title_text
