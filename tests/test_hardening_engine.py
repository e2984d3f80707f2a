"""The engine's defects from the hardening issue, each with a test that fails on ba13837.

Overlapping faults compose, one step opens one segment, paused stays paused,
stop() ends a slow emulated batch, and a transaction that a stop cuts short
closes what it opened. Everything runs on the emulated device.
"""

from __future__ import annotations

import threading

import pytest

from batchscope.config import RunConfig
from batchscope.engine import engine as engine_module
from batchscope.engine.engine import Engine
from batchscope.experiment import Fault, parse_experiment
from batchscope.sim.simulated_experiment import simulate_experiment
from contract import SMALL_EMULATED, played_live, running_engine, wait_for


@pytest.fixture
def engine():
    e = running_engine(sessions=3, policy="all")
    yield e
    e.stop()
    assert wait_for(lambda: e.threads_alive() == [])


def delivered(e: Engine, sid: int) -> int:
    return e.snapshot().sessions[sid].delivered


def fault_events(e: Engine) -> list[str]:
    return [ev.message for ev in e.events() if ev.kind == "fault"]


def test_overlapping_stalls_hold_until_the_later_end(engine):
    # ba13837: the first stall's end set the pace back to 1: session 0 sent again
    assert engine.inject(Fault("stall", 0.5, session=0)) is None
    assert engine.inject(Fault("stall", 2.5, session=0)) is None
    assert wait_for(lambda: "ended: S0 stalls for 0.5 s" in fault_events(engine))
    n0, n1 = delivered(engine, 0), delivered(engine, 1)
    assert wait_for(lambda: delivered(engine, 1) > n1 + 20)  # ~0.7 s at 30 fps
    assert delivered(engine, 0) <= n0 + 1  # at most the window in flight
    assert engine.snapshot().sessions[0].state == "stalled"
    assert engine.report()["segments"][-1]["faults"] == [
        {"kind": "stall", "for_s": 2.5, "session": 0}
    ]
    assert wait_for(lambda: "ended: S0 stalls for 2.5 s" in fault_events(engine))
    assert wait_for(lambda: delivered(engine, 0) > n0 + 10)
    assert engine.snapshot().sessions[0].state == "running"


def test_overlapping_slow_devices_multiply_and_each_end_undoes_its_own(engine):
    worker = engine.worker
    assert engine.inject(Fault("slow_device", 30.0, factor=2.0)) is None
    assert engine.inject(Fault("slow_device", 0.3, factor=3.0)) is None
    assert worker.slowdown == 6.0
    assert wait_for(lambda: "ended: every device ×3 slower for 0.3 s" in fault_events(engine))
    assert wait_for(lambda: worker.slowdown == 2.0)  # ba13837: 1.0, the first fault gone too


def test_a_source_error_inside_another_recovers_at_the_later_end(engine):
    assert engine.inject(Fault("source_error", 0.3, session=2)) is None
    assert engine.inject(Fault("source_error", 30.0, session=2)) is None
    assert wait_for(lambda: "ended: S2's source fails for 0.3 s" in fault_events(engine))
    n1 = delivered(engine, 1)
    assert wait_for(lambda: delivered(engine, 1) > n1 + 15)
    assert engine.snapshot().sessions[2].state == "error"  # ba13837: recovered already


STEP_AND_FAULT = """
name = "step and fault"
caption = "3 sessions"
duration = 3.5
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
sources = ["synthetic"]
sessions = 3
[[step]]
at = 1.0
policy = "oldest"
caption = "oldest, and a stall"
stall = {session = 0, for_s = 1.5}
"""


def labels(report: dict) -> list[tuple[dict, str]]:
    return [(s["changes"], s["caption"]) for s in report["segments"]]


def test_a_step_that_changes_a_setting_and_starts_a_fault_opens_one_segment():
    # ba13837 live: a 1.0–1.0 segment for the policy, then the fault's (listing only it)
    exp = parse_experiment(STEP_AND_FAULT)
    live, _ = played_live(exp)
    stall = {"kind": "stall", "for_s": 1.5, "session": 0}
    assert labels(live) == [
        ({}, "3 sessions"),
        ({"policy": "oldest", "fault": stall}, "oldest, and a stall"),
        ({}, "after: S0 stalls for 1.5 s"),
    ]
    assert labels(live) == labels(simulate_experiment(exp))
    assert live["segments"][1]["config"]["policy"] == "oldest"
    assert live["segments"][1]["faults"] == [stall]


def overwritten(e: Engine) -> int:
    return sum(e.mailboxes.overwritten().values())


def test_paused_stays_paused_through_a_live_change_and_a_recovery(engine):
    # ba13837: after sessions=4 while paused, the feeder published again (85 overwrites/s)
    assert engine.inject(Fault("source_error", 0.3, session=2)) is None
    engine.set_paused(True)
    assert engine.apply(engine.config.with_changes(sessions=4)) is None
    assert wait_for(lambda: "ended: S2's source fails for 0.3 s" in fault_events(engine))
    before = overwritten(engine), [s.delivered for s in engine.snapshot().sessions]
    t = engine.now()
    assert wait_for(lambda: engine.now() > t + 0.5)  # 15 frames of each session at 30 fps
    assert engine.paused
    assert (overwritten(engine), [s.delivered for s in engine.snapshot().sessions]) == before
    engine.set_paused(False)
    assert wait_for(lambda: min(s.delivered for s in engine.snapshot().sessions) > 5)


def test_stop_cuts_a_slow_emulated_batch_short():
    # slow_device ×20 on fp32 512×288, 16 sessions: a batch of 16 takes seconds; ba13837's
    # stop(timeout=2) returned with the worker still asleep in it
    e = Engine(
        RunConfig(
            **{**SMALL_EMULATED, "resolution": (512, 288), "precision": "fp32"},
            sessions=16,
            policy="all",
        )
    )
    e.open()
    e.start()
    assert wait_for(lambda: e.snapshot().sessions[0].delivered > 2)
    assert e.inject(Fault("slow_device", 60.0, factor=20.0)) is None
    batches = len(e.report()["overall"]["batch_sizes"])
    t = e.now()
    assert wait_for(lambda: e.now() > t + 0.3)  # the worker is inside a 20× batch
    alive = e.stop(timeout=2.0)
    assert e.threads_alive() == []
    assert alive == []  # stop() names the threads still alive: none
    assert len(e.report()["overall"]["batch_sizes"]) == batches  # the cut batch not recorded


class Tracked:
    """Wraps open_slots: every source it opened, and whether it was closed."""

    def __init__(self) -> None:
        self.opened: list = []
        self.closed: set[int] = set()
        self.real = engine_module.open_slots

    def __call__(self, *args, **kwargs):
        slots = self.real(*args, **kwargs)
        for slot in slots:
            if slot.source is not None:
                self.opened.append(slot.source)
                close, key = slot.source.close, id(slot.source)
                slot.source.close = lambda close=close, key=key: (self.closed.add(key), close())
        return slots


def test_a_stop_during_a_change_closes_the_sources_it_opened(engine, monkeypatch):
    # ba13837: the sources of a resolution change opened just before a stop were put into
    # the roster after the stop had closed it: never closed
    tracked = Tracked()
    monkeypatch.setattr(engine_module, "open_slots", tracked)
    real_reopen = engine._live._reopen

    def reopen_then_stop(new):
        slots = real_reopen(new)
        stop = threading.Thread(target=engine.stop)  # the window closes meanwhile
        stop.start()
        stop.join()
        return slots

    engine._live._reopen = reopen_then_stop
    error = engine.apply(engine.config.with_changes(resolution=(512, 288)))
    assert error == "the engine was stopped"
    assert tracked.opened
    assert wait_for(lambda: not engine.running and engine.threads_alive() == [])
    assert {id(s) for s in tracked.opened} <= tracked.closed
    assert not {id(s.source) for s in engine.roster.slots} & {id(s) for s in tracked.opened}
