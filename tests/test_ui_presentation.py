"""Presentation mode fits the screen, gives the window back as it was, and is never saved."""

from __future__ import annotations

from PySide6.QtCore import QRect

#: the screen of the report (a 1600×1000 laptop): the larger type must fit it
SCREEN = (1600, 1000)


def test_presentation_mode_fits_the_screen_and_restores_the_window(dashboard, qtbot):
    dashboard.setGeometry(QRect(60, 40, 1280, 760))
    qtbot.waitUntil(lambda: dashboard.geometry() == QRect(60, 40, 1280, 760), timeout=2000)
    before = dashboard.saveGeometry()
    dashboard.presentation_action.setChecked(True)
    assert dashboard.look.presentation and dashboard.isFullScreen()
    hint = dashboard.minimumSizeHint()
    assert hint.width() <= SCREEN[0] and hint.height() <= SCREEN[1]
    screen = dashboard.screen().availableGeometry()
    qtbot.waitUntil(lambda: screen.contains(dashboard.geometry()), timeout=2000)
    dashboard.presentation_action.setChecked(False)
    assert not dashboard.isFullScreen() and not dashboard.look.presentation
    qtbot.waitUntil(lambda: dashboard.geometry() == QRect(60, 40, 1280, 760), timeout=2000)
    # closing in presentation mode remembers the normal window, not the full screen
    dashboard.presentation_action.setChecked(True)
    dashboard.close()
    assert dashboard.settings.value("geometry") == before


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
