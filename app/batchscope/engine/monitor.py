"""The monitor: one small thread that samples the per-second timeline.

Why a thread of its own: fps over time, throughput, busy and memory are
plotted as a history, so they must be sampled at a steady rate whether or
not anyone is looking, and the worker's hot path must not pay for it (NVML
calls alone take ~0.1 ms). Every ``MONITOR_PERIOD_S`` it appends one
:class:`TimelineSample` to the store.

How it stops: ``stop()`` sets the terminate flag, then the event the loop
waits on; the loop ends within one wake-up. A failing sample is reported as
an event and the loop goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from batchscope.engine.loop import LoopThread
from batchscope.engine.metrics import MONITOR_PERIOD_S, MetricsStore, TimelineSample
from batchscope.engine.stats import busy_fraction, live_fps, pick


def sample_timeline(
    store: MetricsStore,
    session_ids: Iterable[int],
    memory: dict[str, float],
    now: float,
    t0: float,
    stats_t0: float,
    devices: int = 1,
) -> TimelineSample:
    """The timeline sample at ``now`` (s on the engine's clock; t0: start, stats_t0: reset)."""
    ids = list(session_ids)
    with store.lock:
        times = {sid: list(store.result_times.get(sid, ())) for sid in ids}
        # every batch of the last second, however many (a fixed tail capped 4 devices'
        # 800 windows/s at its 256 batches); a reset's clear() does not hide them
        batches = store.batches.since("end", now - 1.0)
    recent = pick(batches, (batches["end"] > now - 1.0) & (batches["end"] >= stats_t0))
    window = min(1.0, now - stats_t0) or 1.0
    return TimelineSample(
        t=round(now - t0, 3),
        fps={sid: live_fps(np.asarray(times[sid], float), now) for sid in ids},
        throughput_wps=float(recent["size"].sum()) / window,
        busy=busy_fraction(float(recent["compute_s"].sum()), window, devices),
        mean_batch=float(recent["size"].mean()) if len(recent) else 0.0,
        memory=memory,
    )


class Monitor(LoopThread):
    STOP_TIMEOUT_S = 1.0

    def __init__(
        self,
        store: MetricsStore,
        sample: Callable[[], TimelineSample],
        on_error: Callable[[str], object],
        period_s: float = MONITOR_PERIOD_S,
    ) -> None:
        super().__init__("batchscope-monitor")
        self._store = store
        self._sample = sample
        self._on_error = on_error
        self._period_s = period_s

    def _run(self) -> None:
        while not self._terminate:
            self._wake.wait(self._period_s)
            if self._terminate:
                return
            try:
                sample = self._sample()
                with self._store.lock:
                    self._store.timeline.append(sample)
            except Exception as exc:  # never let the monitor die silently
                self._on_error(f"monitor: {type(exc).__name__}: {exc}")
