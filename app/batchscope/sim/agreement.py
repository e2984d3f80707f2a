"""The same scenario through the live worker (emulated device) and the simulator.

Used by ``tests/test_agreement.py``, ``tests/test_sim_experiment.py`` and
``benchmarks/agreement.py``. In :func:`live_and_simulated` one engine serves
every policy of a session count: it is started once (its feeder draws the
sessions' phases from the seed exactly as the simulator does), then each policy
is applied live, warmed up, measured, and simulated with the same config.
:func:`live_experiment` plays an experiment file on a live engine, each step
applied when the engine's clock reaches its time, for comparison with
:func:`~batchscope.sim.simulated_experiment.simulate_experiment`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.experiment import Experiment
from batchscope.sim.simulator import simulate

POLL_S = 0.002  # s between looks at the clock while waiting for a step's time


def live_and_simulated(
    base: RunConfig, policies: Sequence[str], warmup_s: float, live_s: float
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """policy -> (live report, simulated report) for ``base`` with that policy.

    Raises RuntimeError if any engine thread outlives ``stop()``.
    """
    engine = Engine(base)
    engine.open()
    engine.start()
    out = {}
    try:
        for policy in policies:
            config = base.with_changes(policy=policy)
            engine.apply(config)
            time.sleep(warmup_s)
            engine.reset_stats(announce=False)
            time.sleep(live_s)
            out[policy] = (engine.report(), simulate(config, warmup_s=warmup_s))
    finally:
        engine.stop()
    if engine.threads_alive():
        raise RuntimeError(f"engine threads still alive after stop: {engine.threads_alive()}")
    return out


def live_experiment(experiment: Experiment) -> dict[str, Any]:
    """The live report (with segments) of ``experiment`` on an engine started at its 0 s.

    A step at 0 s is part of the starting config; each later step is applied
    (``step=True``, so a failed one still opens a segment) on top of the
    engine's config once ``engine.now()`` reaches its ``at`` — as the simulator
    applies it, so that after a failed step the next ones still apply. Raises
    RuntimeError if any engine thread outlives ``stop()``.
    """
    steps = experiment.steps
    opening = steps[0] if steps and steps[0].at == 0 else None
    engine = Engine(experiment.config_at(0) if opening else experiment.base)
    engine.open()
    engine.start()
    try:
        for step in steps:
            if step is opening:
                continue
            _wait_until(engine, step.at)
            engine.apply(
                engine.config.with_changes(**step.changes), caption=step.caption, step=True
            )
        _wait_until(engine, experiment.duration)
        report = engine.report()
    finally:
        engine.stop()
    if engine.threads_alive():
        raise RuntimeError(f"engine threads still alive after stop: {engine.threads_alive()}")
    return report


def _wait_until(engine: Engine, at: float) -> None:
    """Block until the engine's clock reads ``at`` s (the experiment's time base)."""
    while engine.now() < at:
        time.sleep(min(POLL_S, max(0.0, at - engine.now())))
