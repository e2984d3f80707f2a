"""The whole run for the time plots: a bounded, decimated copy of the engine's timeline.

The engine keeps its last ``TIMELINE_S`` (300 s) of samples, one every
``MONITOR_PERIOD_S``; a 2-hour run is 28,800 of them. The time plots' "whole run"
view draws from this copy instead: each new sample is added to the point of its
time bucket (a bucket is ``MONITOR_PERIOD_S`` wide at first), and when the copy
passes ``max_points`` points, neighbouring buckets are merged two by two (the
bucket doubles): a point is the mean of the samples in it (its time the mean of
theirs, each series the mean of its values there), so the copy always spans the
whole run at between ``max_points / 2`` and ``max_points`` points. Pure numpy, no Qt.

It also notes where each segment began (from the snapshots), for the boundaries the
plots draw, and where the plots start: the engine's start, or an experiment's
(:meth:`RunHistory.restart`), as a fresh ``run --experiment`` would show it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from batchscope.engine.metrics import MONITOR_PERIOD_S, TimelineSample

#: The most points the copy holds (then halved): a plot is ~600-1800 px wide.
HISTORY_POINTS = 2048
#: A sample is held for at most this many segment boundaries (the newest).
MAX_SEGMENTS = 2000


class RunHistory:
    """Every timeline sample since :attr:`origin`, bucketed; bounded at ``max_points``."""

    def __init__(self, max_points: int = HISTORY_POINTS, period: float = MONITOR_PERIOD_S) -> None:
        if max_points < 4:
            raise ValueError("max_points: at least 4")
        self.max_points = max_points
        self.period = period
        self._segments: dict[int, float] = {}  # segment index -> its start (s)
        self.restart(0.0)

    def restart(self, origin: float) -> None:
        """Forget everything before ``origin`` (s since the engine started): the plots start
        there (an experiment's start). Segment boundaries from ``origin`` on are kept."""
        self.origin = float(origin)
        self.step = self.period  # the width of a point's bucket (s)
        self._n = 0
        self._cap = self.max_points + 1
        self._key = np.zeros(self._cap, np.int64)
        # series -> (sum, count) per point: "t", "throughput", ("fps", sid), ("memory", key)
        self._sums: dict[Hashable, tuple[np.ndarray, np.ndarray]] = {}
        self._last_t = -np.inf
        self._segments = {i: s for i, s in self._segments.items() if s >= self.origin}

    def __len__(self) -> int:
        return self._n

    @property
    def span(self) -> tuple[float, float]:
        """The times of the first and last points (s); (origin, origin) when empty."""
        if self._n == 0:
            return (self.origin, self.origin)
        t = self._values("t")
        return (float(t[0]), float(t[-1]))

    # -- adding ---------------------------------------------------------------------------

    def add(self, timeline: Sequence[TimelineSample]) -> int:
        """Add the samples of ``timeline`` (oldest first) newer than the last added and not
        before :attr:`origin`; returns how many were new."""
        i = len(timeline)
        while i > 0 and timeline[i - 1].t > self._last_t:
            i -= 1
        new = [s for s in timeline[i:] if s.t >= self.origin]
        for sample in new:
            self._add_one(sample)
        if new:
            self._last_t = new[-1].t
        return len(new)

    def _add_one(self, s: TimelineSample) -> None:
        key = int((s.t - self.origin) // self.step)
        if self._n and self._key[self._n - 1] == key:
            at = self._n - 1
        else:
            at = self._n
            self._n += 1
            self._key[at] = key
        self._put("t", at, s.t)
        self._put("throughput", at, s.throughput_wps)
        for sid, v in s.fps.items():
            self._put(("fps", sid), at, v)
        for name, v in s.memory.items():
            self._put(("memory", name), at, v)
        while self._n > self.max_points:  # sparse points (gaps) may take more than one
            self._halve()

    def _put(self, series: Hashable, at: int, value: float) -> None:
        if not np.isfinite(value):
            return
        pair = self._sums.get(series)
        if pair is None:
            pair = self._sums[series] = (np.zeros(self._cap), np.zeros(self._cap))
        pair[0][at] += value
        pair[1][at] += 1

    def _halve(self) -> None:
        """Merge the points two buckets at a time (the bucket doubles)."""
        n = self._n
        keys = self._key[:n] // 2
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        m = len(starts)
        for total, count in self._sums.values():
            merged = np.add.reduceat(total[:n], starts), np.add.reduceat(count[:n], starts)
            total[:m], count[:m] = merged
            total[m:n] = count[m:n] = 0.0
        self._key[:m] = keys[starts]
        self._n = m
        self.step *= 2

    # -- reading ---------------------------------------------------------------------------

    def _values(self, series: Hashable) -> np.ndarray:
        pair = self._sums.get(series)
        if pair is None:
            return np.full(self._n, np.nan)
        total, count = pair[0][: self._n], pair[1][: self._n]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)

    def arrays(self) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
        """(t, fps per session, throughput, memory per key): one value per point."""
        fps = {k[1]: self._values(k) for k in self._sums if isinstance(k, tuple) and k[0] == "fps"}
        memory = {
            k[1]: self._values(k) for k in self._sums if isinstance(k, tuple) and k[0] == "memory"
        }
        return self._values("t"), dict(sorted(fps.items())), self._values("throughput"), memory

    @property
    def gap_s(self) -> float:
        """Points further apart than this have no data between them (the lines break): four
        buckets, as the live plots break at four monitor periods."""
        return 4 * self.step

    # -- segments --------------------------------------------------------------------------

    def mark_segment(self, index: int, start_s: float) -> None:
        """Segment ``index`` began at ``start_s`` (s since the engine started)."""
        if start_s >= self.origin and index not in self._segments:
            self._segments[index] = float(start_s)
            while len(self._segments) > MAX_SEGMENTS:
                del self._segments[min(self._segments)]

    def segment_starts(self) -> list[tuple[int, float]]:
        """(index, start s) of the segments that began since :attr:`origin`, in order."""
        return sorted(self._segments.items())

    def segment_start(self, index: int) -> float | None:
        return self._segments.get(index)
