"""The dashboard under hostile text and failing sessions (the hardening issue's items 11,
12 and 14): user text drawn as it is, failed and stalled sessions named in the headline
and the table, a fault's message gone when it ends, a drop limit that cannot act said so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import QApplication, QLabel, QToolTip

from batchscope.config import RunConfig
from batchscope.engine.metrics import Event
from batchscope.engine.snapshot import SessionView, Snapshot
from batchscope.experiment import Fault
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
    from batchscope.ui.plots.headline import StatusLine
    from batchscope.ui.window.starting import StartingView

    status = StatusLine(Look())
    status.resize(1600, 30)  # room for the whole message: no "…" (see the next test)
    starting = StartingView(f"Starting the experiment {CAPTION}…")
    for w in (status, starting):
        qtbot.addWidget(w)
        w.show()
    message = f"{NAME}: not a video OpenCV can open"
    status.show_message(message, "error")
    assert shown(status.message) == message
    assert tip_shown(status.message.toolTip()) == message
    for label in (status.device, status.weights):
        label.setText(NAME)  # the status line lays its parts out again, then it shows
        qtbot.waitUntil(lambda label=label: shown(label) == NAME, timeout=5000)
    starting.say(f"Opening 1 source ({NAME})\nand building the backend…")
    assert shown(starting.title) == f"Starting the experiment {CAPTION}…"
    assert shown(starting.detail) == f"Opening 1 source ({NAME})\nand building the backend…"


def test_a_fault_dialog_quotes_what_was_typed_as_it_is(qtbot):
    from batchscope.ui.window.faults_menu import FaultDialog

    dialog = FaultDialog("burst", sessions=2)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.fields["factor"].setText("<b>3</b>")
    dialog.accept()
    assert dialog.result_fault is None
    assert "'<b>3</b>'" in shown(dialog.error)


def test_card_titles_and_event_markers_draw_user_text_as_it_is(qtbot):
    from batchscope.ui.plots.time_plots import FpsPlot
    from batchscope.ui.segment_table.view import SegmentPlots

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
    # the sources' notes ("tiny.mp4: 2.0 s clip: it loops") are said on the first ticks
    qtbot.waitUntil(lambda: dashboard.tick_stats.ticks >= 2, timeout=15_000)
    dashboard.presenter.add_sources([str(bad)])
    status = dashboard.status_line.message
    # "Opening …", then the file's error (the job's, or the engine's event): each names it
    failed = lambda: bad.name in status.text() and "Opening" not in status.text()  # noqa: E731
    qtbot.waitUntil(failed, timeout=30_000)
    # drawn as it is, cut with "…" where the status line is short; its tooltip whole
    drawn = shown(status)
    assert drawn and status.text().startswith(drawn.removesuffix("…"))
    assert tip_shown(status.toolTip()) == status.text()
    table = dashboard.sessions.table

    def source_cells() -> list[tuple[str, str]]:  # (text, tooltip) of the bad file's rows
        cells = [table.item(r, 1) for r in range(table.rowCount())]
        return [(c.text(), c.toolTip()) for c in cells if c and "clip" in c.text()]

    qtbot.waitUntil(lambda: bool(source_cells()), timeout=10_000)
    text, tip = source_cells()[0]
    assert text.endswith(bad.stem)  # a table cell is plain text (a video without its .mp4)
    assert tip_shown(tip) == str(bad)  # its tooltip, the whole path, drawn as it is


def test_plain_tip_leaves_ordinary_tooltips_alone():
    from batchscope.ui.plain_text import menu_text, plain_tip

    assert plain_tip("p99 ≤ 50 ms\nevery session") == "p99 ≤ 50 ms\nevery session"
    assert plain_tip(CAPTION) != CAPTION  # escaped: Qt would draw an image here
    assert menu_text("R&D take 2") == "R&&D take 2"  # a menu shows "&", not a shortcut


# -- 12. sessions in error and stalled are named; a fault's message goes when it ends --------


def view(sid: int, state: str, fps: float) -> SessionView:
    error = "source error (injected fault)" if state == "error" else None
    return SessionView(
        sid, "synthetic", state, error, fps, 10, 0, {"p50": 5.0, "max": 9.0}, {}, None
    )


def snapshot(sessions: list[SessionView]) -> Snapshot:
    return Snapshot(
        t=5.0,
        config=RunConfig(),
        running=True,
        paused=False,
        device="emulated:laptop-8gb",
        weights="emulated device: no model runs",
        draws_detections=False,
        policy="all",
        oom_cap=None,
        sessions=sessions,
        recent_latency_ms={0: np.array([5.0, 6.0])},
        batch_sizes={},
        throughput_wps=60.0,
        busy=0.2,
        memory={},
        timeline=[],
    )


def test_the_headline_names_a_session_in_error_and_what_the_fps_cover(qtbot):
    from batchscope.ui.plots.headline import HeadlineStrip

    strip = HeadlineStrip()
    qtbot.addWidget(strip)
    strip.show()
    strip.update_from(snapshot([view(0, "running", 30.0), view(1, "running", 26.0)]))
    assert not strip.sessions_value.isVisible()  # every session runs: nothing to say

    # S2 at 0 fps: left out of min fps and fairness (its source failed), and said so
    strip.update_from(
        snapshot([view(0, "running", 30.0), view(1, "running", 26.0), view(2, "error", 0.0)])
    )
    assert strip.sessions_value.isVisible() and strip.sessions_value.text() == "1 in error"
    assert strip.sessions_name.text() == "fps over 2 of 3"
    assert strip.sessions_value.property("level") == "error"
    assert strip.values["min_fps"].text() == "26.0"
    strip.update_from(snapshot([view(0, "error", 0.0)]))
    assert (strip.sessions_value.text(), strip.sessions_name.text()) == (
        "1 in error",
        "no fps figures",
    )
    assert strip.values["min_fps"].text() == "–"


def test_a_headline_figure_keeps_its_widest_width(qtbot):
    """min fps going 12.0 -> 9.5 -> 12.0 from tick to tick: the figure keeps the room of
    "12.0" (on the old code it shrank to "9.5", and a tick drawn before the next layout
    showed "12.0" cut: the CI fit check saw "'12.0' needs 57 px, has 45")."""
    from PySide6.QtWidgets import QApplication

    from batchscope.ui.plots.headline import HeadlineStrip
    from batchscope.ui.theme import stylesheet

    strip = HeadlineStrip()
    qtbot.addWidget(strip)
    strip.setStyleSheet(stylesheet(Look()))  # the figures' big type
    strip.resize(1400, 120)
    strip.show()
    figure = strip.values["min_fps"]
    widths = []
    for fps in (12.0, 9.5, 12.0):
        strip.update_from(snapshot([view(0, "running", 30.0), view(1, "running", fps)]))
        assert figure.text() == f"{fps:.1f}"
        widths.append(figure.width())  # as drawn at this tick, before any relayout
        QApplication.sendPostedEvents()
    need = figure.fontMetrics().horizontalAdvance("12.0")
    assert min(widths[1:]) >= need, widths


def test_a_stalled_session_is_named_in_the_headline_and_the_table(qtbot):
    from batchscope.ui.plots.headline import HeadlineStrip
    from batchscope.ui.sessions.panel import SessionsPanel

    look = Look()
    strip, panel = HeadlineStrip(), SessionsPanel(look)
    for w in (strip, panel):
        qtbot.addWidget(w)
    sessions = [view(0, "stalled", 0.0), view(1, "running", 30.0), view(2, "error", 0.0)]
    strip.update_from(snapshot(sessions))
    assert strip.sessions_value.text() == "1 stalled · 1 in error"
    assert strip.sessions_name.text().endswith(" of 3")
    strip.update_from(snapshot(sessions[:2]))
    assert strip.sessions_value.text() == "1 stalled"
    assert strip.sessions_value.property("level") == "warn"

    panel.update_sessions(sessions)
    states = [panel.table.item(r, 2) for r in range(3)]
    assert [s.text() for s in states] == [
        "stalled",
        "running",
        "error: source error (injected fault)",
    ]
    colours = [s.foreground().color().name().upper() for s in states]
    assert colours == [look.theme.warn, look.theme.ok, look.theme.error]


def test_a_faults_message_goes_when_it_ends(dashboard, qtbot):
    from batchscope.ui.window.faults_menu import inject

    status = dashboard.status_line.message
    marked = lambda: [m.event.message for m in dashboard.fps_plot.markers.markers]  # noqa: E731

    # the sources' notes ("tiny.mp4: 2.0 s clip: it loops") are said on the first ticks
    qtbot.waitUntil(lambda: dashboard.tick_stats.ticks >= 2, timeout=15_000)
    inject(dashboard.presenter, Fault("stall", 1.0, session=0))
    assert status.text() == "Fault: S0 stalls for 1 s"
    qtbot.waitUntil(lambda: "ended: S0 stalls for 1 s" in marked(), timeout=15_000)
    assert status.text() == ""

    # a source error: its error replaces "Fault: …" in the status line; both go at the end
    inject(dashboard.presenter, Fault("source_error", 2.0, session=1))
    qtbot.waitUntil(
        lambda: dashboard.headline.sessions_value.text() == "1 in error", timeout=15_000
    )
    assert dashboard.headline.sessions_name.text() == "fps over 2 of 3"
    assert status.text() == "error: session 1: source error (injected fault)"
    qtbot.waitUntil(lambda: "ended: S1's source fails for 2 s" in marked(), timeout=15_000)
    assert status.text() == ""
    qtbot.waitUntil(lambda: not dashboard.headline.sessions_value.isVisible(), timeout=15_000)


# -- 14. a drop limit at or above one frame interval cannot act: said, and warned ------------


def test_the_drop_rule_is_one_frame_interval():
    from batchscope.config import drop_after_warning

    assert drop_after_warning(None, 30.0) is None  # off
    assert drop_after_warning(33.3, 30.0) is None  # a window can wait up to 33.33 ms
    assert drop_after_warning(40.0, 30.0) == (
        "drop_after_ms = 40: cannot take effect at 30 fps: a new frame replaces the waiting "
        "window every 33.3 ms, so only a late frame lets one wait longer; use a limit below "
        "33.3 ms"
    )
    assert drop_after_warning(20.0, 60.0).startswith("drop_after_ms = 20: cannot take effect")
    # --fps source: the slowest source's interval (25 fps: 40 ms) is the longest wait
    assert drop_after_warning(39.0, None, [30.0, 25.0]) is None
    assert "the sources' own rates (slowest 25 fps)" in drop_after_warning(40.0, None, [30, 25])
    assert "frame rates are not known yet" in drop_after_warning(40.0, None, [])


def test_run_warns_on_stderr_when_the_drop_limit_cannot_act(capsys):
    from batchscope.cli import main

    args = ["run", "synthetic", "--sessions", "2", "--resolution", "256x144"]
    args += ["--duration", "0.3", "--warmup", "0", "--quiet"]
    assert main([*args, "--drop-after-ms", "40"]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert warnings == [
        "batchscope: warning: drop_after_ms = 40: cannot take effect at 30 fps: a new frame "
        "replaces the waiting window every 33.3 ms, so only a late frame lets one wait "
        "longer; use a limit below 33.3 ms"
    ]
    assert main([*args, "--drop-after-ms", "20"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_run_help_says_when_the_drop_limit_acts(capsys):
    from batchscope.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "acts only below one frame interval" in " ".join(capsys.readouterr().out.split())


def test_the_controls_warn_when_the_drop_limit_cannot_act(dashboard, qtbot):
    warning = dashboard.controls.drop_warning
    assert not warning.isVisible()
    dashboard.presenter.change({"drop_after_ms": 40.0})
    qtbot.waitUntil(warning.isVisible, timeout=15_000)
    assert shown(warning).startswith("drop_after_ms = 40: cannot take effect at 30 fps")
    assert "acts only below one frame interval" in dashboard.controls.drop_ms.toolTip()
    dashboard.presenter.change({"drop_after_ms": 20.0})
    qtbot.waitUntil(lambda: not warning.isVisible(), timeout=15_000)
    dashboard.presenter.change({"fps": 60.0})  # 16.7 ms a frame: 20 ms can act no more
    qtbot.waitUntil(warning.isVisible, timeout=15_000)
    assert shown(warning).startswith("drop_after_ms = 20: cannot take effect at 60 fps")
