"""A noisy neighbour model: other busy jobs time-slicing the same GPU.

Why: the study's sharpest deployment lesson — with 2–3 other busy jobs on
the same GPU, BlurBall's single window went from 10.5 ms to 34 ms. The
emulated device and the simulator stretch every batch through this model,
so the same experiment shows it live and predicted.

The model (time-slicing, as the CUDA driver does between contexts without
MPS or MIG): the device runs one context at a time for a slice of
``SLICE_MS``. Our batch needs ``ms`` of device time; it runs in slices, and
after each of our slices every one of the N neighbours that has work (each
with probability ``duty``, drawn per slice) takes a slice of its own, plus a
context switch of ``SWITCH_MS``. When our batch arrives the device is, with
the probability that some neighbour is busy, part-way through a neighbour's
slice: we wait the rest of it (uniform in one slice). With N = 2, duty 1:
10.5 ms needs 6 of our slices, 5 rounds of 2 neighbour slices in between:
10.5 + 0.5·2 (arrival) + 5·2·2.05 ≈ 32 ms; N = 3: ≈ 42 ms — the study's
"about 34 ms with 2–3 busy jobs" lies between.

What it ignores: neighbours' memory traffic slowing our own slices (cache
and bandwidth contention), the driver's actual slice length (it varies by
GPU and driver; 2 ms is in the range reported for recent drivers), MPS
(concurrent kernels with a compute cap) and MIG (hardware partitions: no
interference at all). Draws come from a seeded ``random.Random``, so a run
is repeatable.
"""

from __future__ import annotations

import math
import random

SLICE_MS = 2.0  # one context's time slice on the device
SWITCH_MS = 0.05  # a context switch between two slices


class Neighbours:
    """N busy neighbours with a duty cycle; ``stretch(ms)`` is our batch's wall time."""

    def __init__(self, count: int, duty: float = 1.0, seed: int = 0) -> None:
        self.count = count
        self.duty = duty
        self._rng = random.Random(seed)

    def __bool__(self) -> bool:
        return self.count > 0 and self.duty > 0

    def stretch(self, ms: float) -> float:
        """Wall-clock ms for a batch that needs ``ms`` of device time alone."""
        if not self or ms <= 0:
            return ms
        rng = self._rng
        busy_now = 1.0 - (1.0 - self.duty) ** self.count
        total = ms
        if rng.random() < busy_now:
            total += rng.random() * SLICE_MS  # the rest of the slice running when we arrived
        for _ in range(math.ceil(ms / SLICE_MS) - 1):  # between our slices
            for _ in range(self.count):
                if rng.random() < self.duty:
                    total += SLICE_MS + SWITCH_MS
        return total
