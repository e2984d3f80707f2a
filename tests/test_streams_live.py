"""Real network streams on loopback, served by ffmpeg and rtsp-server-perl (see
stream_servers.py): sessions play them at the stream's own rate, a server killed mid-run
gives "reconnecting" and recovery, a wrong port fails in time, credentials never show."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from batchscope.cli import main
from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.sources import SourceError
from batchscope.engine.streams import StreamSettings, StreamSource
from contract import SMALL_EMULATED, wait_for
from stream_servers import (
    CLIP_FPS,
    RtspRelay,
    free_port,
    gst_rtsp_server,
    http_server,
    listening_sockets,
    make_clip,
    udp_sender,
)

SECRET = "hunter2"
QUICK = dict(stream_timeout_s=3.0, stream_read_timeout_s=1.5)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("streams"))


def engine_on(sources: tuple[str, ...], sessions: int, **config) -> Engine:
    cfg = {**SMALL_EMULATED, **QUICK, **config, "sources": sources, "sessions": sessions}
    engine = Engine(RunConfig(**cfg))
    engine.open()
    engine.start()
    return engine


def delivered(engine: Engine, sid: int) -> int:
    return next(s.delivered for s in engine.snapshot().sessions if s.id == sid)


def state(engine: Engine, sid: int) -> str:
    return next(s.state for s in engine.snapshot().sessions if s.id == sid)


@pytest.mark.parametrize("kind", ["mjpeg", "ts"])
def test_an_http_stream_plays_at_its_own_rate_never_paced(clip, kind):
    with http_server(clip, kind) as server:
        # paced sessions would send 10 fps; the stream's sessions get its 30
        engine = engine_on((server.url,), 2, fps=10.0)
        try:
            assert wait_for(lambda: min(delivered(engine, s) for s in (0, 1)) >= 30, 20)
            engine.reset_stats(announce=False)
            assert wait_for(lambda: min(delivered(engine, s) for s in (0, 1)) >= 45, 20)
            report = engine.report()
        finally:
            engine.stop()
    for session in report["sessions"]:
        stream = session["stream"]
        assert session["fps"] > 15  # far above the 10 fps pace: arrivals drive it
        assert "paced_fps" not in session and "pacing" not in session
        assert stream["state"] == "playing" and stream["reconnects"] == 0
        assert stream["frames"] >= 40  # counted since the reset, as delivered is
        assert 15 < stream["arrival_fps"] < 2 * CLIP_FPS
        assert stream["jitter_ms"] >= 0
    assert report["sessions"][0]["source"] == server.url


def test_udp_stream_plays(clip):
    with udp_sender(clip) as sender:
        engine = engine_on((sender.url, "synthetic"), 2)
        try:
            assert wait_for(lambda: delivered(engine, 0) >= 30, 20)
            report = engine.report()
        finally:
            engine.stop()
    assert report["sessions"][0]["stream"]["frames"] >= 30
    assert "stream" not in report["sessions"][1]  # the synthetic scene is paced as before


def test_rtsp_server_killed_mid_run_reconnects_and_the_other_session_goes_on():
    server = gst_rtsp_server().start()  # RTP over TCP: the default transport
    assert listening_sockets(server.pid) == [("tcp", server.url.split("/")[2])]  # loopback
    engine = engine_on((server.url, "synthetic"), 2)
    try:
        assert wait_for(lambda: delivered(engine, 0) >= 30, 20)
        server.stop()  # by PID
        assert wait_for(lambda: state(engine, 0).startswith("reconnecting ("), 15)
        other = delivered(engine, 1)
        assert wait_for(lambda: delivered(engine, 1) >= other + 30, 15)  # S1 keeps running
        down_at = delivered(engine, 0)
        server.start()  # the same port: the camera is back
        assert wait_for(lambda: state(engine, 0) == "running", 30)
        assert wait_for(lambda: delivered(engine, 0) >= down_at + 30, 20)
        report = engine.report()
        messages = [e.message for e in engine.events()]
    finally:
        engine.stop()
        server.stop()
    stream = report["sessions"][0]["stream"]
    assert stream["reconnects"] >= 1 and stream["down_s"] > 0
    assert any(m.startswith("stream lost on rtsp://127.0.0.1") for m in messages)
    assert any(m.startswith("stream back on rtsp://127.0.0.1") for m in messages)
    captions = [s["caption"] for s in report["segments"]]
    assert any(c.startswith("stream lost") for c in captions)
    assert any(c.startswith("stream back") for c in captions)


def test_rtsp_relayed_h264_over_udp_plays(clip):
    with RtspRelay(clip) as relay:
        engine = engine_on((relay.url,), 2, stream_transport="udp")
        try:
            assert wait_for(lambda: min(delivered(engine, s) for s in (0, 1)) >= 30, 20)
            report = engine.report()
        finally:
            engine.stop()
    assert all(s["stream"]["frames"] >= 30 for s in report["sessions"])


def test_rtsp_frame_age_comes_from_the_rtcp_wall_clock():
    with gst_rtsp_server() as server:
        source = StreamSource(server.url, (128, 72))
        try:  # the server's first sender report comes within seconds
            assert wait_for(lambda: source.status().age_ms is not None, 20)
            age = source.status().age_ms
        finally:
            source.close()
    assert age is not None and -50 < age < 1000  # loopback, one clock: small and sane


def test_a_wrong_port_fails_within_the_connect_timeout_in_one_line():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(SourceError) as caught:
        StreamSource(f"rtsp://admin:{SECRET}@127.0.0.1:{port}/cam", (128, 72))
    assert time.monotonic() - started < StreamSettings().connect_timeout_s + 1
    assert str(caught.value) == (
        f"rtsp://admin:***@127.0.0.1:{port}/cam: connection refused: nothing listens on "
        f"127.0.0.1:{port}"
    )


def test_a_udp_stream_with_no_sender_fails_after_the_connect_timeout():
    port = free_port()
    settings = StreamSettings(connect_timeout_s=1.0, read_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(SourceError, match="no video stream opened within 1 s"):
        StreamSource(f"udp://127.0.0.1:{port}", (128, 72), settings)
    assert time.monotonic() - started < 30  # bounded by its timeouts, not hanging


def test_cli_a_stream_that_does_not_answer_is_one_line_exit_2(capsys):
    port = free_port()
    code = main(["run", f"rtsp://u:{SECRET}@127.0.0.1:{port}/x", "--duration", "1"])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("batchscope: error")]
    assert lines == [
        f"batchscope: error: rtsp://u:***@127.0.0.1:{port}/x: connection refused: nothing "
        f"listens on 127.0.0.1:{port}"
    ]
    assert SECRET not in err and "Traceback" not in err


def test_credentials_never_reach_the_report_recording_events_or_terminal(clip, tmp_path, capsys):
    with RtspRelay(clip, user=f"viewer:{SECRET}") as relay:
        assert SECRET in relay.url
        out = tmp_path / "report.json"
        code = main(
            ["run", relay.url, "synthetic", "--sessions", "2", "--duration", "2",
             "--warmup", "0.5", "--resolution", "256x144", "--stream-transport", "udp",
             "--json", str(out), "--record", str(tmp_path / "rec")]
        )  # fmt: skip
        terminal = capsys.readouterr()
    assert code == 0, terminal.err
    report = json.loads(out.read_text())
    assert report["sessions"][0]["stream"]["frames"] > 0
    assert report["config"]["sources"][0].startswith("rtsp://viewer:***@127.0.0.1:")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 3  # the report and the recording's files
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in terminal.out + terminal.err


def test_an_on_demand_playlist_plays_at_its_own_rate_and_ends_as_a_stream_does(tmp_path):
    """An HLS playlist of known length arrives as fast as it is read (240 frames in 0.1 s
    here): it is read at its own timestamps, and its end is a stream that ended."""
    import subprocess

    from stream_servers import FFMPEG

    clip = make_clip(tmp_path, seconds=2.0)
    playlist = tmp_path / "vod.m3u8"
    subprocess.run(
        [FFMPEG, "-hide_banner", "-loglevel", "error", "-i", str(clip), "-c", "copy",
         "-f", "hls", "-hls_time", "1", "-hls_list_size", "0", str(playlist)],
        check=True, timeout=60,
    )  # fmt: skip
    source = StreamSource(str(playlist), (128, 72), StreamSettings(read_timeout_s=2.0))
    heard: list[bool] = []
    source.subscribe(object(), lambda s: None, lambda s, lost, text: heard.append(lost))
    try:
        assert source.on_demand
        assert wait_for(lambda: source.status().frames >= 40, 10)
        assert source.status().recent_fps < 1.5 * CLIP_FPS  # not the decoder's speed
        assert wait_for(lambda: heard[:2] == [True, False], 20)  # it ended, and came back
    finally:
        source.close()
    assert source.status().lost_reason == "the stream ended or the connection closed"


def test_a_server_that_refuses_says_why_not_no_stream_within_5_s(clip):
    """OpenCV passes on none of FFmpeg's words; the server's own answer says why."""
    with RtspRelay(clip) as relay, pytest.raises(SourceError) as caught:  # RTP over UDP only
        StreamSource(relay.url, (128, 72), StreamSettings("tcp"))
    assert caught.value.reason == (
        "the server describes the stream but did not play it over TCP (some servers offer RTP "
        "over UDP only): try --stream-transport udp or auto"
    )
    with gst_rtsp_server() as server, pytest.raises(SourceError) as caught:
        StreamSource(server.url.replace("/cam", "/nothing"), (128, 72))
    assert caught.value.reason.startswith("the server answered 404")
    assert caught.value.reason.endswith(": no stream at this path")


def test_an_http_server_that_a_waiting_client_takes_at_once_counts_as_up(clip):
    """ffmpeg's ``-listen 1`` closes its listening socket once it accepts: a session
    already retrying the port (a restarted camera) can take it before anyone sees it
    listen. The test server's readiness must not wait for a listening socket then (it
    waited 60 s and failed a clean-clone run)."""
    import socket
    import threading

    server = http_server(clip)
    port = int(server.url.split(":")[2].split("/")[0])
    got = threading.Event()
    done = threading.Event()

    def knock() -> None:  # a client retrying every millisecond, as a reconnecting one would
        while not done.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(b"GET /live.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
                    if s.recv(64):
                        got.set()
                    done.wait(30)
            except OSError:
                time.sleep(0.001)

    thread = threading.Thread(target=knock, daemon=True)
    thread.start()
    try:
        server.start()  # returns once the server holds the port, listening or accepted
        assert server.running()
        assert got.wait(30)  # and the waiting client is served
    finally:
        done.set()
        server.stop()
        thread.join(10)
