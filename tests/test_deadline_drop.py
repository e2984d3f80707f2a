"""--drop-after-ms: windows that waited too long are discarded and counted as expired."""

from __future__ import annotations

import numpy as np
import pytest

from batchscope.config import ConfigError, RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.session import Mailboxes, Window
from contract import SMALL_EMULATED, wait_for


def window(sid: int, t: float) -> Window:
    frame = np.zeros((4, 4, 3), np.uint8)
    return Window(sid, 1, 1, (frame,) * 3, t)


def test_mailbox_expires_windows_older_than_the_limit():
    boxes = Mailboxes()
    boxes.publish(window(0, 1.000))
    boxes.publish(window(1, 1.030))
    boxes.publish(window(0, 1.040))  # an overwrite: a fresh window, a fresh wait
    assert boxes.expire(1.060, 0.025) == [(1, 1.060)]
    assert [w.session for w in boxes.waiting()] == [0]
    assert boxes.expired() == {1: 1} and boxes.overwritten() == {0: 1}
    assert boxes.expire(1.066, 0.025) == [(0, 1.066)]
    assert boxes.waiting() == []
    boxes.reset_counts()
    assert boxes.expired() == {}


def test_drop_after_ms_is_checked_like_every_knob():
    with pytest.raises(ConfigError, match="drop_after_ms"):
        RunConfig(drop_after_ms=0.0)
    assert RunConfig(drop_after_ms=None).drop_after_ms is None


def test_under_overload_expired_windows_are_counted_apart_in_the_segment_of_the_limit():
    # 8 sessions x 60 fps, oldest first at 256x144 (4.7 ms a window): 480 wanted, ~210 served.
    # The rule itself (which window is dropped, when, and that no delivered one waited past
    # the limit) is checked at exact instants on the test's clock (test_worker_rules.py);
    # here, that a live change brings it in and the report counts its drops apart
    config = RunConfig(**SMALL_EMULATED, sessions=8, fps=60.0, policy="oldest")
    e = Engine(config)
    e.open()
    e.start()
    try:
        assert wait_for(lambda: e.report()["segments"][-1]["measured_s"] > 1.5, 30.0)
        asked = e.clock()
        assert e.apply(e.config.with_changes(drop_after_ms=15.0)) is None
        assert wait_for(lambda: e.report()["segments"][-1]["measured_s"] > 1.5, 30.0)
        unlimited, seg = e.report()["segments"][-2:]
    finally:
        e.stop()
    overall = seg["overall"]
    assert overall["expired"] > 50
    # nothing expires without the limit: the old segment counts only those dropped after
    # the worker took the limit and before the new segment opened (a loaded host widens
    # that moment: one was seen under two CPU hogs)
    expired_at = e.store.expiries.view()["t"]
    assert np.all(expired_at >= asked)
    assert unlimited["overall"]["expired"] == np.count_nonzero(expired_at < seg_start(e))
    assert sum(s["expired"] for s in seg["sessions"]) == overall["expired"]
    assert seg["changes"] == {"drop_after_ms": 15.0}


def seg_start(e: Engine) -> float:
    """When the engine's newest segment opened (its clock)."""
    return e.segments.all()[-1].start


def test_the_simulator_drops_by_the_same_rule():
    from batchscope.sim.simulator import simulate

    config = RunConfig(resolution=(256, 144), sessions=8, fps=60.0, policy="oldest", duration_s=5.0)
    plain = simulate(config)
    dropped = simulate(config.with_changes(drop_after_ms=15.0))
    assert plain["overall"]["expired"] == 0
    assert dropped["overall"]["expired"] > 100
    assert dropped["overall"]["latency_ms"]["max"] < 15.0 + 4.69 + 0.01
    assert plain["overall"]["latency_ms"]["max"] > dropped["overall"]["latency_ms"]["max"]
    assert sum(s["expired"] for s in dropped["sessions"]) == dropped["overall"]["expired"]
