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
