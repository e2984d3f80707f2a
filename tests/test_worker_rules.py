"""The live worker's rules on the test's clock (tests/clocked.py): exact instants, no
wall-clock tolerance, as the simulator checks them (tests/test_deadline_drop.py runs the
same rules in a live engine, with the tolerances a busy host needs).
"""

from __future__ import annotations

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine.metrics import MetricsStore
from batchscope.engine.policies import make_policy
from batchscope.engine.session import Window
from batchscope.engine.worker import Worker
from clocked import ClockedBoxes, ClockedDevice
from contract import wait_for

FRAME = np.zeros((48, 64, 3), np.uint8)
T0 = 100.0


def _run(
    config: RunConfig, batch_s: float, arrivals: list[tuple[int, float]], until
) -> MetricsStore:
    """Publish ``arrivals`` (session, arrival) into a worker of ``config``'s policy and
    drop limit on the test's clock, arm the clock, and stop once ``until(store)``."""
    now = [T0]
    boxes, store = ClockedBoxes(now), MetricsStore()
    worker = Worker(boxes, store, make_policy(config), lambda kind, msg: None, clock=lambda: now[0])
    if config.drop_after_ms is not None:
        worker.drop_after_s = config.drop_after_ms / 1000.0
    try:
        worker.swap_backend(ClockedDevice(now, batch_s))
        worker.start()
        for session, arrival in arrivals:
            boxes.publish(Window(session, 3, 2, (FRAME,) * 3, arrival))
        boxes.armed.set()
        assert wait_for(lambda: until(store))
    finally:
        worker.stop()
    return store


@pytest.mark.parametrize(("limit_ms", "expired"), [(15.0, [1]), (25.0, [])])
def test_a_window_that_waited_past_the_limit_when_the_device_frees_is_dropped(limit_ms, expired):
    """Two windows at 100 s, oldest first, 20 ms a batch: when the first batch ends, the
    second has waited 20 ms, past a 15 ms limit (dropped then, at 100.020 s) and within a
    25 ms one (run then)."""
    config = RunConfig(policy="oldest", drop_after_ms=limit_ms)
    arrivals = [(0, T0), (1, T0)]
    store = _run(config, 0.020, arrivals, lambda s: s.items.total + s.expiries.total == 2)
    drops = store.expiries.view()
    assert drops["session"].tolist() == expired
    assert drops["t"].tolist() == pytest.approx([T0 + 0.020] * len(expired))
    items = store.items.view()
    assert sorted(items["session"].tolist()) == sorted({0, 1} - set(expired))
    assert np.all(items["start"] - items["arrival"] <= limit_ms / 1000.0)


def test_dynamic_runs_a_short_batch_at_its_oldest_windows_deadline():
    """dynamic (max 8, 10 ms): three windows, the oldest at 100 s, never fill the batch;
    it starts at 100.010 s, the oldest's arrival + max_delay, with all three."""
    config = RunConfig(policy="dynamic", max_batch=8, max_delay_ms=10.0)
    arrivals = [(0, T0), (1, T0 + 0.002), (2, T0 + 0.004)]
    store = _run(config, 0.005, arrivals, lambda s: s.batches.total == 1)
    batch = store.batches.view()[0]
    assert batch["size"] == 3
    assert batch["start"] == pytest.approx(T0 + 0.010)
