"""Live changes are transactions, and every thread stops from any state.

Each test here reproduces a defect of the first version (issue "One path for
every setting…") on the emulated backend and fails on that code.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine import roster as roster_module
from batchscope.engine import run_devices, sources
from batchscope.engine.engine import Engine, EngineStopped
from batchscope.engine.feeder import Feeder
from batchscope.engine.roster import Roster, SourceSlot
from batchscope.engine.session import Mailboxes
from batchscope.engine.sources import CachedSource, CameraSource
from contract import SMALL_EMULATED, wait_for

SMALL = SMALL_EMULATED
ENGINE_THREADS = {"batchscope-worker", "batchscope-feeder", "batchscope-monitor"}


def running(**cfg) -> Engine:
    engine = Engine(RunConfig(**{**SMALL, **cfg}))
    engine.open()
    engine.start()
    assert wait_for(lambda: delivered(engine) > 10)
    return engine


def delivered(engine: Engine) -> int:
    return sum(s.delivered for s in engine.snapshot().sessions)


def assert_stops_promptly(engine: Engine) -> None:
    """Every thread ended within ``stop``'s timeout: stop joins each for what is left of it,
    so one still alive when it returns overran it (the call's duration measures the machine)."""
    engine.stop(timeout=2.0)
    assert engine.threads_alive() == []
    assert not {t.name for t in threading.enumerate()} & ENGINE_THREADS


@pytest.fixture
def engines():
    made: list[Engine] = []
    yield made
    for e in made:
        e.stop()


# -- 1. a failed live change leaves the run exactly as it was ------------------------------


def test_failed_resolution_change_changes_nothing_and_keeps_delivering(engines):
    e = running(sessions=3)
    engines.append(e)
    slots_before = e.sources
    error = e.apply(e.config.with_changes(resolution=(1024, 576)))  # no curve at that size
    assert error is not None and "1024x576" in error
    assert e.config.resolution == (256, 144)
    assert e.backend.resolution == (256, 144)
    assert e.sources == slots_before  # the very same opened sources
    assert all(s.source.resolution == (256, 144) for s in e.sources)
    assert [ev.kind for ev in e.events()][-1] == "error"
    assert "not applied" in e.events()[-1].message
    n0 = delivered(e)
    assert wait_for(lambda: delivered(e) > n0 + 60)  # 3 sessions × 30 fps: ~1 s
    frames = [s.latest.frame.shape for s in e.snapshot().sessions if s.latest is not None]
    assert frames and set(frames) == {(144, 256, 3)}


def test_failed_change_of_several_fields_applies_none_of_them(engines):
    e = running(sessions=2, policy="all")
    engines.append(e)
    before = e.config
    policy_before = e.worker.policy
    error = e.apply(before.with_changes(policy="oldest", sessions=5, resolution=(1024, 576)))
    assert error is not None
    assert e.config == before
    assert e.worker.policy is policy_before
    assert len(e.snapshot().sessions) == 2


def test_successful_resolution_change_takes_effect_with_new_frames(engines):
    e = running(sessions=2)
    engines.append(e)
    assert e.apply(e.config.with_changes(resolution=(512, 288))) is None
    assert e.backend.resolution == (512, 288)
    assert all(s.source.resolution == (512, 288) for s in e.sources)
    assert wait_for(
        lambda: any(
            s.latest is not None and s.latest.frame.shape == (288, 512, 3)
            for s in e.snapshot().sessions
        )
    )
    assert "resolution 256×144 → 512×288" in e.events()[-1].message


# -- 2. every thread stops within 2 s from any state ----------------------------------------


def _slow_open(monkeypatch) -> threading.Event:
    """Make opening a source take until it is cancelled (a very long file); returns 'entered'."""
    entered = threading.Event()

    def slow(spec, resolution, cancel=None, budget_bytes=None, fit=None, progress=None, **run):
        entered.set()
        while not cancel.wait(0.01):
            pass
        raise sources.OpenCancelled()

    monkeypatch.setattr(roster_module, "open_source", slow)
    return entered


def _open_in_thread(e: Engine) -> tuple[threading.Thread, list[BaseException | None]]:
    outcome: list[BaseException | None] = []

    def opening() -> None:
        try:
            e.open()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=opening)
    t.start()
    return t, outcome


def test_stop_while_opening_sources_ends_every_thread(monkeypatch):
    entered = _slow_open(monkeypatch)
    e = Engine(RunConfig(**SMALL))
    t, outcome = _open_in_thread(e)
    assert entered.wait(5)
    assert_stops_promptly(e)
    t.join(10.0)  # opening gives up once stopped
    assert not t.is_alive()
    assert isinstance(outcome[0], EngineStopped)


def test_stop_while_building_a_backend_ends_every_thread(monkeypatch):
    building = threading.Event()
    real = run_devices.make_backend

    def slow_build(config, oom_above=None, cancelled=lambda: False, said=None):
        building.set()
        while not cancelled():
            time.sleep(0.01)
        return real(config, oom_above)

    monkeypatch.setattr(run_devices, "make_backend", slow_build)
    e = Engine(RunConfig(**SMALL))
    t, outcome = _open_in_thread(e)
    assert building.wait(5)
    assert_stops_promptly(e)
    t.join(10.0)  # opening gives up once stopped
    assert not t.is_alive()
    assert isinstance(outcome[0], EngineStopped)


def test_stop_while_re_decoding_for_a_live_change(monkeypatch, engines):
    e = running()
    entered = _slow_open(monkeypatch)
    result: list[str | None] = []
    t = threading.Thread(
        target=lambda: result.append(e.apply(e.config.with_changes(resolution=(512, 288))))
    )
    t.start()
    assert entered.wait(5)
    assert_stops_promptly(e)
    t.join(10.0)
    assert result == ["the engine was stopped"]


@pytest.mark.parametrize("state", ["running", "paused", "recording"])
def test_stop_from_each_running_state(state, tmp_path):
    e = running(sessions=2)
    if state == "paused":
        e.set_paused(True)
        assert e.paused
    if state == "recording":
        e.start_recording(tmp_path / "rec")
        assert e.threads_alive() == ["feeder", "monitor", "worker", "recorder"]
    assert_stops_promptly(e)
    if state == "recording":
        assert (tmp_path / "rec" / "report.json").is_file()


def test_an_engine_never_opened_stops_at_once():
    assert_stops_promptly(Engine(RunConfig(**SMALL)))


# -- 4. changing a policy knob retunes the running policy -----------------------------------


def test_moving_the_objective_keeps_the_adaptive_cap(engines):
    e = running(sessions=8, policy="adaptive", slo_ms=1000.0, fps=60.0)
    engines.append(e)
    policy = e.worker.policy
    assert wait_for(lambda: policy.cap >= 4)
    cap = policy.cap
    assert e.apply(e.config.with_changes(slo_ms=900.0)) is None
    assert e.worker.policy is policy  # the same object: nothing rebuilt
    assert policy.slo_ms == 900.0
    assert policy.cap >= cap - 1  # the learnt cap stays (a rebuild started over at 1)


def test_changing_max_batch_retunes_instead_of_restarting(engines):
    e = running(sessions=6, policy="all", max_batch=None, fps=60.0)
    engines.append(e)
    policy = e.worker.policy
    assert e.apply(e.config.with_changes(max_batch=2)) is None
    assert e.worker.policy is policy and policy.max_batch == 2
    e.reset_stats(announce=False)
    assert wait_for(lambda: sum(e.report()["overall"]["batch_sizes"].values()) > 30)
    assert {int(k) for k in e.report()["overall"]["batch_sizes"]} <= {1, 2}


def test_a_new_policy_kind_builds_a_new_policy(engines):
    e = running(policy="all")
    engines.append(e)
    old = e.worker.policy
    assert e.apply(e.config.with_changes(policy="round-robin")) is None
    assert e.worker.policy is not old and e.worker.policy.name == "round-robin"


# -- 6. the camera loop survives a failing frame --------------------------------------------


class FlakyCapture:
    """A camera whose second read gives a frame OpenCV cannot convert, then good ones."""

    def __init__(self) -> None:
        self.reads = 0
        self.released = False

    def isOpened(self) -> bool:
        return True

    def read(self):
        self.reads += 1
        if self.reads == 2:
            return True, np.zeros((0, 0), np.uint8)  # empty: cv2.resize raises
        value = min(255, self.reads)
        time.sleep(0.005)
        return True, np.full((72, 128, 3), value, np.uint8)

    def get(self, prop):
        return 30.0

    def release(self) -> None:
        self.released = True


def test_camera_loop_reports_a_failing_frame_and_goes_on():
    cap = FlakyCapture()
    cam = CameraSource(0, (128, 72), capture=cap)
    try:
        assert wait_for(lambda: cap.reads > 5)
        assert cam.alive  # the failing conversion did not end the capture thread
        assert cam.error is None
        assert cam.frame(0)[0, 0, 0] > 2  # a frame read after the failure
    finally:
        cam.close()
    assert not cam.alive and cap.released


def test_camera_error_is_on_the_source_until_it_recovers():
    cap = FlakyCapture()
    seen: list[str | None] = []
    cam = CameraSource(0, (128, 72), capture=cap)
    try:
        assert wait_for(lambda: seen.append(cam.error) or cap.reads > 5)
    finally:
        cam.close()
    # the bad frame was reported (and cleared by the next good one), or passed between polls
    assert all(err is None or "camera frame failed" in err for err in seen)


# -- 7. a retired session publishes nothing after its mailbox was emptied --------------------


class GatedSource(CachedSource):
    """Frames on demand: ``frame`` waits for the gate once armed (a slow decode)."""

    def __init__(self) -> None:
        super().__init__("gated", "gated", np.zeros((4, 72, 128, 3), np.uint8), 30.0, (128, 72))
        self.armed = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def frame(self, index: int) -> np.ndarray:
        if self.armed and not self.gate.is_set():
            self.entered.set()
            self.gate.wait(5)
        return super().frame(index)


def test_retired_session_has_no_window_left_in_its_mailbox():
    boxes = Mailboxes()
    feeder = Feeder(boxes, lambda message: None)
    roster = Roster(boxes, feeder)
    source = GatedSource()
    roster.replace_sources([SourceSlot("gated", source)])
    roster.sync(1, 200.0)
    feeder.start()
    try:
        assert wait_for(lambda: any(w.session == 0 for w in boxes.waiting()))
        source.armed = True  # the feeder is now inside frame() for session 0
        assert source.entered.wait(5)
        retire = threading.Thread(target=roster.sync, args=(0, 200.0))
        retire.start()
        retire.join(0.5)  # the old order dropped the mailbox here, before the publish
        source.gate.set()
        retire.join(5)
        assert not retire.is_alive()
        assert [w.session for w in boxes.waiting()] == []
    finally:
        feeder.stop()


def test_the_real_model_build_stops_between_warm_up_runs():
    from batchscope.engine.backends import BuildCancelled, TorchBackend

    asked = []

    def cancelled() -> bool:
        asked.append(True)
        return len(asked) > 1  # let one warm-up run through, then stop

    with pytest.raises(BuildCancelled):
        TorchBackend("cpu", "fp32", (128, 72), cancelled=cancelled)
    assert len(asked) == 2


# -- 3. one definition of the fleet's fps figures ---------------------------------------------


def test_report_and_headline_agree_when_a_source_is_bad(engines, tmp_path):
    from batchscope.ui.plots.headline import headline_numbers

    bad = tmp_path / "notes.mp4"
    bad.write_text("this is not a video")
    e = Engine(
        RunConfig(
            **{**SMALL, "sources": ("synthetic", str(bad))}, sessions=4, skip_bad_sources=True
        )
    )
    e.open()
    e.start()
    engines.append(e)
    e.reset_stats(announce=False)
    assert wait_for(lambda: min(s.fps for s in e.snapshot().sessions if s.id % 2 == 0) >= 25)
    assert wait_for(lambda: e.report()["sessions"][0]["delivered"] >= 30)
    report = e.report()
    errored = [s for s in report["sessions"] if s.get("state") == "error"]
    assert [s["id"] for s in errored] == [1, 3] and all(s["error"] for s in errored)
    # sessions in error are listed with their error and left out of the fps figures
    assert report["overall"]["min_fps"] > 20
    assert report["overall"]["jain"] > 0.95
    snap = e.snapshot()
    shown = headline_numbers(snap)
    served = [s.fps for s in snap.sessions if s.state == "running"]
    assert shown["min_fps"] == f"{min(served):.1f}"
    assert float(shown["jain"]) > 0.95


def test_a_closed_segment_keeps_its_own_latencies(engines):
    e = running(sessions=2, policy="oldest")
    engines.append(e)
    assert wait_for(lambda: e.report()["segments"][0]["measured_s"] > 1.2)
    assert e.apply(e.config.with_changes(sessions=6, policy="all")) is None
    assert wait_for(lambda: not e.snapshot().settling and e.snapshot().recent_latency_ms[5].size)
    first = e.snapshot("segment", segment=0)
    assert first.segment.index == 0 and sorted(first.recent_latency_ms) == list(range(6))
    assert first.recent_latency_ms[0].size > 10
    assert first.recent_latency_ms[5].size == 0  # session 5 did not exist in segment 0
    report = e.report()["segments"][0]
    served = first.recent_latency_ms[0].size + first.recent_latency_ms[1].size
    assert served == sum(s["delivered"] for s in report["sessions"])
    with pytest.raises(ValueError, match="segment 9"):
        e.snapshot("segment", segment=9)
