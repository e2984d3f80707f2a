"""The batching rules (engine/rules.py): their answers, and the same answers compiled.

The live policies and router call these functions as Python; the simulator's loop has
numba compile them (sim/fast_loop.py). Both forms are asked the same random questions
here, so a rule that numba reads differently from Python shows at once.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from batchscope.engine import rules
from batchscope.engine.policies import AdaptiveAIMD, Dynamic, RoundRobin, Waiting
from batchscope.engine.rules import (
    ALL_WAITING,
    CAP,
    DEADLINE,
    FULL,
    aimd_next,
    capped_take,
    deadline_take,
    less_loaded,
    oldest_pick,
    round_robin_pick,
    two_choices,
)
from batchscope.sim import fast_loop


def test_each_rule_answers_as_its_policy_says():
    arrival = {3: 1.0, 5: 0.5, 7: 0.5}
    assert oldest_pick([3, 5, 7], 3, arrival) == 1  # earliest, then the lower id
    assert round_robin_pick([9, 2, 5], 3, 2) == 2  # after 2: 5
    assert round_robin_pick([9, 2, 5], 3, 9) == 1  # none after 9: the lowest, 2
    assert round_robin_pick([9, 2, 5], 3, -1) == 1  # none served yet: the lowest
    assert capped_take(5, -1) == (5, ALL_WAITING)
    assert capped_take(5, 3) == (3, CAP)
    assert capped_take(3, 3) == (3, ALL_WAITING)
    assert deadline_take(4, 4, 0.0, 1.0, FULL) == (4, FULL)
    assert deadline_take(2, 4, 1.0, 1.0, FULL) == (2, DEADLINE)
    assert deadline_take(2, 4, 0.5, 1.0, FULL) == (0, 0)  # wait for the deadline
    assert aimd_next(4.0, 60.0, 4, 50.0, math.inf) == pytest.approx(3.6)  # over: x0.9
    assert aimd_next(1.05, 60.0, 1, 50.0, math.inf) == 1.0  # never below 1
    assert aimd_next(4.7, 10.0, 4, 50.0, math.inf) == 5.0  # the cap limited it: +1
    assert aimd_next(4.7, 10.0, 4, 50.0, 4.0) == 4.0  # up to max_batch
    assert aimd_next(4.7, 10.0, 3, 50.0, math.inf) == 4.7  # not limited: as it was
    assert less_loaded(0, 1, 2, 3, 5.0, 1.0) == 0  # fewer waiting
    assert less_loaded(0, 1, 2, 2, 5.0, 1.0) == 1  # then free first
    assert less_loaded(2, 1, 2, 2, -1.0, -1.0) == 1  # then the lower index
    assert two_choices(4, 0.99, 0.99) == (3, 2)
    assert two_choices(4, 0.0, 0.0) == (0, 1)  # never the same device


def test_the_policies_take_their_rules_from_the_kernel(monkeypatch):
    """Written once: a policy's choice is the kernel's (change the rule, the policy moves)."""
    waiting = [Waiting(s, 0.1 * s) for s in (4, 1, 6)]
    assert RoundRobin().select(waiting, 1.0).take == (1,)
    monkeypatch.setattr("batchscope.engine.policies.round_robin_pick", lambda ids, n, last: 2)
    assert RoundRobin().select(waiting, 1.0).take == (6,)
    policy = AdaptiveAIMD(slo_ms=50.0)
    monkeypatch.setattr("batchscope.engine.policies.aimd_next", lambda *a: 7.0)
    policy.observe(1, 10.0)
    assert policy.cap == 7
    monkeypatch.setattr("batchscope.engine.policies.deadline_take", lambda *a: (0, 0))
    assert Dynamic(2, 5.0).select(waiting, 99.0).take == ()


def test_compiled_rules_answer_as_python_does():
    assert fast_loop.compiled()
    rng = random.Random(7)
    for _ in range(2_000):
        n = rng.randint(1, 12)
        ids = np.array(rng.sample(range(40), n), np.int64)
        arrival = np.array([rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(40)])
        last = rng.randint(-1, 40)
        assert fast_loop.oldest_pick(ids, n, arrival) == rules.oldest_pick(ids, n, arrival)
        assert fast_loop.round_robin_pick(ids, n, last) == rules.round_robin_pick(ids, n, last)
        cap = rng.choice([-1, 1, 2, 4, 8])
        assert fast_loop.capped_take(n, cap) == rules.capped_take(n, cap)
        now, deadline = rng.random(), rng.random()
        full = rng.choice([FULL, rules.FIXED_SIZE])
        assert fast_loop.deadline_take(n, max(cap, 1), now, deadline, full) == (
            rules.deadline_take(n, max(cap, 1), now, deadline, full)
        )
        grown, latency = rng.uniform(1.0, 9.0), rng.uniform(0.0, 100.0)
        top = rng.choice([math.inf, 4.0, 16.0])
        assert fast_loop.aimd_next(grown, latency, n, 50.0, top) == (
            rules.aimd_next(grown, latency, n, 50.0, top)
        )
        devices = rng.randint(3, 9)
        u, v = rng.random(), rng.random()
        assert fast_loop.two_choices(devices, u, v) == rules.two_choices(devices, u, v)
        a, b = rules.two_choices(devices, u, v)
        loads = rng.randint(0, 3), rng.randint(0, 3)
        frees = rng.choice([-1.0, 0.5]), rng.choice([-1.0, 0.5])
        assert fast_loop.less_loaded(a, b, *loads, *frees) == rules.less_loaded(
            a, b, *loads, *frees
        )
