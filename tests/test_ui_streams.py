"""The app's Add stream…: the dialog, the recent URLs (masked, opened with their password),
and a stream session's state and details in the sessions table."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialog

from batchscope.config import RunConfig
from batchscope.ui.sessions import StreamDialog, stream_settings_line
from batchscope.ui.sessions.stream_dialog import MAX_RECENT, recent_streams, remember_stream

SECRET_URL = "rtsp://viewer:hunter2@cam.local/live"


def test_recent_streams_newest_first_once_each_and_bounded(ui_settings):
    for i in range(MAX_RECENT + 3):
        remember_stream(ui_settings, f"rtsp://cam{i}/live")
    remember_stream(ui_settings, "rtsp://cam5/live")  # again: to the front, not twice
    urls = recent_streams(ui_settings)
    assert urls[0] == "rtsp://cam5/live" and len(urls) == MAX_RECENT
    assert urls.count("rtsp://cam5/live") == 1
    ui_settings.setValue("recent_streams", "not json")
    assert recent_streams(ui_settings) == []  # a damaged entry is no list, not a crash


def test_the_dialog_shows_recent_urls_masked_and_gives_the_real_one(qtbot):
    dialog = StreamDialog([SECRET_URL, "http://cam/video.mjpg"], "RTSP over TCP")
    qtbot.addWidget(dialog)
    shown = [dialog.box.itemText(i) for i in range(dialog.box.count())]
    assert shown == ["rtsp://viewer:***@cam.local/live", "http://cam/video.mjpg"]
    dialog.box.setCurrentIndex(0)
    assert "hunter2" not in dialog.box.currentText()
    assert dialog.url() == SECRET_URL
    dialog.accept()
    assert dialog.result() == QDialog.DialogCode.Accepted


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("", "Type a stream URL"),
        ("/videos/clip.mp4", "/videos/clip.mp4: not a stream URL"),
        ("ftp://u:pw@host/x", "ftp://u:***@host/x: not a stream URL"),
    ],
)
def test_the_dialog_refuses_what_is_no_stream_and_says_why(qtbot, typed, says):
    dialog = StreamDialog([], "RTSP over TCP")
    qtbot.addWidget(dialog)
    dialog.box.setEditText(typed)
    dialog.accept()
    assert dialog.result() != QDialog.DialogCode.Accepted
    assert dialog.error.text().startswith(says) and not dialog.error.isHidden()


def test_the_settings_line_names_the_transport_and_timeouts():
    line = stream_settings_line(RunConfig(stream_transport="udp", stream_timeout_s=2.5))
    assert line.startswith("RTSP over UDP · connect timeout 2.5 s · read timeout 5 s")
    assert "UDP, then TCP" in stream_settings_line(RunConfig(stream_transport="auto"))


def test_a_recent_stream_in_the_menu_is_masked_and_adds_the_real_url(dashboard, monkeypatch, qtbot):
    import batchscope.engine.sources as sources

    monkeypatch.setattr(sources, "list_cameras", lambda: [])
    remember_stream(dashboard.sessions.settings, SECRET_URL)
    dashboard.sessions._fill_cameras()
    texts = [a.text() for a in dashboard.sessions.camera_menu.actions()]
    assert any("rtsp://viewer:***@cam.local/live" in t for t in texts)
    assert not any("hunter2" in t for t in texts)
    added: list[str] = []
    dashboard.sessions.add_source.disconnect()
    dashboard.sessions.add_source.connect(added.append)
    recent = next(a for a in dashboard.sessions.camera_menu.actions() if "cam.local" in a.text())
    recent.trigger()
    assert added == [SECRET_URL]


def test_a_stream_session_shows_reconnecting_and_the_others_keep_running(
    dashboard, qtbot, tmp_path
):
    from stream_servers import http_server, make_clip

    server = http_server(make_clip(tmp_path)).start()
    url = server.url.replace("http://", "http://viewer:hunter2@")  # ffmpeg ignores it
    table = dashboard.sessions.table

    def row_of(source_text: str) -> int | None:
        for row in range(table.rowCount()):
            item = table.item(row, 1)
            if item is not None and source_text in item.toolTip():
                return row
        return None

    def state(row: int) -> str:
        return table.item(row, 2).text()

    try:
        dashboard.presenter.add_sources([url])
        shown = url.replace("hunter2", "***")
        qtbot.waitUntil(lambda: row_of(shown) is not None, timeout=20_000)
        row = row_of(shown)
        assert row is not None
        qtbot.waitUntil(lambda: state(row).startswith("running"), timeout=20_000)
        assert "live stream (never paced or looped)" in table.item(row, 2).toolTip()
        server.stop()  # by PID: the camera goes away
        qtbot.waitUntil(lambda: state(row).startswith("reconnecting ("), timeout=20_000)
        assert "lost:" in table.item(row, 2).toolTip()
        others = [r for r in range(table.rowCount()) if r != row]
        assert others and all(state(r).startswith("running") for r in others)
        server.start()  # the same port: it comes back
        qtbot.waitUntil(lambda: state(row).startswith("running"), timeout=30_000)
        texts = [
            text
            for r in range(table.rowCount())
            for c in range(table.columnCount())
            if (item := table.item(r, c)) is not None
            for text in (item.text(), item.toolTip())
        ]
        texts += [e.message for e in dashboard.engine.events()]
        texts.append(dashboard.status_line.message.text())
        assert not [t for t in texts if "hunter2" in t]
    finally:
        server.stop()


def test_the_headline_counts_reconnecting_sessions_as_one_kind():
    from batchscope.engine.snapshot import SessionView
    from batchscope.ui.plots.headline import session_summary

    def view(sid: int, state: str) -> SessionView:
        return SessionView(sid, "rtsp://cam", state, None, 0.0, 0, 0, {"p50": 0.0}, {}, None)

    value, name, level = session_summary(
        [view(0, "running"), view(1, "reconnecting (3)"), view(2, "reconnecting (1)")]
    )
    assert (value, name, level) == ("2 reconnecting", "fps over 3 of 3", "warn")
