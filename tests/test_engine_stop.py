"""stop() reaches every thread the engine started and keeps to one deadline (issue 43,
item 11): the workers of devices 1…N−1 while their backends still build, and the
capture threads of network streams that stall. Each test fails on 86228b5.
"""

from __future__ import annotations

import functools
import threading
import time

import numpy as np
import pytest

import batchscope.engine.other_devices as other_devices
import batchscope.engine.roster as roster
from batchscope.config import RunConfig
from batchscope.engine.backends import BuildCancelled, make_backend
from batchscope.engine.engine import Engine
from batchscope.engine.live_change import EngineStopped
from batchscope.engine.streams import StreamSettings, StreamSource
from contract import SMALL_EMULATED, wait_for


def _lane_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("batchscope-worker-")]


class SlowBuild:
    """make_backend for devices 1…N−1 that builds until cancelled (a long warm-up)."""

    def __init__(self) -> None:
        self.building = threading.Event()
        self.cancelled = threading.Event()

    def __call__(self, config, oom_above, cancelled):
        self.building.set()
        end = time.monotonic() + 60.0
        while time.monotonic() < end:
            if cancelled():
                self.cancelled.set()
                raise BuildCancelled()
            time.sleep(0.01)  # a warm-up run between two checks
        return make_backend(config, oom_above, cancelled)


@pytest.mark.parametrize("when", ["opening", "live change"])
def test_stop_ends_the_workers_of_devices_still_building(monkeypatch, when):
    # 86228b5: the workers OtherDevices.build made were in no list stop() reached: stop returned
    # [] at once while they went on building (5.8 s with the real model)
    slow = SlowBuild()
    monkeypatch.setattr(other_devices, "make_backend", slow)
    config = RunConfig(**SMALL_EMULATED, sessions=4, policy="all")
    engine = Engine(config.with_changes(devices=3) if when == "opening" else config)
    outcome: list[BaseException | str | None] = []

    def build() -> None:
        try:
            if when == "opening":
                engine.open()
            else:
                outcome.append(engine.apply(engine.config.with_changes(devices=3)))
        except BaseException as exc:  # the test reads it
            outcome.append(exc)

    if when == "live change":
        engine.open()
        engine.start()
    builder = threading.Thread(target=build)
    builder.start()
    assert wait_for(lambda: slow.building.is_set() or outcome, 30.0)
    assert slow.building.is_set(), outcome
    assert _lane_threads()  # the new devices' workers, building
    began = time.monotonic()
    alive = engine.stop(timeout=2.0)
    took = time.monotonic() - began
    lane_alive = [t.name for t in _lane_threads() if t.is_alive()]
    builder.join(10.0)
    assert slow.cancelled.is_set()  # the build was told to stop
    assert not lane_alive, f"still building after stop: {lane_alive}; stop said {alive}"
    assert alive == []
    assert took < 2.0 + 1.5
    if when == "opening":
        assert isinstance(outcome[0], EngineStopped)
    else:
        assert outcome == ["the engine was stopped"]
    assert engine.threads_alive() == []


class StalledCapture:
    """A capture whose first frame comes and then nothing: each read waits out the read
    timeout, as FFmpeg's does, and cannot be cut short (releasing it under a read is
    unsafe: only the thread that reads may)."""

    def __init__(self, settings: StreamSettings) -> None:
        self.read_timeout_s = settings.read_timeout_s
        self.first = True
        self.reading = threading.Event()
        self.released = threading.Event()
        self.released_reading = False

    def isOpened(self) -> bool:
        return True

    def read(self):
        if self.first:
            self.first = False
            return True, np.zeros((144, 256, 3), np.uint8)
        self.reading.set()
        time.sleep(self.read_timeout_s)  # blocked in the network read
        self.reading.clear()
        return False, None

    def get(self, prop: int) -> float:
        return 0.0

    def release(self) -> None:
        self.released_reading = self.reading.is_set()
        self.released.set()


@pytest.mark.slow
def test_stop_keeps_one_deadline_with_stalled_streams_and_names_what_still_reads(monkeypatch):
    # 86228b5: each stream's close joined for its read timeout + 0.5 s in turn, after the
    # other threads: stop(timeout=1) with two stalled streams took their read timeout
    captures: list[StalledCapture] = []

    def opener(url: str, settings: StreamSettings) -> StalledCapture:
        captures.append(StalledCapture(settings))
        return captures[-1]

    monkeypatch.setattr(roster, "StreamSource", functools.partial(StreamSource, opener=opener))
    urls = ("rtsp://127.0.0.1:1/a", "rtsp://127.0.0.1:1/b")
    engine = Engine(
        RunConfig(
            **{**SMALL_EMULATED, "sources": ("synthetic", *urls)},
            sessions=3,
            policy="all",
            stream_read_timeout_s=4.0,
        )
    )
    engine.open()
    engine.start()
    assert wait_for(lambda: all(c.reading.is_set() for c in captures))
    began = time.monotonic()
    alive = engine.stop(timeout=1.0)
    took = time.monotonic() - began
    assert took < 1.0 + 1.0, f"stop(timeout=1) took {took:.1f} s"
    # what still reads is named, by its masked URL
    assert sorted(alive) == [f"capture of {u}" for u in urls]
    # and ends by itself when its read returns, releasing its capture (never under a read)
    assert wait_for(lambda: engine.threads_alive() == [], 10.0)
    assert all(c.released.is_set() and not c.released_reading for c in captures)
