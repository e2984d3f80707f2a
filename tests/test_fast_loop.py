"""The fast loop against the general one, and compiled against its Python form: the
same records, to the bit.

A plain run on one device or several (``simulate``, ``simulate --devices``, the
planner) plays in ``sim/fast_loop.py`` (tests/test_planner_speed.py compares one
device's with the general loop's too); every other run in the general loop
(``play_devices``' Python loop, for 1…N devices). Both are played here on random plain
runs (every built-in policy with knobs that bind, both routers, 1 to 5 devices of
unequal profiles, MIG slices among them) and every
batch, window, opening, overwrite and report compared; and the fast loop's Python form
(the same code, uncompiled) against its compiled form.
"""

from __future__ import annotations

import functools
import json
import random
import subprocess
import sys
import types

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine import rules
from batchscope.engine.policies import make_policy
from batchscope.sim import devices as devices_loop
from batchscope.sim import fast_loop
from batchscope.sim.devices import devices_report, load_devices, play_devices, simulate_devices
from batchscope.sim.fast_loop import play_fast, plays_fast
from batchscope.sim.simulator import simulate

PROFILES = ("laptop-8gb", "server-24gb", "server-24gb@1g", "laptop-8gb@3g")
KNOBS = (
    {"policy": "oldest"},
    {"policy": "round-robin"},
    {"policy": "all"},
    {"policy": "all", "max_batch": 3},
    {"policy": "adaptive", "slo_ms": 40.0},
    {"policy": "adaptive", "slo_ms": 25.0, "max_batch": 4},
    {"policy": "dynamic", "max_batch": 4, "max_delay_ms": 5.0},
    {"policy": "dynamic", "max_batch": 8, "max_delay_ms": 45.0},
    {"policy": "fixed", "batch": 4, "max_delay_ms": 10.0},
    {"policy": "fixed", "batch": 2, "max_delay_ms": 50.0},
)


def test_the_compiled_loop_is_what_plays_a_plain_run():
    """numba is a dependency: if it failed to import or to cache, plain runs would fall
    back to the general loop silently, 4-5x slower (docs/BENCHMARKS.md)."""
    assert fast_loop.compiled()
    config = RunConfig(backend="emulated", sessions=4, policy="oldest")
    assert plays_fast([make_policy(config)])


@pytest.mark.parametrize("seed", range(2))
def test_the_loops_python_form_gives_the_compiled_records(seed, monkeypatch):
    """The oracle: the same code object run as Python (the rules uncompiled) plays random
    plain runs on 1-5 devices to the compiled loop's records, draws included."""
    loop = fast_loop.python_form()
    assert (
        isinstance(loop, types.FunctionType)
        and loop.__code__ is fast_loop._PYTHON["_loop"].__code__
    )
    assert all(loop.__globals__[name] is getattr(rules, name) for name in fast_loop.RULE_NAMES)
    runs = list(_random_runs(6, seed + 100))
    played = []
    for python in (False, True):
        monkeypatch.setattr(devices_loop, "play_fast", functools.partial(play_fast, python=python))
        played.append([play_devices(c, [d.curve(c) for d in ds], r, 0.5) for c, ds, r, _ in runs])
    for (config, _, router, names), compiled, python in zip(runs, *played, strict=True):
        what = (config.policy_label(), router, names, config.sessions, config.seed)
        assert compiled.measured == python.measured and compiled.measured, what
        assert compiled.delivered == python.delivered, what
        (a,), (b,) = compiled.clock.schedules, python.clock.schedules
        assert (a.opened, a.published) == (b.opened, b.published), what


def _random_runs(n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        knobs = rng.choice(KNOBS)
        names = [rng.choice(PROFILES) for _ in range(rng.randint(1, 5))]
        small = all(n.startswith("laptop") for n in names)  # server-24gb: 512x288 only
        config = RunConfig(
            backend="emulated",
            sessions=rng.randint(1, 24),
            fps=rng.choice([15.0, 30.0, 60.0]),
            precision="fp16",
            resolution=rng.choice([(256, 144), (512, 288)]) if small else (512, 288),
            duration_s=rng.choice([2.0, 3.0]),
            seed=rng.randint(0, 10_000),
            **knobs,
        )
        yield config, load_devices(names), rng.choice(["pinned", "least-loaded"]), names


@pytest.mark.parametrize("seed", range(4))
def test_random_plain_runs_give_the_python_loops_records(seed):
    for config, devices, router, names in _random_runs(30, seed):
        curves = [d.curve(config) for d in devices]
        warmup = 0.5
        python = play_devices(config, curves, router, warmup, fast=False)
        compiled = play_devices(config, curves, router, warmup)
        what = (config.policy_label(), router, names, config.sessions, config.seed)
        assert compiled.measured == python.measured, what
        assert compiled.delivered == python.delivered, what
        assert compiled.pinned == python.pinned, what
        (a,), (b,) = compiled.clock.schedules, python.clock.schedules
        assert (a.opened, a.published) == (b.opened, b.published), what
        assert np.array_equal(compiled.clock.overwrites(), python.clock.overwrites()), what
        report = devices_report(compiled, config, devices, router, warmup)
        assert report == devices_report(python, config, devices, router, warmup), what


def test_many_sessions_on_four_devices_give_the_python_loops_records():
    """The scale the speed is asked at (4 devices x 64 sessions), shorter: every policy,
    both routers."""
    devices = load_devices(["server-24gb"] * 4)
    for knobs in KNOBS:
        config = RunConfig(
            backend="emulated", sessions=256, precision="fp16", resolution=(512, 288),
            duration_s=2.0, **knobs,
        )  # fmt: skip
        curves = [d.curve(config) for d in devices]
        for router in ("pinned", "least-loaded"):
            python = play_devices(config, curves, router, 0.5, fast=False)
            compiled = play_devices(config, curves, router, 0.5)
            assert compiled.measured == python.measured, (knobs, router)
            assert compiled.delivered == python.delivered, (knobs, router)
            assert len(compiled.measured) > 10


def test_least_loaded_draws_are_pythons_random_to_the_bit():
    """The compiled loop replays ``random.Random``'s Mersenne Twister from its state
    (least-loaded's two choices): the same floats across several twists of the state."""
    assert fast_loop.compiled()
    draws = random.Random(104_729 + 7)
    _, internal, _ = draws.getstate()
    mt = np.array(internal[:624], np.int64)
    mti = np.array([internal[624]], np.int64)
    got = [fast_loop._random(mt, mti) for _ in range(2_000)]
    assert got == [draws.random() for _ in range(2_000)]
    assert (*mt.tolist(), int(mti[0])) == draws.getstate()[1]


BROKEN_NUMBA = {
    "absent": 'sys.modules["numba"] = None  # import numba raises ImportError',
    "failing": "import numba\nnumba.njit = lambda **k: lambda f: lambda *a: 1 / 0",
}


@pytest.mark.parametrize("numba", BROKEN_NUMBA)
def test_without_a_working_numba_the_python_loop_plays_every_run(numba):
    """A build without numba (the packaged app leaves it out), or one whose compiler fails
    here, still simulates one device and several, in the general loop, to the same
    reports."""
    script = f"""
import json, sys
{BROKEN_NUMBA[numba]}
from batchscope.config import RunConfig
from batchscope.sim import devices as devices_loop
from batchscope.sim import fast_loop
from batchscope.sim.devices import load_devices, simulate_devices
from batchscope.sim.simulator import simulate
config = RunConfig(backend="emulated", sessions=9, policy="all", duration_s=2.0)
report = simulate_devices(config, load_devices(["laptop-8gb"] * 3), "least-loaded")
one = simulate(config.with_changes(policy="round-robin", sessions=5))
print(json.dumps({{"compiled": fast_loop.compiled(), "report": report, "one": one}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    out = json.loads(done.stdout)
    assert out["compiled"] is False
    config = RunConfig(backend="emulated", sessions=9, policy="all", duration_s=2.0)
    here = simulate_devices(config, load_devices(["laptop-8gb"] * 3), "least-loaded")
    assert out["report"] == json.loads(json.dumps(here))
    one = simulate(config.with_changes(policy="round-robin", sessions=5))
    assert out["one"] == json.loads(json.dumps(one))
