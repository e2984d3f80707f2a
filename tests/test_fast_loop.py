"""The simulator's one loop (``sim/fast_loop.py``): compiled against the general Python
loop it replaced, and against its own Python form: the same records, to the bit.

Every run plays in the loop (``simulate``, ``simulate --devices``, ``--experiment``, the
planner, a segment's prediction, several resolutions). The general loop that played
before is gone; its records of 244 random runs are in ``tests/data/loop_records.json``
(``tests/loop_records.py``): plain runs (every built-in policy with knobs that bind, both
routers, 1 to 5 devices of unequal profiles, MIG slices among them), 4 devices x 64
sessions, experiments of every step and fault, paces, drops, late hosts, neighbours and
sessions at several resolutions. The compiled loop gives every one: every batch, window,
drop, opening, overwrite, segment, the curves device 0 ran and the shapes run. The loop's
Python form (the same code, uncompiled, on lists: what plays without numba) gives the
compiled loop's records on random runs too.
"""

from __future__ import annotations

import functools
import json
import random
import subprocess
import sys
import types
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from tests import loop_records

from batchscope.config import ConfigError, RunConfig
from batchscope.engine import rules
from batchscope.engine.policies import RULES, make_policy
from batchscope.experiment import Experiment, ExperimentError, parse_experiment
from batchscope.sim import devices as devices_loop
from batchscope.sim import fast_loop, simulator
from batchscope.sim.devices import (
    DevicesPlayed,
    Pace,
    Shapes,
    Steps,
    emulated_names,
    load_devices,
    mixed_shapes,
    play_devices,
    simulate_devices,
)
from batchscope.sim.host_jitter import HostJitter
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


def test_the_compiled_loop_is_what_plays_a_run():
    """numba is a dependency: if it failed to import or to cache, every run would fall
    back to the loop's Python form silently, 10-40x slower (docs/BENCHMARKS.md)."""
    assert fast_loop.compiled()


def test_every_built_in_policy_has_its_rule_in_the_loop_and_another_is_refused(monkeypatch):
    """A policy added to RULES plays only once the loop has its code (engine/rules.py's
    rule, compiled into it): until then one clear error, not a wrong run."""
    assert set(fast_loop.CODES) == set(RULES)
    for name in RULES:
        config = RunConfig(policy=name, batch=2, max_batch=4, max_delay_ms=5.0)
        assert fast_loop.code_of(make_policy(config)) is not None

    class Oldest2(RULES["oldest"]):  # a rule the loop does not know
        pass

    config = RunConfig(backend="emulated", sessions=2, duration_s=1.0)
    curves = [load_devices(["laptop-8gb"])[0].curve(config)]
    monkeypatch.setattr(devices_loop, "make_policy", Oldest2.from_config)
    with pytest.raises(ConfigError, match="the simulator's loop has no rule for it"):
        play_devices(config, curves, "pinned")


@pytest.mark.parametrize("seed", range(2))
def test_the_loops_python_form_gives_the_compiled_records(seed):
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
        played.append(
            [
                play_devices(c, [d.curve(c) for d in ds], r, 0.5, python=python)
                for c, ds, r, _ in runs
            ]
        )
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


@pytest.mark.parametrize("kind", ["plain", "many"])
def test_plain_runs_give_the_general_loops_records(kind):
    """Random plain runs (every built-in policy with knobs that bind, both routers, 1 to 5
    devices of unequal profiles, MIG slices among them), and the scale the speed is asked
    at (4 devices x 64 sessions, shorter: every policy, both routers): every batch,
    window, opening, overwrite as the general loop played them (tests/loop_records.py)."""
    _check_recorded(kind)


def _check_recorded(kind: str) -> None:
    """The compiled loop's records of the recorded runs of ``kind``: the file's."""
    digests, checked = loop_records.expected(), 0
    for name, play in recorded_runs():
        if name.split()[0] == kind:
            played = play()
            assert loop_records.digest(played) == digests[name], name
            assert played.measured or played.expired or kind in ("driven", "shaped"), name
            checked += 1
    assert checked == sum(name.split()[0] == kind for name in digests)


def _many_sessions() -> Iterator[tuple[RunConfig, str]]:
    for knobs in KNOBS:
        config = RunConfig(
            backend="emulated", sessions=256, precision="fp16", resolution=(512, 288),
            duration_s=2.0, **knobs,
        )  # fmt: skip
        for router in ("pinned", "least-loaded"):
            yield config, router


#: a host late by a different amount at each draw
HOST = HostJitter(
    tuple(3.0 * q / 100 for q in range(101)),
    tuple(9.0 * (q / 100) ** 2 for q in range(101)),
    "varying",
    tuple(2.0 * q / 100 for q in range(101)),
)
STEPS_ONE = (
    "fps = 20",
    "sessions = 3",
    "sessions = 9",
    'resolution = "256x144"',
    'policy = "oldest"',
    'policy = "adaptive"',
    'policy = "dynamic"',
    "max_batch = 2",
    "max_delay_ms = 25",
    "slo_ms = 20",
    "drop_after_ms = 30",
    "neighbours = 1",
    "neighbour_duty = 0.5",
    "stall = {session = 0, for_s = 1.5}",
    "burst = {session = 1, factor = 3, for_s = 1}",
    "slow_device = {factor = 2.5, for_s = 1}",
    "source_error = {session = 2, for_s = 1.5}",
)
STEPS_SEVERAL = (*(s for s in STEPS_ONE if "neighbour" not in s), "devices = 3",
                 "devices = 1", 'router = "least-loaded"', 'router = "pinned"',
                 "slow_device = {factor = 2, for_s = 1, device = 1}")  # fmt: skip


def _random_experiment(rng: random.Random, devices: int) -> Experiment:
    """An experiment of random steps and faults over a random base (``devices`` at the
    start; the steps may change them and the router)."""
    policy = rng.choice(["oldest", "round-robin", "all", "dynamic", "fixed", "adaptive"])
    base = [
        'backend = "emulated"', 'profile = "laptop-8gb"', 'precision = "fp16"',
        f"sessions = {rng.randint(2, 12)}", f"fps = {rng.choice([15, 30])}",
        f'policy = "{policy}"', "max_batch = 4", f"seed = {rng.randint(0, 9999)}",
        f"devices = {devices}", f'router = "{rng.choice(["pinned", "least-loaded"])}"',
    ]  # fmt: skip
    if rng.random() < 0.4:
        base.append(f"drop_after_ms = {rng.choice([20, 45])}")
    if devices == 1 and rng.random() < 0.4:
        base.append(f"neighbours = {rng.randint(1, 2)}")
    text = ['name = "random"', 'caption = ""', "duration = 4", "[base]", *base]
    kinds = STEPS_ONE if devices == 1 else STEPS_SEVERAL
    for at in sorted(round(rng.uniform(0.0, 3.9), 3) for _ in range(rng.randint(1, 5))):
        text += ["[[step]]", f"at = {at}", *rng.sample(kinds, rng.randint(1, 2))]
    try:
        return parse_experiment("\n".join(text), "random.toml")
    except ExperimentError:  # a fault on a session a step retired: draw another
        return _random_experiment(rng, devices)


def _play_driven(experiment: Experiment, jitter, **loop) -> DevicesPlayed:
    """``experiment`` played by ``play_devices`` (``loop``: which loop)."""
    steps = experiment.steps
    opening = steps[0] if steps and steps[0].at == 0 else None
    config = experiment.base.with_changes(**opening.changes) if opening else experiment.base
    names = tuple(emulated_names(config))
    played = Steps(experiment, opening, tuple(load_devices(names)), names,
                   experiment.most("sessions"))  # fmt: skip
    return play_devices(config, played.curves(config), config.router, 0.5, jitter=jitter,
                        steps=played, **loop)  # fmt: skip


def _same_records(a: DevicesPlayed, b: DevicesPlayed, what) -> None:
    assert loop_records.records(a) == loop_records.records(b), what


def test_driven_runs_give_the_general_loops_records():
    """The compiled loop, driven stretch by stretch (a step, a fault's start and end, a
    pace: applied between two stretches), plays random experiments on 1-3 devices, with a
    deadline drop, neighbours, a late host, steps of every kind (the devices and the
    router too) and faults of every kind, to the general loop's records: every batch,
    window, drop, opening, overwrite, segment, and the curves device 0 ran."""
    _check_recorded("driven")


def _random_experiments(seed: int) -> Iterator[tuple[Experiment, HostJitter | None]]:
    rng = random.Random(seed + 300)
    for _ in range(24):
        experiment = _random_experiment(rng, rng.choice([1, 1, 2, 3]))
        yield experiment, HOST if rng.random() < 0.3 else None


@pytest.mark.parametrize("seed", range(2))
def test_driven_runs_in_the_loops_python_form_give_the_compiled_records(seed):
    rng = random.Random(seed + 400)
    for _ in range(6):
        devices = rng.choice([1, 2, 3])
        experiment = _random_experiment(rng, devices)
        jitter = HOST if rng.random() < 0.5 else None
        what = (seed, devices, jitter is not None, experiment.base, experiment.steps)
        compiled = _play_driven(experiment, jitter)
        _same_records(_play_driven(experiment, jitter, python=True), compiled, what)


def test_an_experiment_plays_in_the_compiled_loop_stopping_at_each_change(monkeypatch):
    """``simulate --experiment``'s run on one device (steps, a fault's start and end, a
    drop, neighbours, a late host) is played by the compiled loop, which hands each change
    to the driver at its instant (before, such a run played in the general loop only)."""
    stops: list[float] = []
    play = fast_loop.Run.play

    def spy(run, frames, change_at, stop):
        done = play(run, frames, change_at, stop)
        if done == fast_loop.CHANGE:
            stops.append(run.now)
        return done

    monkeypatch.setattr(fast_loop.Run, "play", spy)
    experiment = parse_experiment(
        "\n".join([
            'name = "driven"', 'caption = ""', "duration = 4", "[base]",
            'backend = "emulated"', 'profile = "laptop-8gb"', 'precision = "fp16"',
            "sessions = 12", 'policy = "adaptive"', "slo_ms = 40", "drop_after_ms = 30",
            "neighbours = 1", "[[step]]", "at = 1", "stall = {session = 0, for_s = 1.5}",
            "[[step]]", "at = 2", 'policy = "dynamic"', "max_delay_ms = 10", "max_batch = 4",
        ]),
        "driven.toml",
    )  # fmt: skip
    trace = simulator.play(experiment, simulator.ProfileCurves(None, experiment.base), 0.5, HOST)
    assert stops == [1.5, 2.5, 3.0]  # the stall, the new policy, the stall's end
    assert len(trace.segments) == 4 and len(trace.batches) > 50
    assert len(trace.expiries) > 0  # the drop played


def test_paces_and_a_late_host_play_in_the_compiled_loop_as_in_the_general_one():
    """``play_devices``' paces (a burst, a stall, back), a drop and a late host, both
    routers, 1-3 devices."""
    _check_recorded("paced")


PACES = (Pace(1.0, 1, 0.0), Pace(2.0, 1, 1.0), Pace(1.0, 0, 3.0), Pace(3.0, 0, 1.0))


def _paced_runs() -> Iterator[tuple[RunConfig, list, str, HostJitter | None]]:
    for devices, router in [(1, "pinned"), (2, "least-loaded"), (3, "least-loaded"), (3, "pinned")]:
        config = RunConfig(backend="emulated", sessions=7, policy="dynamic", max_batch=4,
                           max_delay_ms=10.0, duration_s=4.0, drop_after_ms=40.0, seed=devices,
                           precision="fp16", resolution=(512, 288))  # fmt: skip
        curves = [d.curve(config) for d in load_devices(["laptop-8gb"] * devices)]
        for jitter in (None, HOST):
            yield config, curves, router, jitter


def test_sessions_at_several_resolutions_play_in_the_compiled_loop_as_in_the_general_one(
    monkeypatch,
):
    """``Shapes``: a device takes the shape of its longest-waiting window and its policy
    chooses among that shape's windows; random runs of every policy, both routers, 1-4
    devices, with drops, neighbours and a late host: the same records, and the same
    (device, shape, rows) of the batches that ran (the memory peak)."""
    played: list[int] = []
    play = fast_loop.Run.play
    monkeypatch.setattr(fast_loop.Run, "play", lambda *a: played.append(1) or play(*a))
    _check_recorded("shaped")
    assert len(played) >= 24  # each in the compiled loop
    kinds = {k for seed in range(2) for *_, shapes in _shaped_runs(seed) for k in shapes.of_session}
    assert kinds == {0, 1}


def _shaped_runs(seed: int) -> Iterator[tuple[RunConfig, list, str, HostJitter | None, Shapes]]:
    rng = random.Random(seed + 500)
    for _ in range(12):
        n_dev, sessions = rng.randint(1, 4), rng.randint(1, 14)
        extra: dict = {"drop_after_ms": rng.choice([20.0, 50.0])} if rng.random() < 0.3 else {}
        if n_dev == 1 and rng.random() < 0.3:
            extra["neighbours"] = 2
        config = RunConfig(backend="emulated", profile="laptop-8gb", precision="fp16",
                           resolution=(512, 288), sessions=sessions, duration_s=3.0,
                           seed=rng.randint(0, 99), fps=rng.choice([15.0, 30.0]),
                           **rng.choice(KNOBS), **extra)  # fmt: skip
        on = load_devices(["laptop-8gb"] * n_dev)
        shapes = mixed_shapes(
            config, on, [rng.choice([(512, 288), (256, 144)]) for _ in range(sessions)]
        )
        curves, router = [d.curve(config) for d in on], rng.choice(["pinned", "least-loaded"])
        yield config, curves, router, HOST if rng.random() < 0.3 else None, shapes


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
    here, still simulates one device and several, in the loop's Python form, to the same
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


def recorded_runs(**loop) -> Iterator[tuple[str, Callable[[], DevicesPlayed]]]:
    """Every run whose records tests/data/loop_records.json holds, by name (``loop``:
    which loop plays them; tests/loop_records.py made the file)."""
    for seed in range(4):
        for k, (config, devices, router, _) in enumerate(_random_runs(30, seed)):
            curves = [d.curve(config) for d in devices]
            yield (
                f"plain {seed}.{k}",
                functools.partial(play_devices, config, curves, router, 0.5, **loop),
            )
    for config, router in _many_sessions():
        curves = [d.curve(config) for d in load_devices(["server-24gb"] * 4)]
        yield (
            f"many {config.policy_label()} {router}",
            functools.partial(play_devices, config, curves, router, 0.5, **loop),
        )
    for seed in range(3):
        for k, (experiment, jitter) in enumerate(_random_experiments(seed)):
            yield f"driven {seed}.{k}", functools.partial(_play_driven, experiment, jitter, **loop)
    for k, (config, curves, router, jitter) in enumerate(_paced_runs()):
        yield (
            f"paced {k}",
            functools.partial(play_devices, config, curves, router, 0.5, PACES, jitter, **loop),
        )
    for seed in range(2):
        for k, (config, curves, router, jitter, shapes) in enumerate(_shaped_runs(seed)):
            yield (
                f"shaped {seed}.{k}",
                functools.partial(
                    play_devices, config, curves, router, 0.5, jitter=jitter, shapes=shapes, **loop
                ),
            )
