"""Faults mid-run: each is reported (event, session state) and the rest keeps running."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine import sources
from batchscope.engine.engine import Engine
from batchscope.paths import sample_videos
from contract import wait_for


def delivered(engine: Engine) -> dict[int, int]:
    return {s.id: s.delivered for s in engine.snapshot().sessions}


@pytest.fixture
def engine_factory():
    made: list[Engine] = []

    def make(**cfg) -> Engine:
        base = dict(resolution=(256, 144), precision="fp16", sessions=2, policy="all")
        engine = Engine(RunConfig(**{**base, **cfg}))
        engine.open()
        engine.start()
        made.append(engine)
        return engine

    yield make
    for e in made:
        # a real model's batch cannot be cut short: on a loaded CPU one may outlast
        # stop()'s timeout, which then names the worker; it ends with that batch
        e.stop()
        assert wait_for(lambda e=e: e.threads_alive() == [])


def test_video_deleted_mid_run_keeps_playing_from_cache_then_errors_on_reopen(
    engine_factory, tmp_path
):
    clip = tmp_path / "clip.mp4"
    shutil.copy(sample_videos()[0], clip)
    e = engine_factory(sources=(str(clip), "synthetic"), sessions=2, skip_bad_sources=True)
    assert wait_for(lambda: min(delivered(e).values()) > 5)
    clip.unlink()  # decoded once into the cache: the session keeps playing
    before = delivered(e)
    assert wait_for(lambda: all(delivered(e)[s] > before[s] + 5 for s in before))
    # a resolution change re-decodes: the deleted file cannot be, so the change is
    # refused with its reason and the run goes on exactly as it was
    error = e.apply(e.config.with_changes(resolution=(512, 288)))
    assert error is not None and "clip.mp4: no such file" in error
    assert any("clip.mp4: no such file" in ev.message for ev in e.events() if ev.kind == "error")
    assert e.config.resolution == e.backend.resolution == (256, 144)
    before = delivered(e)
    assert wait_for(lambda: all(delivered(e)[s] > before[s] + 5 for s in before))
    assert [s.state for s in e.snapshot().sessions] == ["running", "running"]


def test_truncated_video_is_reported_with_its_reason(engine_factory, tmp_path):
    clip = tmp_path / "cut.mp4"
    clip.write_bytes(sample_videos()[0].read_bytes()[:2000])
    e = engine_factory(sources=(str(clip), "synthetic"), skip_bad_sources=True)
    assert wait_for(lambda: delivered(e)[1] > 5)
    s0 = e.snapshot().sessions[0]
    assert s0.state == "error" and s0.error


class FakeCapture:
    """A camera that gives 20 frames and then stops, like one unplugged mid-run."""

    def __init__(self, index: int) -> None:
        self.reads = 0

    def isOpened(self) -> bool:
        return True

    def read(self):
        self.reads += 1
        if self.reads > 20:
            time.sleep(0.01)
            return False, None
        time.sleep(0.02)
        return True, np.full((360, 640, 3), 90, np.uint8)

    def get(self, prop: int) -> float:
        return 30.0

    def release(self) -> None:
        pass


def test_camera_that_disappears_is_reported_and_others_go_on(engine_factory, monkeypatch):
    monkeypatch.setattr(sources, "camera_present", lambda index: True)
    monkeypatch.setattr(sources.cv2, "VideoCapture", FakeCapture)
    e = engine_factory(sources=("camera:0", "synthetic"), skip_bad_sources=True)
    assert wait_for(lambda: e.snapshot().sessions[0].state == "error")
    snap = e.snapshot()
    assert "camera stopped delivering frames" in snap.sessions[0].error
    assert any(ev.kind == "error" and "session 0" in ev.message for ev in e.events())
    n1 = snap.sessions[1].delivered
    assert wait_for(lambda: delivered(e)[1] > n1 + 5)


def test_checkpoint_swapped_for_garbage_is_refused_and_the_old_model_keeps_running(
    engine_factory, tmp_path
):
    garbage = tmp_path / "blurball_best"
    garbage.write_bytes(b"not a checkpoint at all" * 50)
    e = engine_factory(
        sources=("synthetic",),
        backend="torch",
        device="cpu",
        profile=None,
        precision="fp32",
        resolution=(128, 72),
    )
    assert wait_for(lambda: sum(delivered(e).values()) > 2, timeout=30)
    done: list[str | None] = []
    e.apply(e.config.with_changes(checkpoint=str(garbage)), on_done=done.append)
    assert wait_for(lambda: done, timeout=30)
    assert "blurball_best" in done[0] and "not a torch checkpoint" in done[0]
    assert e.config.checkpoint is None  # reverted
    assert e.snapshot().weights == "demo weights (synthetic scene)"
    n = sum(delivered(e).values())
    assert wait_for(lambda: sum(delivered(e).values()) > n + 2, timeout=30)
