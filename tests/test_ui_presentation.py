"""Presentation mode fits the screen, gives the window back as it was, and is never saved."""

from __future__ import annotations

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QWidget

#: the screen of the report (a 1600×1000 laptop): the larger type must fit it
SCREEN = (1600, 1000)


def test_presentation_mode_fits_the_screen_and_restores_the_window(dashboard, qtbot):
    dashboard.setGeometry(QRect(60, 40, 1280, 760))
    qtbot.waitUntil(lambda: dashboard.geometry() == QRect(60, 40, 1280, 760), timeout=2000)
    dashboard.presentation_action.setChecked(True)
    assert dashboard.look.presentation and dashboard.isFullScreen()
    hint = dashboard.minimumSizeHint()
    assert hint.width() <= SCREEN[0] and hint.height() <= SCREEN[1]
    screen = dashboard.screen().availableGeometry()
    qtbot.waitUntil(lambda: screen.contains(dashboard.geometry()), timeout=2000)
    dashboard.presentation_action.setChecked(False)
    assert not dashboard.isFullScreen() and not dashboard.look.presentation
    qtbot.waitUntil(lambda: dashboard.geometry() == QRect(60, 40, 1280, 760), timeout=2000)
    # closing in presentation mode remembers the normal window, not the full screen: what
    # it saved restores the window it was (compared as restored, not byte for byte: the
    # window frame's size in the bytes is the platform's, and Qt reads it back lazily)
    dashboard.presentation_action.setChecked(True)
    dashboard.close()
    saved = dashboard.settings.value("geometry")
    assert saved is not None
    probe = QWidget()
    qtbot.addWidget(probe)
    assert probe.restoreGeometry(saved)
    probe.show()
    qtbot.waitUntil(lambda: probe.geometry() == QRect(60, 40, 1280, 760), timeout=2000)
    assert not probe.isFullScreen()


def test_presentation_with_an_experiments_caption_and_the_segments_dock_fits(dashboard, qtbot):
    """The collapsed controls panel's height (721 px at the larger type) set the window's
    minimum: with the caption and the Segments dock it needed 1038 px of a 1000 px screen."""
    dashboard._show_caption("6 sessions want 180 windows/s: oldest first now starves some.")
    dashboard.segments_dock.show()
    dashboard.presentation_action.setChecked(True)
    qtbot.waitUntil(lambda: dashboard.segments_dock.isVisible(), timeout=2000)
    dashboard.layout().activate()
    hint = dashboard.minimumSizeHint()
    assert hint.width() <= SCREEN[0] and hint.height() <= SCREEN[1]
    dashboard.presentation_action.setChecked(False)
    assert dashboard.panel.sizePolicy().verticalPolicy().name == "Preferred"  # given back


def test_a_window_closed_in_presentation_mode_leaves_the_next_its_own_type(
    qtbot, tiny_video, ui_settings
):
    """The look's type is the application's: a window closed in presentation mode left it
    at 15 pt, and the next window (normal look) could not be made 760 px tall."""
    from PySide6.QtWidgets import QApplication

    from batchscope.engine.engine import Engine
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.theme import Look
    from batchscope.ui.window.main_window import MainWindow
    from conftest import dashboard_config

    def window() -> MainWindow:
        config = dashboard_config((str(tiny_video),), 2)
        w = MainWindow(Engine(config), Look(), ui_settings, devices=device_choices(gpus=[]))
        qtbot.addWidget(w)
        return w

    first = window()
    first.show()
    first.set_presentation(True)
    assert QApplication.font().pointSize() == Look(presentation=True).font_pt
    first.close()
    second = window()
    assert QApplication.font().pointSize() == Look().font_pt
    second.close()


def test_the_segments_button_shows_the_table_at_its_height_the_first_time(dashboard, qtbot):
    """The toolbar's Segments (the dock's own toggle) showed the dock at whatever height
    its layout gave it, while View → Segments from an experiment sized it: a first click
    could show no more than the dock's title bar."""
    dashboard.setGeometry(QRect(60, 40, 1280, 760))
    qtbot.waitUntil(lambda: dashboard.geometry() == QRect(60, 40, 1280, 760), timeout=2000)
    dock = dashboard.segments_dock
    assert not dock.isVisible()
    dashboard.segments_action.trigger()
    qtbot.waitUntil(dock.isVisible, timeout=2000)
    wanted = dashboard.segment_table.dock_height(dashboard.look, dashboard.height())
    qtbot.waitUntil(lambda: abs(dock.height() - wanted) <= 8, timeout=2000)
    assert dashboard.segment_table.table.isVisible()
    dashboard.segments_action.trigger()  # and the second click hides it
    qtbot.waitUntil(lambda: not dock.isVisible(), timeout=2000)
    assert not dashboard.segments_action.isChecked()
