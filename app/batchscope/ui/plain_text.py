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

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QSize
from PySide6.QtGui import (  # QtGui's Qt: adds mightBeRichText, convertFromPlainText
    QResizeEvent,
    QStandardItemModel,
    Qt,
)
from PySide6.QtWidgets import QComboBox, QLabel, QWidget


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


class _FittedLabel(QLabel):
    """A label that fits its text again (``_fit``) when its width or its font changes."""

    def _fit(self) -> None:
        raise NotImplementedError

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self.updateGeometry()
            self._fit()


class ElidedLabel(_FittedLabel):
    """A plain-text label that fits any width: cut with "…" when it must be, the whole
    text in its tooltip. Its size hint is the whole text; it may shrink to ``min_chars``
    characters (for the status bar's parts, which share one line), or not at all
    (``whole``: what must be read, the host's warning)."""

    def __init__(
        self,
        text: str = "",
        min_chars: int = 6,
        parent: QWidget | None = None,
        tip: str = "",
        whole: bool = False,
    ) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self._full = ""
        self._min_chars = min_chars
        self._whole = whole  # never cut: its neighbours give way first (a warning)
        self._tip = tip  # said under the whole text in the tooltip
        self.setText(text)

    def setText(self, text: str) -> None:
        if text != self._full:
            self._full = text
            self.setToolTip(plain_tip("\n".join(filter(None, (text, self._tip)))))
            self.updateGeometry()
        self._fit()

    def text(self) -> str:
        """The whole text (what is drawn may be cut: ``QLabel.text(label)``)."""
        return self._full

    def sizeHint(self) -> QSize:
        # the padding a style sheet gives it is inside its width, outside its text's room
        # (it was left out: the whole text then got 8-10 px less than it needs, and was cut)
        width = self._outside() + self.fontMetrics().horizontalAdvance(self._full) + 2
        return QSize(width, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        if self._whole:
            return self.sizeHint()
        width = self._outside() + self.fontMetrics().horizontalAdvance("M" * self._min_chars)
        return QSize(min(width, self.sizeHint().width()), super().minimumSizeHint().height())

    def _outside(self) -> int:
        """The width around the text's room: margins (a style sheet's padding), frame."""
        margins = self.contentsMargins()
        return margins.left() + margins.right() + 2 * self.frameWidth()

    def _fit(self) -> None:
        room = self.contentsRect().width()
        shown = (  # not laid out yet (no width): whole, until it is
            self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, room)
            if room > 0
            else self._full
        )
        if shown != QLabel.text(self):
            QLabel.setText(self, shown)


class CardTitle(_FittedLabel):
    """A plot card's title, "Name — figure · figure · more", fitted to its width.

    What a projector must show is never cut: the name and the first ``keep`` figures.
    The parts after them go first, from the end (a "…" says so; the tooltip has the
    whole title); then the figures move to a second line under the name. The label
    never gets narrower than its name or its kept figures, so a splitter cannot
    crush them. A title without figures ("Slowest S7 · fps of 64 sessions") keeps its
    first part. ``text()`` is the whole title.
    """

    SEP, PART = " — ", " · "

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self._full = ""
        self._keep = 1
        self.set_title(text)

    def set_title(self, text: str, keep: int = 1) -> None:
        if (text, keep) != (self._full, self._keep):
            self._full, self._keep = text, keep
            self.setToolTip(plain_tip(text))
        self._fit()

    def setText(self, text: str) -> None:
        self.set_title(text)

    def text(self) -> str:
        """The whole title (what is drawn may be shorter: ``QLabel.text(label)``)."""
        return self._full

    def essential(self) -> tuple[str, str]:
        """(name, the kept figures): what is drawn whatever the width."""
        name, parts, figures = self._parts()
        return name, self.PART.join(parts[: self._keep]) if figures else ""

    def _parts(self) -> tuple[str, list[str], bool]:
        """(name, the parts after it, whether figures follow the name after SEP)."""
        name, sep, rest = self._full.partition(self.SEP)
        if sep:
            return name, rest.split(self.PART), True
        first, *others = self._full.split(self.PART)
        return first, others, False

    def _fit(self) -> None:
        if self.wordWrap() or self.textFormat() != Qt.TextFormat.PlainText:
            self.setMinimumWidth(0)  # a legend that wraps (the stages card)
            if self._full != QLabel.text(self):
                QLabel.setText(self, self._full)
            return
        metrics = self.fontMetrics()
        name, figures = self.essential()
        need = max(metrics.horizontalAdvance(name), metrics.horizontalAdvance(figures))
        if need > self.minimumWidth():  # grows only: a title that jumps would be worse
            self.setMinimumWidth(need + 2)
        shown = self._shortest_fitting(self.contentsRect().width(), metrics.horizontalAdvance)
        if shown != QLabel.text(self):
            QLabel.setText(self, shown)

    def _shortest_fitting(self, room: int, advance: Callable[[str], int]) -> str:
        name, parts, figures = self._parts()
        keep = min(self._keep, len(parts)) if figures else 0
        joins = ((self.SEP, False), ("\n", True)) if figures else ((self.PART, False),)
        text = self._full
        for join, second_line in joins:
            # every part, then fewer with "…" (the tooltip has them), then the kept ones
            # alone: each on one line before any takes a second
            cuts = [(n, n < len(parts)) for n in range(len(parts), keep - 1, -1)]
            for n, more in [*cuts, (keep, False)]:
                shown = self.PART.join(parts[:n] + (["…"] if more else []))
                if figures:
                    text = name + join + shown
                else:
                    text = name + (self.PART + shown if n else (" …" if more else ""))
                if advance(shown if second_line else text) <= room:
                    return text
        return text


def add_item(combo: QComboBox, text: str, data: Any, why: str | None) -> None:
    """An item of ``combo``; greyed out with ``why`` as its tip when it cannot be chosen."""
    combo.addItem(text, data)
    index = combo.count() - 1
    if why is not None:
        why = plain_tip(why)  # the reason may quote an error
        model = combo.model()
        if isinstance(model, QStandardItemModel):
            item = model.item(index)
            item.setEnabled(False)
            item.setToolTip(why)
        combo.setItemData(index, why, Qt.ItemDataRole.ToolTipRole)
