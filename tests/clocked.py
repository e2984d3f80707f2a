"""A live worker on the test's clock (shared by tests): a number the test holds, which the
mailboxes' waits, the device's batches and the worker's and emulated device's sleeps
advance.

The worker (engine/worker.py) runs on its own thread but reads every time from the clock
it is given, so with these its rules are checked at the instants they are defined at,
with no wall-clock tolerance.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from batchscope.engine import worker as worker_module
from batchscope.engine.backends import Backend, BatchResult, emulated
from batchscope.engine.session import Mailboxes


class ClockedDevice(Backend):
    """A device whose batch computes for ``batch_s`` of the test's clock (0: no time);
    ``runs`` has each batch it was given as (windows, padding rows)."""

    label, resolution, weights = "test device", (64, 48), "timing only"

    def __init__(self, now: list[float], batch_s: float = 0.0) -> None:
        self.now, self.batch_s = now, batch_s
        self.runs: list[tuple[int, int]] = []

    def run(self, windows, pad: int = 0) -> BatchResult:
        self.runs.append((len(windows), pad))
        start = self.now[0]
        self.now[0] += self.batch_s
        return BatchResult([None] * len(windows), start, self.now[0], self.now[0])


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


def clock_the_sleeps(monkeypatch: pytest.MonkeyPatch, now: list[float]) -> None:
    """Put the sleeps that read ``perf_counter`` on the test's clock: the emulated device's
    (its prep's reading, its compute's wait: engine/backends/emulated.py) and the worker's
    slow-device stretch (``Worker._slowed``). A sleep moves the clock to its deadline at
    once, never back, and says it was cut short when its event is set (a stop)."""

    def sleep_until(deadline: float, wake: threading.Event | None = None) -> bool:
        if wake is not None and wake.is_set():
            return False
        now[0] = max(now[0], deadline)
        return True

    monkeypatch.setattr(emulated, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(emulated, "sleep_until", sleep_until)
    monkeypatch.setattr(worker_module, "sleep_until", sleep_until)
