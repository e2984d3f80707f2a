"""The fit check over the real window: three sizes, normal and presentation mode,
4 / 16 / 64 sessions, the Segments dock open, every tab in front in turn.

What it fails on is in ``fit_check.py``: text that needs more room than it has (unless
elided on purpose, with a tooltip), tabs that scroll, tables cut without a tooltip,
squashed plot cards, plot notes that overlap or leave their plot. On ba13837's layout
it caught, at 1280×800 with the dock open: the headline's names cut, the bottom tabs
scrolling, the Latency and Overwritten titles cut, the fps plot squashed to 127 px,
the device box clipped, and a window that could not be made 1280 px wide.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from conftest import dashboard_config
from fit_check import misfits

SIZES = ((1280, 800), (1600, 1000), (1920, 1080))
SESSIONS = (4, 16, 64)
CHANGE_MS = 30_000


def _window(
    qtbot,
    tiny_video: Path,
    ui_settings,
    size: tuple[int, int],
    presentation: bool,
    theme: str = "dark",
):
    from batchscope.engine.engine import Engine
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.theme import look_from_name
    from batchscope.ui.window.main_window import MainWindow

    config = dashboard_config((str(tiny_video),), SESSIONS[0])
    look = look_from_name(theme)
    window = MainWindow(Engine(config), look, ui_settings, devices=device_choices(gpus=[]))
    qtbot.addWidget(window)
    window.screen_size = size
    window.resize(*size)
    window.show()
    if presentation:
        window.set_presentation(True)
    window.start()
    qtbot.waitUntil(window.timer.isActive, timeout=CHANGE_MS)
    return window


def _settle(qtbot, window) -> None:
    """Two ticks of the window's timer after a change: its views drawn and laid out."""
    seen = window.tick_stats.ticks
    qtbot.waitUntil(lambda: window.tick_stats.ticks >= seen + 2, timeout=CHANGE_MS)
    # the relayout the last tick asked for: on a slow machine the wait can end before Qt
    # has run it (CI saw a headline figure "cut" for that instant)
    QApplication.sendPostedEvents()


def _lasting(qtbot, window) -> list[str]:
    """What the fit check finds now and still finds two ticks later (its figures may
    have changed): what a viewer sees, not one frame of a relayout."""
    first = {_shape(m) for m in misfits(window)}
    _settle(qtbot, window)
    return [m for m in misfits(window) if _shape(m) in first]


def _shape(misfit: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", misfit)


def _every_tab(qtbot, window) -> list[str]:
    found: list[str] = []
    for tabs in (window.top_tabs, window.tabs):
        for i in range(tabs.count()):
            tabs.setCurrentIndex(i)
            _settle(qtbot, window)
            found += [f"[{tabs.tabText(i)}] {m}" for m in _lasting(qtbot, window)]
    return found


#: every size and mode in the dark theme; the light theme (the same type, other colours
#: and a grid of its own) at the smallest screen, where room is tightest
CASES = [(size, mode, "dark") for size in SIZES for mode in (False, True)] + [
    (SIZES[0], False, "light"),
    (SIZES[0], True, "light"),
]


@pytest.mark.parametrize(
    ("size", "presentation", "theme"),
    CASES,
    ids=[f"{w}x{h}-{'presentation' if p else 'normal'}-{t}" for (w, h), p, t in CASES],
)
def test_every_view_fits(qtbot, tiny_video, ui_settings, size, presentation, theme):
    window = _window(qtbot, tiny_video, ui_settings, size, presentation, theme)
    engine = window.engine
    window.show_segments()
    # notes on the time plot at nearly one instant: a change, then a fault
    assert engine.apply(engine.config.with_changes(policy="oldest")) is None
    from batchscope.experiment import Fault

    assert engine.inject(Fault("burst", 5.0, session=0, factor=4.0)) is None
    found: list[str] = []
    for n in SESSIONS:
        if engine.config.sessions != n:
            assert engine.apply(engine.config.with_changes(sessions=n)) is None
        qtbot.waitUntil(lambda n=n: window.sessions.table.rowCount() == n, timeout=CHANGE_MS)
        _settle(qtbot, window)
        assert (window.width(), window.height()) == size, "the window must fit the screen"
        found += [f"{n} sessions {m}" for m in _every_tab(qtbot, window)]
    window.close()
    assert not found, "\n".join(found)


def test_the_fit_check_catches_a_cut_label_and_a_squashed_card(qtbot):
    """The check itself: a label narrower than its text, and one elided on purpose."""
    from batchscope.ui.plain_text import ElidedLabel

    host = QWidget()
    qtbot.addWidget(host)
    host.resize(400, 100)
    cut = QLabel("a long label that cannot fit in forty pixels", host)
    cut.setGeometry(0, 0, 40, 30)
    elided = ElidedLabel("a long label that cannot fit either, but says so", parent=host)
    elided.setGeometry(0, 40, 40, 30)
    host.show()
    qtbot.waitUntil(host.isVisible)
    found = misfits(host)
    assert len(found) == 1 and "a long label that cannot fit in forty" in found[0]


def test_the_fit_check_catches_a_squashed_data_area(qtbot):
    """A plot with room for its axes but not for its data (the fps band at 1280×800 in
    presentation mode had 40 px) is a misfit; one with MIN_VIEW_PX is not."""
    import pyqtgraph as pg

    from batchscope.ui.plots.time_plots import MIN_VIEW_PX

    host = QWidget()
    qtbot.addWidget(host)
    host.resize(400, 400)
    plot = pg.PlotWidget(host)
    plot.setLabel("bottom", "time (s)")
    host.show()
    view = plot.getPlotItem().getViewBox()
    for height, squashed in ((70, True), (MIN_VIEW_PX + 120, False)):
        plot.setGeometry(0, 0, 400, height)
        qtbot.waitUntil(lambda h=height: plot.height() == h)
        QApplication.sendPostedEvents()
        qtbot.waitUntil(lambda: view.height() > 0)
        found = [m for m in misfits(host) if "data area" in m]
        assert bool(found) == squashed, (height, view.height(), found)
