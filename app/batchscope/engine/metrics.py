"""Bounded records of what the worker did, and the per-second timeline.

Everything here is fixed-size (ring buffers, bounded deques) so an
hours-long session keeps flat memory. The worker thread writes; the
engine's monitor thread and ``snapshot()`` read under one lock, copying
out small arrays.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchscope.engine.stats import BATCH_DTYPE, ITEM_DTYPE, OVERWRITE_DTYPE

ITEM_CAPACITY = 1 << 18  # ≈ 2.4 h of 1 session at 30 fps; 15.2 MB
BATCH_CAPACITY = 1 << 16
MONITOR_PERIOD_S = 0.25  # one timeline sample every 0.25 s
TIMELINE_S = 300  # history kept in memory (the dashboard shows the last 60 s;
# a recording keeps all of it on disk)
TIMELINE_SAMPLES = int(TIMELINE_S / MONITOR_PERIOD_S)
RESULT_TIMES = 256  # per session, enough for a 1 s fps window up to 256 fps


class Ring:
    """A fixed-capacity ring of structured records; ``view()`` returns them oldest first.

    ``total`` counts every record ever appended and never goes back, even on
    ``clear()``, so a reader (the recorder) can tell what is new since it last looked.
    """

    def __init__(self, dtype: np.dtype, capacity: int) -> None:
        # committed now, not page by page as it fills: memory is flat from the start
        self._data = np.empty(capacity, dtype=dtype)
        self._data.fill(0)
        self._next = 0
        self._count = 0  # records held now (≤ capacity)
        self.total = 0

    def append(self, record: tuple) -> None:
        self._data[self._next] = record
        self._next = (self._next + 1) % len(self._data)
        self._count = min(self._count + 1, len(self._data))
        self.total += 1

    def view(self) -> np.ndarray:
        return self.tail(self._count)

    def tail(self, n: int) -> np.ndarray:
        """The newest ``n`` records (fewer if there are fewer), oldest first."""
        n = max(0, min(n, self._count))
        start = self._next - n
        if start >= 0:
            return self._data[start : self._next].copy()
        return np.concatenate([self._data[start:], self._data[: self._next]])

    def appended_since(self, seen_total: int) -> np.ndarray:
        """Records appended after the ``seen_total``-th, oldest first, ``clear()`` or not.

        ``clear()`` only forgets records for statistics; they stay in the buffer until
        overwritten, so a reader that keeps its own cursor (the recorder) loses only
        what the ring overwrote (more than its capacity since it last looked).
        """
        n = max(0, min(self.total - seen_total, len(self._data)))
        start = self._next - n
        if start >= 0:
            return self._data[start : self._next].copy()
        return np.concatenate([self._data[start:], self._data[: self._next]])

    def retained(self) -> np.ndarray:
        """Every record still in the buffer, oldest first, ``clear()`` or not (segments)."""
        return self.appended_since(self.total - len(self._data))

    @property
    def capacity(self) -> int:
        """The most records it holds."""
        return len(self._data)

    def since(self, field: str, t: float) -> np.ndarray:
        """The newest records whose ``field`` (a time, growing along the ring, e.g. an
        item's ``result``) may be ≥ ``t``: at least those, oldest first, ``clear()`` or
        not; found by doubling from the newest, so it copies about twice what it returns."""
        held = min(self.total, len(self._data))
        n = 64
        while True:
            out = self.appended_since(self.total - min(n, held))
            if n >= held or len(out) == 0 or out[field][0] < t:
                return out
            n *= 2

    def clear(self) -> None:
        self._count = 0


@dataclass(frozen=True)
class Event:
    t: float  # s since the engine started
    kind: str  # config | error | oom | info | session
    message: str


@dataclass(frozen=True, slots=True)
class TimelineSample:
    """One sample of the monitor (every ``MONITOR_PERIOD_S``)."""

    t: float  # s since start
    fps: dict[int, float]  # live fps per session
    throughput_wps: float  # windows/s over the last second
    busy: float  # compute fraction over the last second
    mean_batch: float  # mean batch size over the last second
    memory: dict[str, float]  # MB figures the backend reports


@dataclass
class Latest:
    """The newest processed window of a session, for the video tiles."""

    frame: np.ndarray
    detection: Any
    seq: int
    frame_index: int
    latency_ms: float


@dataclass
class MetricsStore:
    items: Ring = field(default_factory=lambda: Ring(ITEM_DTYPE, ITEM_CAPACITY))
    batches: Ring = field(default_factory=lambda: Ring(BATCH_DTYPE, BATCH_CAPACITY))
    overwrites: Ring = field(default_factory=lambda: Ring(OVERWRITE_DTYPE, BATCH_CAPACITY))
    expiries: Ring = field(default_factory=lambda: Ring(OVERWRITE_DTYPE, BATCH_CAPACITY))
    result_times: dict[int, deque] = field(default_factory=dict)
    delivered: dict[int, int] = field(default_factory=dict)
    latest: dict[int, Latest] = field(default_factory=dict)
    events: deque = field(default_factory=lambda: deque(maxlen=2000))
    timeline: deque = field(default_factory=lambda: deque(maxlen=TIMELINE_SAMPLES))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record_batch(
        self,
        records: list[tuple],
        batch: tuple,
        latest: dict[int, Latest],
    ) -> None:
        """Called by the worker once per batch with all its item records."""
        with self.lock:
            for r in records:
                self.items.append(r)
                sid, result = r[0], r[6]
                times = self.result_times.get(sid)
                if times is None:
                    times = self.result_times[sid] = deque(maxlen=RESULT_TIMES)
                times.append(result)
                self.delivered[sid] = self.delivered.get(sid, 0) + 1
            self.batches.append(batch)
            self.latest.update(latest)

    def record_overwrite(self, session: int, t: float) -> None:
        """A window of ``session`` replaced untaken at ``t`` (segments count their own)."""
        with self.lock:
            self.overwrites.append((session, t))

    def record_expired(self, drops: list[tuple[int, float]]) -> None:
        """Windows discarded for waiting past ``drop_after_ms``: (session, t) each."""
        with self.lock:
            for drop in drops:
                self.expiries.append(drop)

    def add_event(self, t: float, kind: str, message: str) -> Event:
        ev = Event(round(t, 3), kind, message)
        with self.lock:
            self.events.append(ev)
        return ev

    def shift_events(self, by_s: float) -> None:
        """Move every event ``by_s`` seconds earlier (the clock's origin moved to the start:
        events of the opening keep their order, before t = 0)."""
        with self.lock:
            self.events = deque(
                (Event(round(e.t - by_s, 3), e.kind, e.message) for e in self.events),
                maxlen=self.events.maxlen,
            )

    def reset(self) -> None:
        """Forget statistics: 'reset statistics'.

        Events, latest frames, the timeline and the result times behind the live
        fps stay: they are a history (the reset is marked on it as an event), not
        a statistic, and clearing the result times drew a fake dip to ~0 fps.
        """
        with self.lock:
            self.items.clear()
            self.batches.clear()
            self.overwrites.clear()
            self.expiries.clear()
            self.delivered.clear()
