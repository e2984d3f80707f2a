"""Each batch records why it left, as its policy says (the live worker's batches, at exact
instants: test_worker_rules.py); a live report counts them."""

from __future__ import annotations

from collections import Counter

import pytest

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.policies import Waiting, make_policy
from batchscope.engine.rules import (
    ALL_WAITING,
    CAP,
    DEADLINE,
    FIXED_SIZE,
    FULL,
    ONE_AT_A_TIME,
    REASONS,
)
from contract import SMALL_EMULATED, wait_for

THREE = [Waiting(s, 1.0 + s / 100) for s in range(3)]


@pytest.mark.parametrize(
    ("changes", "now", "reason"),
    [
        ({"policy": "oldest"}, 1.1, ONE_AT_A_TIME),
        ({"policy": "round-robin"}, 1.1, ONE_AT_A_TIME),
        ({"policy": "all"}, 1.1, ALL_WAITING),
        ({"policy": "all", "max_batch": 2}, 1.1, CAP),
        ({"policy": "dynamic", "max_batch": 3}, 1.1, FULL),
        ({"policy": "dynamic", "max_batch": 4, "max_delay_ms": 50.0}, 1.1, DEADLINE),
        ({"policy": "fixed", "batch": 3}, 1.1, FIXED_SIZE),
        ({"policy": "fixed", "batch": 4, "max_delay_ms": 50.0}, 1.1, DEADLINE),
        ({"policy": "adaptive"}, 1.1, CAP),  # its cap starts at 1
    ],
)
def test_each_policy_says_why_its_batch_leaves(changes, now, reason):
    decision = make_policy(RunConfig(**changes)).select(THREE, now)
    assert decision.take and decision.reason == reason


def test_a_policy_that_waits_gives_no_reason():
    decision = make_policy(RunConfig(policy="dynamic", max_batch=4)).select(THREE, 1.005)
    assert decision.take == () and decision.reason == 0 and decision.wait_until == 1.01


def test_a_live_report_counts_why_each_of_its_batches_left():
    """The report of a live run counts each batch under the reason its worker recorded.
    Which reason each batch leaves for, at which instant, is checked exactly on the test's
    clock (test_worker_rules.py), and the simulator runs the same rules (engine/rules.py):
    here, only that the live report carries what the worker recorded."""
    config = RunConfig(
        **SMALL_EMULATED, sessions=6, policy="dynamic", max_batch=4, max_delay_ms=5.0, fps=30.0
    )
    e = Engine(config)
    e.open()
    e.start()
    try:
        assert wait_for(lambda: sum(e.report()["overall"]["batch_sizes"].values()) > 20)
    finally:
        e.stop()
    reasons = e.report()["overall"]["batch_reasons"]  # stopped: every batch is in
    assert set(reasons) <= {"full", "deadline"}  # dynamic's two
    batches = e.store.batches.view()
    recorded = batches[batches["end"] >= e.figures.run.lo]["reason"]
    assert reasons == dict(Counter(REASONS[r] for r in recorded.tolist()))
