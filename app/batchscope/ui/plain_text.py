"""User text on screen is drawn as it is: file names, experiment names, captions, errors.

Why this exists (the hardening issue, item 11): Qt guesses rich text
(``Qt.mightBeRichText``) for a QLabel left in AutoText and for every tooltip, so the
caption ``<img src=x> sessions <5 and >2`` drew an image icon and "sessions 2", and a
source named ``<script>…`` vanished from the status bar. A label that can show such
text is a :func:`plain_label`; a tooltip goes through :func:`plain_tip`; a menu entry
or a button's text through :func:`menu_text` (Qt reads ``&`` there as a shortcut).
pyqtgraph's titles, axis labels and legends are HTML: this app puts no user text in
them (the cards' titles are plain labels; event markers are plain text items).
"""

from __future__ import annotations

from PySide6.QtGui import Qt  # QtGui's Qt: it adds mightBeRichText and convertFromPlainText
from PySide6.QtWidgets import QLabel, QWidget


def plain_label(text: str = "", parent: QWidget | None = None) -> QLabel:
    """A QLabel that draws ``text`` and whatever it is set to later as plain text."""
    label = QLabel(parent)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setText(text)
    return label


def plain_tip(text: str) -> str:
    """``text`` for ``setToolTip``, shown as it is.

    Unchanged where Qt would not take it for rich text; else escaped into the
    paragraph Qt would make of it (line breaks kept), since a tooltip has no plain
    text mode.
    """
    if not Qt.mightBeRichText(text):
        return text
    return Qt.convertFromPlainText(text)


def menu_text(text: str) -> str:
    """``text`` for a menu entry, an action or a button: each ``&`` shown, not a shortcut."""
    return text.replace("&", "&&")
