"""Faults on cue: each starts now, opens a segment, and ends by itself."""

from __future__ import annotations

import pytest

from batchscope.engine.engine import Engine
from batchscope.experiment import ExperimentError, Fault, parse_experiment
from contract import running_engine, wait_for


@pytest.fixture
def engine():
    e = running_engine(sessions=3, policy="all")
    yield e
    e.stop()
    assert e.threads_alive() == []


def delivered(e: Engine, sid: int) -> int:
    return e.snapshot().sessions[sid].delivered


def fault_segments(e: Engine) -> list[dict]:
    return [s for s in e.report()["segments"] if s["caption"]]


def test_a_stalled_session_sends_nothing_then_resumes(engine):
    assert engine.inject(Fault("stall", 1.0, session=0)) is None
    n0 = delivered(engine, 0)
    others = delivered(engine, 1)
    assert wait_for(lambda: delivered(engine, 1) > others + 20)  # ~0.7 s at 30 fps
    assert delivered(engine, 0) <= n0 + 1  # at most the window in flight
    assert wait_for(lambda: delivered(engine, 0) > n0 + 10)  # resumed by itself
    captions = [s["caption"] for s in fault_segments(engine)]
    assert captions == ["S0 stalls for 1 s", "after: S0 stalls for 1 s"]
    assert fault_segments(engine)[0]["changes"] == {
        "fault": {"kind": "stall", "for_s": 1.0, "session": 0}
    }
    kinds = [ev.message for ev in engine.events() if ev.kind == "fault"]
    assert kinds == ["S0 stalls for 1 s", "ended: S0 stalls for 1 s"]


def ended(e: Engine) -> bool:
    return e.report()["segments"][-1]["caption"].startswith("after:")


def sent_fps(segment: dict) -> dict[int, float]:
    """Windows each session sent per measured second: delivered, overwritten or expired."""
    return {
        s["id"]: (s["delivered"] + s["overwritten"] + s["expired"]) / segment["measured_s"]
        for s in segment["sessions"]
    }


def settled_after_the_fault(e: Engine) -> bool:
    """The fault has ended and the segment after it has a measured second."""
    return ended(e) and not e.report()["segments"][-1]["too_short"]


# A fault of 3 s: its segment has 2 measured seconds (a 2 s one sits at the 1 s a segment
# needs to have figures, on either side of it by how late the feeder's timer fires).


def test_a_burst_sends_k_times_the_fps(engine):
    assert engine.inject(Fault("burst", 3.0, session=1, factor=3.0)) is None
    assert wait_for(lambda: settled_after_the_fault(engine), timeout=20)
    burst, after = engine.report()["segments"][-2:]
    # what the feeder sent, whether or not a loaded machine's late worker took it in time;
    # a feeder that wakes over two periods late skips what it missed (11 ms apart in the
    # burst: "fell behind, do not burst"), so on a host that late it sends less than 3×
    if burst["overall"]["host_late_ms"]["p99"] < 2 * 1000.0 / 90.0:
        assert sent_fps(burst)[1] == pytest.approx(90.0, rel=0.1)  # 3 × 30 fps
    else:
        assert 1.5 * 30.0 < sent_fps(burst)[1] <= 90.0 * 1.1
    assert sent_fps(burst)[0] == pytest.approx(30.0, rel=0.1)
    assert sent_fps(after)[1] == pytest.approx(30.0, rel=0.1)  # back to its own pace


def test_a_slow_device_slows_the_worker_for_its_time_in_a_segment_of_its_own(engine):
    """The fault slows the worker's device from when it starts until it ends by itself,
    each end a segment, and batches run through it. How much each batch is stretched
    (its compute × the factor) is checked exactly on the test's clock
    (test_worker_rules.py)."""
    assert engine.inject(Fault("slow_device", 3.0, factor=4.0)) is None
    assert engine.worker.slowdown == 4.0
    assert wait_for(lambda: settled_after_the_fault(engine), timeout=20)
    assert engine.worker.slowdown == 1.0
    slow = engine.segments.all()[-2]  # the fault's
    captions = [s["caption"] for s in fault_segments(engine)]
    assert captions == ["every device ×4 slower for 3 s", "after: every device ×4 slower for 3 s"]
    batches = engine.store.batches.view()
    inside = batches[(batches["start"] >= slow.start) & (batches["end"] <= slow.end)]
    assert len(inside) > 10  # the run went on through it (3 sessions at 30 fps for 3 s)


def test_a_source_error_shows_on_its_session_then_recovers(engine):
    assert engine.inject(Fault("source_error", 1.0, session=2)) is None
    assert engine.snapshot().sessions[2].state == "error"
    assert "injected" in engine.snapshot().sessions[2].error
    n0 = delivered(engine, 2)
    assert wait_for(lambda: engine.snapshot().sessions[2].state == "running", timeout=5)
    assert wait_for(lambda: delivered(engine, 2) > n0 + 5)
    assert delivered(engine, 0) > 0


def test_a_fault_on_a_session_that_does_not_exist_is_refused(engine):
    error = engine.inject(Fault("stall", 1.0, session=7))
    assert error == "stall: no session 7 (the run has 3)"
    assert not [ev for ev in engine.events() if ev.kind == "fault"]


BASE = "duration = 10\n[base]\nsessions = 3\n[[step]]\nat = 1\n"


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("stall = {session = 5, for_s = 2}", "step 1: stall: session = 5: no such session"),
        ("burst = {session = 0, factor = 0, for_s = 2}", "burst: factor = 0: must be"),
        ("slow_device = {factor = 2, for_s = -1}", "slow_device: for_s = -1: must be"),
        ("stall = {session = 0}", "stall: for_s is missing"),
        ("stall = {session = 0, for_s = 1, factor = 2}", "stall: unknown field 'factor'"),
        ("source_error = 3", "source_error: write it as a table"),
    ],
)
def test_bad_fault_keys_in_an_experiment_name_the_step_and_key(step, message):
    with pytest.raises(ExperimentError, match=message.replace("(", r"\(")):
        parse_experiment(BASE + step, "faults.toml")


def test_fault_keys_parse_into_the_step():
    e = parse_experiment(BASE + "stall = {session = 1, for_s = 2.5}", "faults.toml")
    assert e.steps[0].faults == (Fault("stall", 2.5, session=1),)
    assert e.steps[0].changes == {}


def test_an_experiment_step_starts_its_fault(tmp_path):
    from batchscope.engine.player import ExperimentPlayer, first_config

    experiment = parse_experiment(
        'duration = 3\n[base]\nbackend = "emulated"\nresolution = "256x144"\n'
        'sources = ["synthetic"]\n[[step]]\nat = 0\nsessions = 2\npolicy = "all"\n'
        '[[step]]\nat = 1\ncaption = "one camera stalls"\nstall = {session = 0, for_s = 1}\n',
        "stall.toml",
    )
    e = Engine(first_config(experiment))
    e.open()
    e.start()
    player = ExperimentPlayer(e, experiment)
    try:
        player.start()
        assert player.finished.wait(10)
        segments = e.report()["segments"]
    finally:
        player.stop()
        e.stop()
    assert [s["caption"] for s in segments] == [
        "",
        "one camera stalls",
        "after: S0 stalls for 1 s",
    ]
    assert segments[1]["changes"] == {"fault": {"kind": "stall", "for_s": 1.0, "session": 0}}
    assert 0.9 < segments[2]["start_s"] - segments[1]["start_s"] < 1.2
