"""A live worker on the test's clock (shared by tests): a number the test holds, which the
mailboxes' waits and the device's batches advance.

The worker (engine/worker.py) runs on its own thread but reads every time from the clock
it is given, so with these its rules are checked at the instants they are defined at,
with no wall-clock tolerance.
"""

from __future__ import annotations

import threading

from batchscope.engine.backends.base import Backend, BatchResult
from batchscope.engine.session import Mailboxes


class ClockedDevice(Backend):
    """A device whose batch takes ``batch_s`` of the test's clock (0: no time)."""

    label, resolution, weights = "test device", (64, 48), "timing only"

    def __init__(self, now: list[float], batch_s: float = 0.0) -> None:
        self.now, self.batch_s = now, batch_s

    def run(self, windows, pad: int = 0) -> BatchResult:
        start = self.now[0]
        self.now[0] += self.batch_s
        return BatchResult([None] * len(windows), start, start, self.now[0])


class ClockedBoxes(Mailboxes):
    """Mailboxes whose waits advance the test's clock once ``armed``: by their timeout, and
    ``late`` s more (a busy host waking the worker late). Unarmed, a wait is a real
    millisecond and the clock stands still (the worker's thread loops meanwhile, and must
    not run the clock ahead of the windows the test publishes)."""

    def __init__(self, now: list[float], late: float = 0.0) -> None:
        super().__init__()
        self.now, self.late = now, late
        self.armed = threading.Event()

    def wait(self, timeout: float) -> None:
        if self.armed.is_set():
            self.now[0] += timeout + self.late
        else:
            self.armed.wait(0.001)
