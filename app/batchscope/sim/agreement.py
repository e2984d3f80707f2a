"""The same scenario through the live worker (emulated device) and the simulator.

Used by ``tests/test_agreement.py`` and ``benchmarks/agreement.py``. One engine
serves every policy of a session count: it is started once (its feeder draws the
sessions' phases from the seed exactly as the simulator does), then each policy
is applied live, warmed up, measured, and simulated with the same config.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.sim.simulator import simulate


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
