"""Colours, fonts and line widths: one place for how the dashboard looks.

A session keeps one colour everywhere (table swatch, video tile, every
plot), taken from a fixed palette by session id, so a speaker can say "the
orange session" and the audience finds it in every panel. The palette is
chosen to read on both the dark and the light background.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication

#: Stage colours of the stacked latency bars (wait, prep, compute, post).
STAGE_COLOURS = {
    "wait": "#8C9BB0",
    "host": "#E377C2",  # the machine's share of the wait: a colour no other stage has
    "prep": "#EDC948",
    "compute": "#F28E2B",
    "post": "#59C15B",
}

#: Memory series: key of TimelineSample.memory -> (legend label, colour, short name).
MEMORY_SERIES = {
    "allocated_mb": ("allocated (torch)", "#4C9BE8", "allocated"),
    "reserved_mb": ("reserved (torch)", "#B07AEA", "reserved"),
    "nvml_device_used_mb": ("device used (NVML)", "#F28E2B", "device"),
    "rss_mb": ("process RSS", "#59C15B", "RSS"),
    "profile_peak_mb": ("profile peak (emulated)", "#EDC948", "profile peak"),
}


@dataclass(frozen=True)
class Theme:
    name: str
    window: str  # window and panel background
    base: str  # inputs, tables
    plot: str  # plot background
    text: str
    muted: str  # secondary text, axes
    grid: str
    accent: str
    error: str
    ok: str
    banner: str  # scenario caption background
    event: str  # config changes marked on the time axes
    warn: str  # out-of-memory marks


THEMES = {
    "dark": Theme(
        "dark",
        window="#1B1F27",
        base="#232934",
        plot="#14171D",
        text="#E8ECF2",
        muted="#9AA4B5",
        grid="#3A4252",
        accent="#4C9BE8",
        error="#FF6B6B",
        ok="#6BD46E",
        banner="#2B3A52",
        event="#D9C36A",
        warn="#F28E2B",
    ),
    "light": Theme(
        "light",
        window="#EEF0F4",
        base="#FFFFFF",
        plot="#FFFFFF",
        text="#1C2230",
        muted="#5A6376",
        grid="#C9CFDA",
        accent="#2F6FB5",
        error="#C62828",
        ok="#2E7D32",
        banner="#DCE7F5",
        event="#8A6A00",
        warn="#C25E00",
    ),
}


@dataclass(frozen=True)
class Look:
    """A theme plus presentation mode (larger fonts, thicker lines for a projector)."""

    theme: Theme = THEMES["dark"]
    presentation: bool = False

    @property
    def font_pt(self) -> int:
        return 15 if self.presentation else 10

    @property
    def title_pt(self) -> int:
        return 17 if self.presentation else 11

    @property
    def big_pt(self) -> int:
        """Headline numbers."""
        return 26 if self.presentation else 17

    @property
    def axis_pt(self) -> int:
        return 14 if self.presentation else 9

    @property
    def line_width(self) -> float:
        return 4.0 if self.presentation else 2.2

    def with_theme(self, name: str) -> Look:
        return replace(self, theme=THEMES[name])

    def toggled_presentation(self) -> Look:
        return replace(self, presentation=not self.presentation)


def look_from_name(theme: str | None, presentation: bool = False) -> Look:
    return Look(THEMES.get(theme or "dark", THEMES["dark"]), presentation)


def apply_look(app: QApplication, look: Look) -> None:
    """Fusion style, a palette and a base font for the whole application, and the plots'."""
    # imported here, not at the top: the starting window shows before pyqtgraph loads
    import pyqtgraph as pg

    apply_palette(app, look)
    t = look.theme
    pg.setConfigOptions(antialias=True, background=t.plot, foreground=t.muted)


def apply_palette(app: QApplication, look: Look) -> None:
    """Fusion style, a palette, a base font and the style sheet: what every widget but a
    plot needs (the starting window, shown before pyqtgraph is imported)."""
    t = look.theme
    app.setStyle("Fusion")
    pal = QPalette()
    roles = {
        QPalette.ColorRole.Window: t.window,
        QPalette.ColorRole.WindowText: t.text,
        QPalette.ColorRole.Base: t.base,
        QPalette.ColorRole.AlternateBase: t.window,
        QPalette.ColorRole.Text: t.text,
        QPalette.ColorRole.Button: t.base,
        QPalette.ColorRole.ButtonText: t.text,
        QPalette.ColorRole.Highlight: t.accent,
        QPalette.ColorRole.HighlightedText: "#FFFFFF",
        QPalette.ColorRole.ToolTipBase: t.base,
        QPalette.ColorRole.ToolTipText: t.text,
        QPalette.ColorRole.PlaceholderText: t.muted,
        QPalette.ColorRole.Link: t.accent,
    }
    for role, colour in roles.items():
        pal.setColor(role, QColor(colour))
    for role in (
        QPalette.ColorRole.Text,
        QPalette.ColorRole.WindowText,
        QPalette.ColorRole.ButtonText,
    ):
        pal.setColor(
            QPalette.ColorGroup.Disabled,
            role,
            QColor(t.muted).darker(130 if t.name == "dark" else 70),
        )
    app.setPalette(pal)
    font = QFont("DejaVu Sans")
    font.setPointSize(look.font_pt)
    app.setFont(font)
    app.setStyleSheet(stylesheet(look))


def stylesheet(look: Look) -> str:
    t = look.theme
    pad = 8 if look.presentation else 5
    return f"""
QGroupBox {{ font-weight: bold; border: 1px solid {t.grid}; border-radius: 6px;
             margin-top: {look.font_pt + 6}px; padding-top: {pad}px; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 8px; padding: 0 4px; color: {t.text}; }}
QStatusBar {{ border-top: 1px solid {t.grid}; }}
QStatusBar QLabel {{ padding: 0 {pad}px; }}
QLabel#caption {{ background: {t.banner}; color: {t.text}; border-radius: 6px;
                  padding: {pad + 2}px {pad * 2}px; font-size: {look.title_pt + 1}pt; }}
QLabel#cardTitle {{ color: {t.text}; font-weight: bold; font-size: {look.title_pt}pt; }}
QLabel#kpiValue {{ color: {t.text}; font-weight: bold; font-size: {look.big_pt}pt; }}
QLabel#kpiValue[level="warn"] {{ color: {t.warn}; }}
QLabel#kpiValue[level="error"] {{ color: {t.error}; }}
QLabel#kpiName {{ color: {t.muted}; font-size: {max(8, look.font_pt - 1)}pt; }}
QLabel#controlError {{ color: {t.error}; }}
QLabel#controlWarning {{ color: {t.warn}; }}
QFrame#card {{ background: {t.plot}; border: 1px solid {t.grid}; border-radius: 6px; }}
QFrame#kpis {{ background: {t.base}; border: 1px solid {t.grid}; border-radius: 6px; }}
QTableWidget {{ gridline-color: {t.grid}; }}
QHeaderView::section {{ background: {t.window}; color: {t.muted}; border: none;
                        border-bottom: 1px solid {t.grid}; padding: 3px; }}
QToolBar {{ spacing: 6px; border: none; }}
QTabWidget::pane {{ border: none; }}
QToolButton#wholeRun {{ color: {t.text}; border: 1px solid {t.grid}; border-radius: 4px;
                       padding: 1px 8px; }}
QToolButton#wholeRun:checked {{ background: {t.accent}; border-color: {t.accent};
                               color: {t.base}; font-weight: bold; }}
QLabel#startingTitle {{ color: {t.text}; font-size: {look.big_pt}pt; }}
QLabel#startingDetail {{ color: {t.muted}; font-size: {look.title_pt}pt; }}
QLabel#startingDetail[level="error"] {{ color: {t.error}; }}
"""
