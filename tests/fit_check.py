"""The fit check: what on a window needs more room than it has.

``misfits(window)`` walks every visible widget of a window and returns one line
for each thing a viewer would see cut or crowded:

- a label, button, check box or combo box whose text needs more room than it has
  (one elided on purpose, ending in "…" with the whole text as its tooltip, is fine;
  a plot title must still show its name and figures, ``CardTitle.essential``);
- a tab bar that scrolls, or a tab narrower than its text;
- a table column narrower than its header, or a cell cut without a tooltip;
- a plot card squashed below a readable size, or a plot's data area below MIN_VIEW_PX;
- a plot note (a label on a time plot's event line) that overlaps another one,
  the "target" label, or runs out of its plot.

It reads the widgets as they are laid out (offscreen rendering is enough); the
window must have been shown and laid out at the size under test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRect, QRectF, Qt
from PySide6.QtGui import QFontMetrics, QTextDocument
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QComboBox,
    QHeaderView,
    QLabel,
    QScrollArea,
    QStyle,
    QStyleOptionComboBox,
    QTabBar,
    QToolButton,
    QWidget,
)

from batchscope.ui.plots.time_plots import MIN_CARD_PX, MIN_VIEW_PX

ELLIPSIS = "…"

SLACK_PX = 1  # rounding between text metrics and layout


def misfits(window: QWidget) -> list[str]:
    out: list[str] = []
    for w in _visible(window):
        if isinstance(w, QLabel):
            out += _label(w)
        elif isinstance(w, QTabBar):
            out += _tabs(w)
        elif isinstance(w, QComboBox):
            out += _combo(w)
        elif isinstance(w, QAbstractButton) and not _tab_scroller(w):
            out += _button(w)
        elif isinstance(w, QAbstractItemView):
            out += _table(w)
        elif isinstance(w, pg.PlotWidget):
            out += _plot(w)
        if w.objectName() == "card" and w.findChild(pg.PlotWidget) is not None:
            min_w, min_h = MIN_CARD_PX
            if w.width() < min_w or w.height() < min_h:
                out.append(f"{_name(w)}: squashed to {w.width()}×{w.height()} px")
    return out


def _visible(window: QWidget) -> Iterator[QWidget]:
    for w in window.findChildren(QWidget):
        if w.isVisible() and w.width() > 0 and w.height() > 0 and not _clipped_away(w):
            yield w


def _clipped_away(w: QWidget) -> bool:
    """Scrolled out of a scroll area, or outside its window: nothing of it shows."""
    window = w.window()
    if window is w:
        return False
    if not QRect(w.mapTo(window, QPoint(0, 0)), w.size()).intersects(window.rect()):
        return True
    p = w.parentWidget()
    while p is not None:
        if isinstance(p, QScrollArea) and p.viewport().isAncestorOf(w):
            port = p.viewport()
            if not QRect(w.mapTo(port, QPoint(0, 0)), w.size()).intersects(port.rect()):
                return True
        p = p.parentWidget()
    return False


def _name(w: QWidget) -> str:
    """Where ``w`` is, for a reader: its class and the nearest named or titled parent."""
    parts = []
    p: QWidget | None = w
    while p is not None and len(parts) < 3:
        title = getattr(p, "_title_text", None) or p.windowTitle() or p.objectName()
        if title and p is not w:
            parts.append(str(title)[:40])
        p = p.parentWidget()
    where = f" in {' / '.join(parts)}" if parts else ""
    return f"{type(w).__name__}{where}"


def _label(label: QLabel) -> list[str]:
    text = QLabel.text(label)  # what it draws (an ElidedLabel's text() is the whole)
    if not text.strip() or (label.pixmap() is not None and not label.pixmap().isNull()):
        return []
    room = label.contentsRect().adjusted(*(4 * [0])).width() - 2 * label.margin()
    height_room = label.contentsRect().height()
    metrics = label.fontMetrics()
    plain = _plain(label)
    if label.wordWrap():
        need_h = label.heightForWidth(label.width())
        if need_h > label.height() + SLACK_PX:
            return [f"{_name(label)}: {plain!r} needs {need_h} px of height, has {label.height()}"]
        return []
    lines = plain.splitlines() or [""]
    need = max(metrics.horizontalAdvance(line) for line in lines)
    out = []
    if need > room + SLACK_PX:
        out.append(f"{_name(label)}: {plain!r} needs {need} px, has {room}")
    elif metrics.height() + (len(lines) - 1) * metrics.lineSpacing() > height_room + 2:
        out.append(f"{_name(label)}: {plain!r} needs {len(lines)} lines, has {height_room} px")
    if plain != label.text():  # an ElidedLabel or CardTitle drew less than its text
        if not label.toolTip():
            out.append(f"{_name(label)}: {plain!r} is elided without a tooltip")
        essential = getattr(label, "essential", None)  # a plot title: name and figures
        drawn = plain.replace("\n", " ")
        if essential is not None and not all(part in drawn for part in essential()):
            out.append(f"{_name(label)}: {plain!r} leaves out {essential()!r}")
    return out


def _plain(label: QLabel) -> str:
    text = QLabel.text(label)
    if label.textFormat() == Qt.TextFormat.PlainText or not Qt.mightBeRichText(text):
        return text
    doc = QTextDocument()
    doc.setHtml(text)
    return doc.toPlainText()


def _button(button: QAbstractButton) -> list[str]:
    if not button.text() or (isinstance(button, QToolButton) and button.autoRaise()):
        return []
    need = button.sizeHint().width()
    if button.width() + SLACK_PX < need:
        return [f"{_name(button)}: {button.text()!r} needs {need} px, has {button.width()}"]
    return []


def _combo(combo: QComboBox) -> list[str]:
    opt = QStyleOptionComboBox()
    combo.initStyleOption(opt)
    field = combo.style().subControlRect(
        QStyle.ComplexControl.CC_ComboBox, opt, QStyle.SubControl.SC_ComboBoxEditField, combo
    )
    shown = getattr(combo, "shown_text", combo.currentText)()  # an ElidedCombo draws this
    if shown != combo.currentText():
        if shown.endswith(ELLIPSIS) and combo.currentText() in combo.toolTip():
            return []
        return [f"{_name(combo)}: {shown!r} is cut without the whole in its tooltip"]
    need = combo.fontMetrics().horizontalAdvance(combo.currentText())
    if need > field.width() + SLACK_PX:
        return [f"{_name(combo)}: {combo.currentText()!r} needs {need} px, has {field.width()}"]
    return []


def _tab_scroller(w: QWidget) -> bool:
    return isinstance(w.parentWidget(), QTabBar)


def _tabs(bar: QTabBar) -> list[str]:
    out = []
    if any(isinstance(b, QToolButton) and b.isVisible() for b in bar.children()):
        out.append(f"{_name(bar)}: the tabs scroll ({bar.count()} tabs, {bar.width()} px)")
    for i in range(bar.count()):
        if bar.tabRect(i).width() + SLACK_PX < bar.tabSizeHint(i).width():
            out.append(
                f"{_name(bar)}: tab {bar.tabText(i)!r} is {bar.tabRect(i).width()} px, "
                f"needs {bar.tabSizeHint(i).width()}"
            )
    return out


def _table(view: QAbstractItemView) -> list[str]:
    model = view.model()
    header = getattr(view, "horizontalHeader", lambda: None)()
    if model is None or not isinstance(header, QHeaderView) or not header.isVisible():
        return []
    out = []
    metrics = QFontMetrics(header.font())
    pad = 2 * view.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin) + 2
    cell_metrics = view.fontMetrics()
    for col in range(model.columnCount()):
        if header.isSectionHidden(col):
            continue
        width = header.sectionSize(col)
        title = str(model.headerData(col, Qt.Orientation.Horizontal) or "")
        if (
            metrics.horizontalAdvance(title) + pad > width + SLACK_PX
            and not header.stretchLastSection()
        ):
            out.append(f"{_name(view)}: column {title!r} is {width} px, its header needs more")
        for row in range(min(model.rowCount(), 64)):
            index = model.index(row, col)
            text = str(model.data(index, Qt.ItemDataRole.DisplayRole) or "")
            if not text:
                continue
            need = cell_metrics.horizontalAdvance(text) + 8
            tip = str(model.data(index, Qt.ItemDataRole.ToolTipRole) or "")
            if need > width + SLACK_PX and text.rstrip(ELLIPSIS) not in tip:
                out.append(
                    f"{_name(view)}: cell {text!r} ({title}) is cut, and its tooltip "
                    "does not say it whole"
                )
                break
    return out


def _plot(widget: pg.PlotWidget) -> list[str]:
    """Notes on one plot: each whole inside the plot, none on another."""
    plot = widget.getPlotItem()
    view = plot.getViewBox()
    bounds = view.sceneBoundingRect()
    out = _axis_labels(widget)
    if bounds.height() < MIN_VIEW_PX - SLACK_PX:
        out.append(f"{_name(widget)}: data area squashed to {bounds.height():.0f} px tall")
    notes: list[tuple[str, QRectF]] = []
    for item in widget.scene().items():
        if isinstance(item, pg.TextItem) and item.isVisible() and item.textItem.toPlainText():
            notes.append((item.textItem.toPlainText(), item.sceneBoundingRect()))
    for k, (text, rect) in enumerate(notes):
        if not bounds.adjusted(-2, -2, 2, 2).contains(rect):
            r, b = rect, bounds
            out.append(
                f"{_name(widget)}: note {text!r} runs out of the plot "
                f"({r.left():.0f}–{r.right():.0f} × {r.top():.0f}–{r.bottom():.0f} px in "
                f"{b.left():.0f}–{b.right():.0f} × {b.top():.0f}–{b.bottom():.0f})"
            )
        for other, rect2 in notes[k + 1 :]:
            if rect.intersects(rect2):
                out.append(f"{_name(widget)}: notes {text!r} and {other!r} overlap")
    return out


def _axis_labels(widget: pg.PlotWidget) -> list[str]:
    """Each axis label whole along its axis (a rotated left label runs the plot's height)."""
    plot = widget.getPlotItem()
    view = plot.getViewBox()
    out = []
    for name, room in (("left", view.height()), ("bottom", view.width())):
        axis = plot.getAxis(name)
        if not (axis.isVisible() and axis.label.isVisible() and axis.labelText):
            continue
        length = axis.label.boundingRect().width()  # along the axis, margins included
        if length > room + 2:
            out.append(
                f"{_name(widget)}: {name} axis label {axis.labelText!r} needs {length:.0f} px "
                f"of {room:.0f}"
            )
    return out
