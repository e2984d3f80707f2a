"""The sessions table: every opened source has a row, errors read as errors."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QStyleOptionViewItem

from batchscope.engine.roster import SourceSlot
from batchscope.engine.snapshot import SessionView
from batchscope.ui.sessions.panel import COLUMNS, SessionsPanel
from batchscope.ui.theme import Look, look_from_name
from conftest import dashboard_config

SOURCE, STATE, P50 = COLUMNS.index("Source"), COLUMNS.index("State"), COLUMNS.index("p50 ms")


def _view(sid: int, source: str, state: str = "running", error: str | None = None, **kw):
    latency = kw.pop("latency", {"p50": 12.0, "max": 20.0})
    return SessionView(sid, source, state, error, 30.0, 10, 0, latency, {}, None, **kw)


def _texts(panel: SessionsPanel, col: int) -> list[str]:
    return [panel.table.item(r, col).text() for r in range(panel.table.rowCount())]


def test_a_bad_source_past_the_session_count_gets_a_greyed_row_with_its_error(qtbot):
    panel = SessionsPanel(Look())
    qtbot.addWidget(panel)
    slots = [SourceSlot(f"/v/{n}.mp4", SimpleNamespace(name=f"{n}.mp4")) for n in "ABCD"]
    slots.append(SourceSlot("/v/BAD.mp4", error="not a video OpenCV can open"))
    panel.update_sessions([_view(i, f"{n}.mp4") for i, n in enumerate("ABCD")], slots)
    assert panel.table.rowCount() == 5
    # a clip named without its extension ("rally_a", not "ral…mp4": issue 48)
    assert _texts(panel, SOURCE) == ["A", "B", "C", "D", "BAD"]
    state = panel.table.item(4, STATE)
    assert state.text() == "error: not a video OpenCV can open"
    assert state.toolTip() == f"{state.text()}\nnot a video OpenCV can open"  # cell, why
    assert panel.table.item(4, 0).text() == "–" and panel.table.item(4, P50).text() == "–"
    muted = QColor(Look().theme.muted).name()
    assert panel.table.item(4, SOURCE).foreground().color().name() == muted
    assert panel.table.item(0, SOURCE).foreground().color().name() != muted
    # the row selects its slot: removing it removes the bad source
    panel.table.selectRow(4)
    assert panel.selected_session() == 4
    # one more session plays the bad source: its session row shows it, no extra row
    sixth = _view(4, "/v/BAD.mp4", "error", "not a video OpenCV can open")
    panel.update_sessions([_view(i, f"{n}.mp4") for i, n in enumerate("ABCD")] + [sixth], slots)
    assert panel.table.rowCount() == 5 and panel.table.item(4, 0).text() == "S4"


def test_an_errored_session_shows_a_dash_for_p50(qtbot):
    panel = SessionsPanel(Look())
    qtbot.addWidget(panel)
    errored = _view(1, "x.mp4", "error", "decode failed", latency={"p50": 0.0, "max": 3.0})
    panel.update_sessions([_view(0, "a.mp4"), errored])
    assert _texts(panel, P50) == ["12", "–"]


def test_the_source_column_elides_in_the_middle_with_the_full_path_as_tip(qtbot):
    panel = SessionsPanel(look_from_name("light"))
    qtbot.addWidget(panel)
    long = "/data/recordings/2026-11-30/camera-north-entrance-take-"
    slots = [SourceSlot(long + "1.mp4", SimpleNamespace(name=Path(long).name + "1.mp4"))]
    panel.update_sessions([_view(0, Path(long).name + "1.mp4")], slots)
    option = QStyleOptionViewItem()
    delegate = panel.table.itemDelegateForColumn(SOURCE)
    delegate.initStyleOption(option, panel.table.model().index(0, SOURCE))
    assert option.textElideMode == Qt.TextElideMode.ElideMiddle
    assert panel.table.item(0, SOURCE).toolTip() == long + "1.mp4"


def test_a_bad_source_past_the_count_shows_in_the_running_app(qtbot, tiny_video, ui_settings):
    from batchscope.engine.engine import Engine
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.window.main_window import MainWindow

    bad = str(Path(tiny_video).parent / "missing.mp4")
    config = dashboard_config((str(tiny_video),) * 4 + (bad,), 4)
    window = MainWindow(Engine(config), Look(), ui_settings, devices=device_choices(gpus=[]))
    qtbot.addWidget(window)
    window.resize(1280, 800)
    window.show()
    window.start()
    table = window.sessions.table
    qtbot.waitUntil(lambda: table.rowCount() == 5, timeout=15_000)
    try:
        assert table.item(4, SOURCE).toolTip() == bad
        assert table.item(4, STATE).text().startswith("error: ")
        assert [table.item(r, 0).text() for r in range(4)] == ["S0", "S1", "S2", "S3"]
    finally:
        window.close()


def test_the_sessions_table_keeps_four_rows_in_view(qtbot):
    """At 1280x800 with the Segments dock open it was squeezed to one row; the panel
    around it scrolls instead (ui/window: the panel is a scroll area)."""
    from batchscope.ui.sessions.panel import MIN_ROWS, SessionsPanel
    from batchscope.ui.theme import Look

    for look in (Look(), Look(presentation=True)):
        panel = SessionsPanel(look)
        qtbot.addWidget(panel)
        panel.set_look(look)
        t = panel.table
        rows = MIN_ROWS * t.verticalHeader().defaultSectionSize()
        assert t.minimumHeight() >= rows + t.horizontalHeader().sizeHint().height()
        panel.resize(400, 120)
        panel.show()
        qtbot.waitUntil(lambda t=t: t.isVisible(), timeout=2000)
        assert t.height() >= rows


def test_a_count_shown_while_the_slider_waits_to_send_keeps_the_users_move(qtbot):
    """The engine's count arriving after the user moved the slider is the change before's:
    the move is kept and sent (the old panel dropped it, and under load the dashboard test
    saw 5 sessions asked for and 4 kept)."""
    panel = SessionsPanel(Look())
    qtbot.addWidget(panel)
    sent: list[int] = []
    panel.sessions_changed.connect(sent.append)
    panel.show_count(4)
    panel.count.setValue(5)  # the user's move, sent after the debounce
    panel.show_count(4)  # the previous change's config, shown late
    assert panel.count.value() == 5
    qtbot.waitUntil(lambda: sent == [5], timeout=5000)
    panel.show_count(3)  # once sent, the engine's count is shown again
    assert panel.count.value() == 3
