"""A live change of the stream settings reaches the open streams (issue 43, item 12).

On 86228b5 a change of ``stream_transport`` or the stream timeouts was reported applied
and never reached the streams open (the config said udp / 1.0 s, the stream ran tcp /
5.0 s). Now the streams whose settings change open again under the new ones, as a
transaction: a stream that would not open leaves the run exactly as it was. No server:
the captures are fakes that record what they were opened with.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

import batchscope.engine.roster as roster
from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.streams import StreamSettings, StreamSource
from contract import SMALL_EMULATED, wait_for

URL = "rtsp://127.0.0.1:1/cam"


class PacedCapture:
    """A capture that gives a frame every 1/30 s until released; it keeps its settings."""

    def __init__(self, settings: StreamSettings) -> None:
        self.settings = settings
        self.released = threading.Event()

    def isOpened(self) -> bool:
        return True

    def read(self):
        if self.released.wait(1 / 30):
            return False, None
        return True, np.zeros((144, 256, 3), np.uint8)

    def get(self, prop: int) -> float:
        return 0.0

    def release(self) -> None:
        self.released.set()


class Network:
    """Opens PacedCaptures, except with the settings it refuses."""

    def __init__(self) -> None:
        self.opened: list[PacedCapture] = []
        self.refuse: str | None = None  # a transport its server does not offer

    def __call__(self, url: str, settings: StreamSettings) -> PacedCapture:
        capture = PacedCapture(settings)
        if settings.transport == self.refuse:
            capture.isOpened = lambda: False  # type: ignore[method-assign]
        self.opened.append(capture)
        return capture


def _engine(monkeypatch) -> tuple[Engine, Network]:
    network = Network()
    monkeypatch.setattr(roster, "StreamSource", functools.partial(StreamSource, opener=network))
    engine = Engine(
        RunConfig(
            **{**SMALL_EMULATED, "sources": ("synthetic", URL)},
            sessions=2,
            policy="all",
        )
    )
    engine.open()
    engine.start()
    assert wait_for(lambda: min(s.delivered for s in engine.snapshot().sessions) > 5)
    return engine, network


def _stream(engine: Engine) -> StreamSource:
    source = engine.roster.slots[1].source
    assert isinstance(source, StreamSource)
    return source


def test_a_stream_settings_change_reopens_the_streams_with_them(monkeypatch):
    engine, network = _engine(monkeypatch)
    try:
        synthetic, old = engine.roster.slots[0].source, _stream(engine)
        assert old.settings == StreamSettings("tcp", 5.0, 5.0)
        new_config = engine.config.with_changes(stream_transport="udp", stream_timeout_s=1.0)
        assert engine.apply(new_config) is None
        stream = _stream(engine)
        # the stream plays on a connection opened with the new settings
        assert stream is not old and stream.settings == StreamSettings("udp", 1.0, 5.0)
        assert network.opened[-1].settings.ffmpeg_options(URL) == "rtsp_transport;udp"
        assert network.opened[-1].settings.connect_timeout_s == 1.0
        # the old one closed, the file-like source kept as it was (not opened again)
        assert wait_for(lambda: not old.alive) and network.opened[0].released.is_set()
        assert engine.roster.slots[0].source is synthetic
        assert engine.config.stream_transport == "udp"
        # a segment says so, and the stream's session delivers again
        assert engine.segments.all()[-1].changes["stream_transport"] == "udp"
        n = engine.snapshot().sessions[1].delivered
        assert wait_for(lambda: engine.snapshot().sessions[1].delivered > n + 5)
    finally:
        assert engine.stop(5.0) == []


def test_a_stream_that_would_not_open_with_new_settings_leaves_the_run_as_it_was(monkeypatch):
    engine, network = _engine(monkeypatch)
    try:
        network.refuse = "udp"
        old, config = _stream(engine), engine.config
        segments = len(engine.segments.all())
        error = engine.apply(config.with_changes(stream_transport="udp"))
        assert error is not None and URL in error
        # nothing changed: the config, the stream (its connection), the segments
        assert engine.config == config
        assert _stream(engine) is old and old.alive and not network.opened[0].released.is_set()
        assert all(c.released.is_set() for c in network.opened[1:])  # the try closed
        assert len(engine.segments.all()) == segments
        assert any(e.kind == "error" and "not applied" in e.message for e in engine.events())
        n = engine.snapshot().sessions[1].delivered
        assert wait_for(lambda: engine.snapshot().sessions[1].delivered > n + 5)
    finally:
        assert engine.stop(5.0) == []
