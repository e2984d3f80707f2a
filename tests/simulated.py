"""Shortcuts the simulator tests share (kept out of the package: nothing else needs them)."""

from __future__ import annotations

import random

from batchscope.config import RunConfig
from batchscope.engine.session import first_frame_delay
from batchscope.profiles.profile import BatchCurve
from batchscope.sim.simulator import DEFAULT_WARMUP_S, Trace, one_step, play


def session_phases(sessions: int, fps: float, seed: int) -> list[float]:
    """First-frame time of each session in s, inside one frame interval.

    Drawn as the live feeder and the simulator draw them (:func:`first_frame_delay`,
    one draw per session in id order from ``random.Random(seed)``).
    """
    rng = random.Random(seed)
    return [first_frame_delay(rng, fps) for _ in range(sessions)]


def simulate_trace(
    config: RunConfig, curve: BatchCurve, warmup_s: float = DEFAULT_WARMUP_S
) -> Trace:
    """Run ``config`` on ``curve`` in virtual time; the policy comes from ``make_policy``."""
    return play(one_step(config), lambda _config: curve, warmup_s)
