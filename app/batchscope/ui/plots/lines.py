"""How the plots' lines are drawn: pens, and the labels on lines, in the current look."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPen

from batchscope.ui.theme import Look


def pen(colour: str, width: float, dashed: bool = False) -> QPen:
    style = Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine
    return pg.mkPen(colour, width=width, style=style)


def style_labels(line: pg.InfiniteLine, colour: str, look: Look) -> None:
    """Colour and size the labels of a marker line for the current look."""
    font = QFont("DejaVu Sans")
    font.setPointSize(look.axis_pt)
    for child in line.childItems():
        if isinstance(child, pg.InfLineLabel):
            child.setColor(colour)
            child.textItem.setFont(font)
