"""The dashboard's figures: time plots, distributions, the bus view, the headline numbers."""

from batchscope.ui.plots.bus import BusView
from batchscope.ui.plots.device_bars import DeviceBars
from batchscope.ui.plots.distributions import (
    BatchSizeBars,
    LatencyHistogram,
    OverwrittenBars,
    StageBars,
)
from batchscope.ui.plots.headline import HeadlineStrip, StatusLine
from batchscope.ui.plots.time_plots import (
    FpsPlot,
    MemoryPlot,
    PlotCard,
    ThroughputPlot,
    pen,
    time_window,
    whole_window,
)

__all__ = [
    "BatchSizeBars",
    "BusView",
    "DeviceBars",
    "FpsPlot",
    "HeadlineStrip",
    "LatencyHistogram",
    "MemoryPlot",
    "OverwrittenBars",
    "PlotCard",
    "StageBars",
    "StatusLine",
    "ThroughputPlot",
    "pen",
    "time_window",
    "whole_window",
]
