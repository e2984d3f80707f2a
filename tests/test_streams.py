"""Network streams: addresses, masking, the capture's reconnects and the feeder's rule
(a stream is never paced), on fake captures; real streams are in test_streams_live.py."""

from __future__ import annotations

import threading
import time

import cv2
import numpy as np
import pytest

from batchscope.config import ConfigError, RunConfig
from batchscope.engine.feeder import Feeder
from batchscope.engine.session import Mailboxes, Session, shown_state
from batchscope.engine.sources import SourceError, is_live_or_synthetic
from batchscope.engine.stats import served
from batchscope.engine.streams import StreamSettings, StreamSource, check_reachable
from batchscope.urls import is_stream, mask_credentials
from contract import wait_for
from stream_servers import free_port


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("rtsp://admin:pw@cam.local/live", "rtsp://admin:***@cam.local/live"),
        ("rtsp://token@cam:554/x", "rtsp://***@cam:554/x"),
        ("rtsp://u:p@ss@host/x", "rtsp://u:***@host/x"),  # an @ inside the password
        ("http://cam/mjpg?user=a&password=b&fps=5", "http://cam/mjpg?user=a&password=***&fps=5"),
        ("https://h/live.m3u8?token=abc", "https://h/live.m3u8?token=***"),
        ("rtsp://cam/live", "rtsp://cam/live"),
        ("/videos/a@b.mp4", "/videos/a@b.mp4"),
        ("S0: rtsp://a:pw@h/x failed; rtsp://b:pw2@h/y too",
         "S0: rtsp://a:***@h/x failed; rtsp://b:***@h/y too"),
    ],
)  # fmt: skip
def test_mask_credentials_hides_passwords_and_tokens(text, shown):
    assert mask_credentials(text) == shown


@pytest.mark.parametrize(
    ("spec", "stream"),
    [
        ("rtsp://cam/live", True),
        ("RTSPS://cam/live", True),
        ("http://cam/video.mjpg", True),
        ("https://cdn/clip.mp4", True),
        ("udp://@:5000", True),
        ("rtp://239.0.0.1:5004", True),
        ("/data/playlist.m3u8", True),
        ("ftp://host/clip.mp4", False),
        ("clip.mp4", False),
        ("camera:0", False),
        ("synthetic", False),
    ],
)
def test_which_specs_are_streams(spec, stream):
    assert is_stream(spec) is stream
    assert is_live_or_synthetic(spec) is (stream or spec in ("camera:0", "synthetic"))


def test_the_report_config_never_carries_a_password():
    config = RunConfig(sources=("rtsp://admin:hunter2@cam/live", "synthetic"))
    assert config.to_json()["sources"] == ["rtsp://admin:***@cam/live", "synthetic"]
    assert config.sources[0] == "rtsp://admin:hunter2@cam/live"  # it still connects with it


def test_a_source_error_names_the_url_masked():
    error = SourceError("rtsp://admin:hunter2@cam/live", "connection refused")
    assert str(error) == "rtsp://admin:***@cam/live: connection refused"
    assert error.spec == "rtsp://admin:hunter2@cam/live"


def test_stream_settings_are_validated_knobs():
    with pytest.raises(ConfigError, match="stream_transport"):
        RunConfig(stream_transport="quic")
    with pytest.raises(ConfigError, match="stream_timeout_s"):
        RunConfig(stream_timeout_s=0)
    settings = StreamSettings.of(RunConfig(stream_transport="udp", stream_timeout_s=2.5))
    assert settings.ffmpeg_options("rtsp://h/x") == "rtsp_transport;udp"
    assert settings.ffmpeg_options("http://h/x") == ""  # only RTSP has a transport
    assert StreamSettings(transport="auto").ffmpeg_options("rtsp://h/x") == ""


def test_check_reachable_tells_refused_from_unknown_host():
    port = free_port()  # free: nothing listens there
    assert check_reachable(f"rtsp://127.0.0.1:{port}/x", 2.0) == (
        f"connection refused: nothing listens on 127.0.0.1:{port}"
    )
    assert "unknown host" in (check_reachable("rtsp://no-such-host.invalid/x", 2.0) or "")
    assert check_reachable("udp://127.0.0.1:5000", 2.0) is None  # no connection to try


class FakeStream:
    """A capture whose frames the test hands out one at a time; ``drop()`` ends it."""

    def __init__(self, network: FakeNetwork, size=(64, 48), fps=25.0) -> None:
        self.network = network
        self.size, self.fps = size, fps
        self.frames: list[np.ndarray] = []
        self.cond = threading.Condition()
        self.ended = False
        self.released = False
        self.pos_ms = 0.0
        self.first = np.zeros((size[1], size[0], 3), np.uint8)

    def isOpened(self) -> bool:
        return True

    def read(self):
        if self.first is not None:
            first, self.first = self.first, None
            return True, first
        with self.cond:  # as a real read, bounded: by the network's end in the tests
            self.cond.wait_for(
                lambda: self.frames or self.ended or self.released or self.network.closed,
                timeout=5,
            )
            if self.frames:
                self.pos_ms += 1000 / self.fps
                return True, self.frames.pop(0)
            return False, None

    def get(self, prop: int) -> float:
        return {cv2.CAP_PROP_FPS: self.fps, cv2.CAP_PROP_POS_MSEC: self.pos_ms}.get(prop, 0.0)

    def release(self) -> None:
        with self.cond:
            self.released = True
            self.cond.notify_all()

    def push(self, value: int = 128) -> None:
        with self.cond:
            self.frames.append(np.full((self.size[1], self.size[0], 3), value, np.uint8))
            self.cond.notify_all()

    def drop(self) -> None:
        with self.cond:
            self.ended = True
            self.cond.notify_all()


class FakeNetwork:
    """Opens FakeStreams while ``up``; each open is recorded."""

    def __init__(self) -> None:
        self.up = True
        self.closed = False
        self.opened: list[FakeStream] = []

    def __call__(self, url: str, settings: StreamSettings) -> FakeStream:
        stream = FakeStream(self)
        if not self.up:
            stream.isOpened = lambda: False  # type: ignore[method-assign]
        self.opened.append(stream)
        return stream

    @property
    def current(self) -> FakeStream:
        return self.opened[-1]

    def close(self, source: StreamSource) -> None:
        """Close ``source`` with its reads ended (a real read ends within its timeout)."""
        self.closed = True
        for stream in self.opened:
            with stream.cond:
                stream.cond.notify_all()
        source.close()


URL = "udp://127.0.0.1:5000"  # no connection check: the fake network answers


def fake_source(network: FakeNetwork, **kw) -> StreamSource:
    return StreamSource(URL, (32, 24), StreamSettings(), opener=network, backoff=(0.01,), **kw)


def test_a_lost_stream_reconnects_with_attempts_counted_and_says_lost_and_back():
    network = FakeNetwork()
    source = fake_source(network)
    heard: list[tuple[bool, str]] = []
    source.subscribe(object(), lambda s: None, lambda s, lost, text: heard.append((lost, text)))
    try:
        assert source.trouble is None and source.paced is False and source.live
        network.up = False
        network.current.drop()  # the stream ends: the capture's read fails
        assert wait_for(lambda: (source.trouble or "").startswith("reconnecting ("))
        assert wait_for(lambda: len(network.opened) >= 4)  # it keeps trying
        assert heard[0][0] is True and "stream lost on udp://127.0.0.1:5000" in heard[0][1]
        attempt = int(source.trouble.split("(")[1].rstrip(")"))
        assert attempt >= 2
        assert "no video stream opened" in (source.status().last_error or "")
        assert (
            "reconnecting (" in source.describe() and "lost: the stream ended" in source.describe()
        )
        network.up = True
        assert wait_for(lambda: source.trouble is None)
        assert wait_for(lambda: len(heard) == 2)
        assert heard[1][0] is False and "stream back on" in heard[1][1]
        status = source.status()
        assert status.reconnects == 1 and status.down_s > 0
        assert status.lost_reason == "the stream ended or the connection closed"
        assert status.last_error is None  # the attempts' failures are over
        assert all(s.released for s in network.opened[:-1])  # every lost capture let go
    finally:
        network.close(source)
    assert not source.alive


def test_frames_arrive_to_listeners_and_the_latest_is_kept():
    network = FakeNetwork()
    source = fake_source(network)
    arrived = []
    source.subscribe(object(), lambda s: arrived.append(int(s.frame(0)[0, 0, 0])), lambda *a: None)
    try:
        for value in (10, 20, 30):
            network.current.push(value)
        assert wait_for(lambda: len(arrived) == 3)
        assert int(source.frame(0)[0, 0, 0]) == 30
        status = source.status()
        assert status.frames == 4 and status.own_fps == 25.0  # the first frame at open too
        assert status.age_ms is None  # no RTCP wall clock in this stream
    finally:
        network.close(source)


def test_a_stream_that_never_gives_a_frame_fails_with_one_line():
    class Silent(FakeStream):
        def read(self):
            return False, None

    with pytest.raises(SourceError, match=r"connected, but no frame arrived within 5 s"):
        StreamSource(URL, (32, 24), opener=lambda url, settings: Silent(FakeNetwork()))


def test_the_feeder_publishes_a_stream_as_it_arrives_never_paced():
    network = FakeNetwork()
    source = fake_source(network)
    boxes = Mailboxes()
    published: list[int] = []
    real_publish = boxes.publish

    def publish(window):
        published.append(window.session)
        return real_publish(window)

    boxes.publish = publish  # type: ignore[method-assign]
    feeder = Feeder(boxes, lambda m: None)
    sessions = [Session(0, source), Session(1, source)]
    feeder.set_sessions(sessions, fps=1000.0)  # a pace it must not follow
    feeder.start()
    try:
        assert wait_for(lambda: feeder.alive)
        for _ in range(2):  # the window needs 3 frames: 2 arrivals more
            network.current.push()
            assert wait_for(lambda: sessions[0].seq == sessions[1].seq and sessions[0].seq)
        time.sleep(0.05)
        assert published == []  # nothing until a frame arrives: no pace of its own
        for k in range(1, 4):
            network.current.push()
            assert wait_for(lambda k=k: len(published) == 2 * k)
        assert sorted(published) == [0, 0, 0, 1, 1, 1]
        feeder.scale(0, 0.0)  # a stall holds session 0, not session 1
        network.current.push()
        assert wait_for(lambda: len(published) == 7)
        assert published[-1] == 1
    finally:
        feeder.stop(1.0)
        network.close(source)


def test_a_reconnecting_session_shows_it_and_counts_as_served():
    network = FakeNetwork()
    source = fake_source(network)
    session = Session(0, source)
    try:
        assert shown_state(session, stalled=False) == "running"
        network.up = False
        network.current.drop()
        assert wait_for(lambda: shown_state(session, False).startswith("reconnecting ("))
        assert served(shown_state(session, False))  # its client sends nothing, as stalled
        assert shown_state(session, stalled=True) == "stalled"
    finally:
        network.close(source)


def test_the_terminal_says_each_streams_rate_jitter_age_and_reconnects_once():
    from batchscope.engine.report.text import stream_lines

    stream = {"state": "reconnecting (2)", "own_fps": 25.0, "arrival_fps": 24.6,
              "jitter_ms": 3.14, "age_ms": 120.0, "frames": 400, "reconnects": 1,
              "down_s": 4.2, "on_demand": False}  # fmt: skip
    report = {
        "sessions": [
            {"source": "rtsp://u:***@cam/live", "stream": stream},
            {"source": "synthetic"},
            {"source": "rtsp://u:***@cam/live", "stream": stream},  # the same stream again
        ]
    }
    assert stream_lines(report) == [
        "  stream rtsp://u:***@cam/live: 24.6 fps arriving (25 declared), jitter 3.1 ms, "
        "frame age at arrival 120.0 ms, 1 reconnect (4.2 s down), now reconnecting (2)"
    ]


def test_an_hls_burst_is_held_to_its_timestamps_not_dropped():
    """Live HLS hands a segment's frames over within a millisecond; read as they came, the
    latest-only rule kept about 1 frame in 5 (5.7 of 30 fps in benchmarks/stream_kinds)."""
    network = FakeNetwork()
    source = StreamSource(
        "http://127.0.0.1:8080/live/index.m3u8", (32, 24), opener=network, backoff=(0.01,)
    )
    times: list[float] = []
    source.subscribe(object(), lambda s: times.append(time.perf_counter()), lambda *a: None)
    try:
        assert source.held and not source.on_demand  # a live playlist, held nonetheless
        for _ in range(11):  # one burst: 11 frames 40 ms apart by their timestamps
            network.current.push()
        assert wait_for(lambda: len(times) == 11)
    finally:
        network.close(source)
    # the first sets the clock; the other 10 come at their times: 0.4 s after it at least
    assert times[-1] - times[0] >= 0.35


def test_an_rtcp_clock_counts_for_rtsp_only_and_a_skewed_one_not_at_all():
    class Clocked(FakeStream):
        start_us = 0.0

        def get(self, prop):
            if prop == cv2.CAP_PROP_STREAM_OPEN_TIME_USEC:
                return self.start_us
            return super().get(prop)

    def age_of(url: str, start_s: float) -> float | None:
        network = FakeNetwork()

        def opener(u, settings):
            stream = Clocked(network)
            stream.start_us = start_s * 1e6
            network.opened.append(stream)
            return stream

        source = StreamSource(url, (32, 24), opener=opener, wall=lambda: 1000.0)
        try:
            network.current.push()
            assert wait_for(lambda: source.status().frames == 2)
            return source.status().age_ms
        finally:
            network.close(source)

    # the frame at 0.04 s of a stream whose time 0 was at wall 999.9: 60 ms old
    assert age_of("rtsp://127.0.0.1:1/cam", 999.9) == pytest.approx(60.0)
    assert age_of("udp://127.0.0.1:5000", 999.9) is None  # RTP's MPEG-TS times: no
    assert age_of("rtsp://127.0.0.1:1/cam", 1004.5) is None  # -4.5 s: clocks disagree


def test_mjpeg_over_http_has_no_declared_rate_and_jitter_against_its_own_gaps():
    """FFmpeg stamps MJPEG over HTTP at an assumed 25 fps (40 ms) whatever arrives: frames
    arriving evenly 30 ms apart read as 7 ms of jitter against those stamps."""

    class Mjpeg(FakeStream):
        def get(self, prop):
            if prop == cv2.CAP_PROP_FOURCC:
                return float(cv2.VideoWriter_fourcc(*"MJPG"))
            return super().get(prop)

    def jitter(kind: type[FakeStream]) -> tuple[float, float | None]:
        network, now = FakeNetwork(), [0.0]

        def opener(url, settings):
            network.opened.append(kind(network))
            return network.current

        source = StreamSource(
            "http://127.0.0.1:8080/video", (32, 24), opener=opener, clock=lambda: now[0]
        )
        try:
            for k in range(1, 21):  # evenly 30 ms apart on the source's clock
                now[0] = 0.03 * k
                network.current.push()
                assert wait_for(lambda k=k: source.status().frames == k + 1)
            status = source.status()
            return status.jitter_ms, status.own_fps
        finally:
            network.close(source)

    assert jitter(Mjpeg) == (pytest.approx(0.0, abs=1e-6), None)
    stamped, own = jitter(FakeStream)  # a stream whose stamps are its own: 40 ms apart
    assert own == 25.0 and stamped > 5.0


def test_an_experiment_with_a_password_in_a_url_reports_it_masked(tmp_path, capsys):
    from batchscope.cli import main

    exp = tmp_path / "cams.toml"
    exp.write_text(
        'name = "cams"\ncaption = "a camera joins"\nduration = 4\n'
        '[base]\nsources = ["synthetic"]\nresolution = "256x144"\n'
        '[[step]]\nat = 2\nsources = ["synthetic", "rtsp://u:hunter2@127.0.0.1:9/x"]\n'
        'caption = "camera rtsp://u:hunter2@127.0.0.1:9/x joins"\n'
    )
    out = tmp_path / "sim.json"
    assert main(["simulate", "--experiment", str(exp), "--json", str(out)]) == 0
    printed = capsys.readouterr()
    text = out.read_text()
    assert "hunter2" not in text + printed.out + printed.err
    assert "rtsp://u:***@127.0.0.1:9/x joins" in text  # the caption, and the file's text
    assert '"rtsp://u:***@127.0.0.1:9/x"' in text  # the step's change of sources


def test_every_line_a_command_prints_is_masked():
    import io

    from batchscope.cli import MaskedText

    buffer = io.StringIO()
    masked = MaskedText(buffer)
    print("step 1/1 at 2 s: camera rtsp://u:hunter2@cam/x joins", file=masked)
    assert buffer.getvalue() == "step 1/1 at 2 s: camera rtsp://u:***@cam/x joins\n"
    assert masked.getvalue() == buffer.getvalue()  # the rest is the stream's own


def test_the_arrival_rate_leaves_out_the_burst_a_connection_starts_with():
    """FFmpeg hands out what it read while probing the stream at once: counted, a 30 fps
    camera read 36-42 fps after a (re)connect."""
    network, now = FakeNetwork(), [0.0]
    source = StreamSource(URL, (32, 24), opener=network, clock=lambda: now[0])
    try:
        frames = 1
        for _ in range(12):  # the probe's frames, all at once
            now[0] = 0.001
            network.current.push()
            frames += 1
            assert wait_for(lambda f=frames: source.status().frames == f)
        for k in range(1, 61):  # then 2 s at 30 fps
            now[0] = 1.0 + k / 30
            network.current.push()
            frames += 1
            assert wait_for(lambda f=frames: source.status().frames == f)
        status = source.status()
    finally:
        network.close(source)
    assert status.arrival_fps == pytest.approx(30.0, rel=0.03)
