"""The dashboard under hostile text and failing sessions (the hardening issue's items 11,
12 and 14): user text drawn as it is, failed and stalled sessions named in the headline
and the table, a fault's message gone when it ends, a drop limit that cannot act said so."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import QApplication, QLabel, QToolTip

from batchscope.engine.metrics import Event
from batchscope.ui.theme import Look

#: Text Qt would take for rich text: an image tag, a tag that hides what follows, "<" and ">"
CAPTION = "<img src=x> sessions <5 and >2"
NAME = "<script>clip</script>.mp4"


def shown(label: QLabel) -> str:
    """What ``label`` draws, as a screen reader reads it (Qt converts rich text first:
    ``<img src=x> sessions <5 and >2`` reads "￼ sessions 2")."""
    return QAccessible.queryAccessibleInterface(label).text(QAccessible.Text.Name)


def tip_shown(tip: str) -> str:
    """What Qt's tooltip draws for ``tip`` (a tooltip guesses rich text as a label does)."""
    QToolTip.showText(QPoint(0, 0), tip)
    label = next(w for w in QApplication.allWidgets() if w.objectName() == "qtooltip_label")
    text = shown(label)
    QToolTip.hideText()
    return text


# -- 11. user text is plain text ------------------------------------------------------------


def test_status_line_and_starting_view_draw_user_text_as_it_is(qtbot):
    from batchscope.ui.headline import StatusLine
    from batchscope.ui.starting import StartingView

    status = StatusLine(Look())
    starting = StartingView(f"Starting the experiment {CAPTION}…")
    for w in (status, starting):
        qtbot.addWidget(w)
        w.show()
    message = f"{NAME}: not a video OpenCV can open"
    status.show_message(message, "error")
    assert shown(status.message) == message
    assert tip_shown(status.message.toolTip()) == message
    for label in (status.device, status.weights):
        label.setText(NAME)
        assert shown(label) == NAME
    starting.say(f"Opening 1 source ({NAME})\nand building the backend…")
    assert shown(starting.title) == f"Starting the experiment {CAPTION}…"
    assert shown(starting.detail) == f"Opening 1 source ({NAME})\nand building the backend…"


def test_a_fault_dialog_quotes_what_was_typed_as_it_is(qtbot):
    from batchscope.ui.faults_menu import FaultDialog

    dialog = FaultDialog("burst", sessions=2)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.fields["factor"].setText("<b>3</b>")
    dialog.accept()
    assert dialog.result_fault is None
    assert "'<b>3</b>'" in shown(dialog.error)


def test_card_titles_and_event_markers_draw_user_text_as_it_is(qtbot):
    from batchscope.ui.plots import FpsPlot
    from batchscope.ui.segment_table import SegmentPlots

    plot, segment = FpsPlot(Look()), SegmentPlots(Look())
    for w in (plot, segment):
        qtbot.addWidget(w)
        w.show()
    plot.set_title(CAPTION)
    assert shown(plot.title) == CAPTION
    assert tip_shown(plot.title.toolTip()) == CAPTION
    plot.add_events([Event(1.0, "error", f"session 1: {NAME}: no such file")])
    (marker,) = plot.markers.markers
    assert tip_shown(marker.label.toolTip()) == f"session 1: {NAME}: no such file"
    segment.heading.setText(f"segment 2 · 5.0 s · {CAPTION}")
    assert shown(segment.heading) == f"segment 2 · 5.0 s · {CAPTION}"


def test_the_dashboard_draws_captions_names_and_errors_as_they_are(
    dashboard, qtbot, tmp_path: Path
):
    dashboard.presenter.caption.emit(CAPTION)
    assert shown(dashboard.caption) == CAPTION
    dashboard.controls.show_error(f"Not applied: {CAPTION}")
    assert shown(dashboard.controls.error) == f"Not applied: {CAPTION}"

    bad = tmp_path / NAME.replace("/", "")  # a file name may hold "<", ">" but no "/"
    bad.write_bytes(b"not a video")
    dashboard.presenter.add_sources([str(bad)])
    status = dashboard.status_line.message
    # "Opening …", then the file's error (the job's, or the engine's event): each names it
    qtbot.waitUntil(lambda: "Opening" not in status.text(), timeout=30_000)
    assert bad.name in status.text()
    assert shown(status) == status.text()
    table = dashboard.sessions.table

    def source_cells() -> list[tuple[str, str]]:  # (text, tooltip) of the bad file's rows
        cells = [table.item(r, 1) for r in range(table.rowCount())]
        return [(c.text(), c.toolTip()) for c in cells if c and "clip" in c.text()]

    qtbot.waitUntil(lambda: bool(source_cells()), timeout=10_000)
    text, tip = source_cells()[0]
    assert text.endswith(bad.name)  # a table cell is plain text
    assert tip_shown(tip) == str(bad)  # its tooltip, the whole path, drawn as it is


def test_plain_tip_leaves_ordinary_tooltips_alone():
    from batchscope.ui.plain_text import menu_text, plain_tip

    assert plain_tip("p99 ≤ 50 ms\nevery session") == "p99 ≤ 50 ms\nevery session"
    assert plain_tip(CAPTION) != CAPTION  # escaped: Qt would draw an image here
    assert menu_text("R&D take 2") == "R&&D take 2"  # a menu shows "&", not a shortcut
