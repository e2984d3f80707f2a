"""What one UI snapshot costs at many sessions (the UI timer takes one ~15 times a second).

    PYTHONPATH=app python benchmarks/snapshot_cost.py 16 64 256

Fills a store with 60,000 windows (batches of 8) spread over N sessions and times
``take_snapshot`` over them: the per-session latencies, stage means and accuracy
(every source has ground truth here, the worst case) are the cost.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from batchscope.config import RunConfig
from batchscope.engine.metrics import MetricsStore
from batchscope.engine.snapshot import DeviceView, SnapshotInputs, take_snapshot

WINDOWS = 60_000
REPEAT = 20


@dataclass
class _Source:
    name: str = "synthetic"
    has_truth: bool = True  # the worst case: every session's accuracy summed up too
    trouble: str | None = None  # a network stream's (none here)

    def truth(self, index: int) -> None:
        return None


@dataclass
class _Session:
    id: int
    source: _Source = field(default_factory=_Source)
    state: str = "running"
    error: str | None = None


def filled_store(sessions: int) -> MetricsStore:
    store = MetricsStore()
    rng = np.random.default_rng(0)
    for k in range(WINDOWS // 8):
        t = k * 0.001
        # every ITEM_DTYPE and BATCH_DTYPE field, in order (scored hits, no host lateness)
        times = (t, t + 0.010, t + 0.011, t + 0.020, t + 0.021)
        items = [
            (int(s), 8, *times, True, True, True, True, 0.5, 12.0, 0.0, 0.0, 0.0, 0)
            for s in rng.integers(sessions, size=8)
        ]
        batch = (t + 0.010, 8, 0.001, 0.009, 0.001, t + 0.021, 1, 0, 0, 0.0, 0.0, 0)
        store.record_batch(items, batch, {})
    return store


def cost_ms(sessions: int) -> float:
    store = filled_store(sessions)
    views = [_Session(i) for i in range(sessions)]
    device = DeviceView("emulated", "emulated device", False, "all", None)
    config = RunConfig()

    def snap() -> None:
        at = SnapshotInputs(views, {}, config, device, 100.0, 0.0, True, False, 0.0)
        take_snapshot(store, at)

    for _ in range(3):
        snap()
    t0 = time.perf_counter()
    for _ in range(REPEAT):
        snap()
    return (time.perf_counter() - t0) / REPEAT * 1000.0


def main(argv: list[str]) -> None:
    for sessions in [int(a) for a in argv] or [16, 64, 256]:
        print(f"{sessions:4d} sessions, {WINDOWS} windows: {cost_ms(sessions):6.1f} ms a snapshot")


if __name__ == "__main__":
    main(sys.argv[1:])
