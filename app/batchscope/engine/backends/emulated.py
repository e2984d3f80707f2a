"""The emulated backend: a device profile's batch curve replayed as timed waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from batchscope.device.checks import BackendError
from batchscope.engine.assembly import FramePool, Staging
from batchscope.engine.backends.base import (
    Backend,
    BatchInterrupted,
    BatchResult,
    DeviceOutOfMemory,
)
from batchscope.engine.neighbours import Neighbours
from batchscope.engine.session import Window
from batchscope.profiles.profile import DeviceProfile, ProfileError


class EmulatedBackend(Backend):
    """Replays a device profile's batch curve as timed waits.

    Lets a machine without a GPU show GPU behaviour. Prep is real: each
    window's new frames are copied into a staging buffer exactly as for the
    GPU (see ``assembly``), so host-side assembly costs what it would. Compute
    is a wait of the profile's ms for the batch size; what the report shows is
    still the measured time on this clock, so scheduler overhead is visible.
    ``oom_above`` injects an out-of-memory error for batches larger than it
    (fault tests, and a way to demo recovery). ``neighbours`` stretches every
    batch by the time other busy jobs take on the same GPU (see ``neighbours``).
    """

    weights = "emulated device: no model runs"

    def __init__(
        self,
        profile: DeviceProfile,
        precision: str,
        resolution: tuple[int, int],
        oom_above: int | None = None,
        neighbours: Neighbours | None = None,
        runtime: str = "torch",
    ) -> None:
        try:
            self.curve = profile.curve(precision, resolution, runtime)
        except ProfileError as exc:
            raise BackendError(str(exc)) from None
        self.profile = profile
        self.resolution = resolution
        self.label = f"emulated: {profile.name} ({profile.device})"
        self.oom_above = oom_above
        self.neighbours = neighbours or Neighbours(0)
        self._peak_mb = {p.batch: p.peak_mb for p in self.curve.points if p.peak_mb}
        self._last_batch = 0
        self._lead = 0.0  # s: how early to wake to land on the deadline on average
        self._staging = Staging(resolution)
        self._pool = FramePool()
        self._interrupted = threading.Event()
        self._late = 0.0  # s the last batch's wake-up came after its deadline (the host's)

    def run(self, windows: Sequence[Window], pad: int = 0) -> BatchResult:
        n = len(windows)
        rows = n + pad  # the padding takes the device's time and memory too
        if self.oom_above is not None and rows > self.oom_above:
            raise DeviceOutOfMemory(rows, "injected by the emulated device")
        plan = self._pool.plan(windows)
        if plan.uploads:
            self._staging.put(plan.uploads)
        self._pool.commit(plan)
        prep_end = time.perf_counter()
        compute_end = self.compute(rows, prep_end)
        self._last_batch = rows
        return BatchResult(
            [None] * n, prep_end, compute_end, time.perf_counter(), device_late=self._late
        )

    def forget_frames(self) -> None:
        self._pool.forget()

    def interrupt(self) -> None:
        self._interrupted.set()

    def compute(self, n: int, start: float) -> float:
        """Wait out the profile's time for a batch of ``n`` from ``start``; returns the end.

        Raises BatchInterrupted when :meth:`interrupt` comes meanwhile: a slow
        profile's batch (seconds at fp32 with a slow-device fault) must not hold
        up a stop.
        """
        deadline = start + self.neighbours.stretch(self.curve.ms(n)) / 1000.0
        if not sleep_until(deadline - self._lead, self._interrupted):
            raise BatchInterrupted()
        end = time.perf_counter()
        # The OS wakes a sleeper ~0.1 ms late; learn by how much and wake that much
        # earlier, so the mean emulated batch time matches the profile.
        overshoot = end - deadline
        self._lead = min(0.002, max(0.0, self._lead + 0.1 * overshoot))
        # past the learned lead, a late wake-up is the host's: a busy machine's timers
        self._late = max(0.0, overshoot)
        return end

    def memory(self) -> dict[str, float]:
        out = super().memory()
        if self.profile.memory_total_mb:
            out["device_total_mb"] = float(self.profile.memory_total_mb)
        if self._last_batch in self._peak_mb:
            out["profile_peak_mb"] = float(self._peak_mb[self._last_batch])
        return out


def sleep_until(deadline: float, wake: threading.Event | None = None) -> bool:
    """Sleep to ``deadline`` (perf_counter s); never spins on the GIL.

    Returns False, early, as soon as ``wake`` is set (True once the deadline passed).
    """
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return True
        if wake is None:
            time.sleep(left)
        elif wake.wait(left):
            return False
