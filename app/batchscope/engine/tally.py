"""Figures kept as windows arrive: exact over a run of any length, in bounded memory.

Why: the live engine keeps its records in fixed rings (metrics.py), 262,144 windows:
136 s at 64 sessions × 30 fps. A report cut from the ring after that counted only the
newest windows but divided by the whole interval (segment 0 of two 100 s segments read
11 fps against a true 30). A :class:`Tally` is fed every record once, as it arrives
(:class:`~batchscope.engine.report.live_figures.LiveFigures` does that), and keeps what the report's
figures need and no more:

- counts and sums (delivered, stages, busy time, batch sizes and reasons, overwritten,
  expired, accuracy counts): exact;
- the distributions behind percentiles and medians (latency, host lateness, position
  error and freshness): HdrHistogram's rule. Each value (latency and lateness in µs,
  pixels in thousandths) keeps its 11 most significant bits, a count per bin
  (:class:`Counts`): exact below 2,048 (2 ms, 2 px), within 2⁻¹¹ = 0.05 % of itself
  above (a 300 ms p99 within ±0.07 ms). Memory is 1,024 bins per doubling of the values
  a session saw, never more with the run's length (a µs each grew with it: a 30-minute
  run of 64 sessions spread over 50-400 ms would keep millions); a percentile is numpy's
  linear rule over the bins' midpoints.

The figures come out through the same interface as :class:`RecordFigures`, which
computes them from record arrays (the simulator's, and a short live interval's
stability test); :func:`batchscope.engine.report.body.report_body` turns either into the
report's ``sessions`` and ``overall``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from batchscope.engine.rules import REASONS
from batchscope.engine.stats import (
    ITEM_DTYPE,
    PERCENTILES,
    STAGES,
    accuracy_summary,
    batch_sizes,
    group_sessions,
    host_late_summaries,
    host_late_summary,
    latencies_ms,
    latency_summaries,
    latency_summary,
    pick,
    stage_means,
    stage_means_grouped,
)

_GROUP_SHIFT = 40  # a key is group << 40 | value: 2**40 µs is 12.7 days
_VALUE_MASK = (1 << _GROUP_SHIFT) - 1
_NO_ITEMS = np.zeros(0, ITEM_DTYPE)
US_PER_S = 1_000_000  # latency and lateness counted in µs
PX_QUANTUM = 1000  # pixels counted in thousandths
MANTISSA_BITS = 11  # the significant bits a value keeps (module doc)
_MANTISSA = (1 << MANTISSA_BITS) - 1


def encode(values: np.ndarray) -> np.ndarray:
    """Each value's bin (ints ≥ 0 → ints, in the same order): its top MANTISSA_BITS bits
    and how far they were shifted, ``shift << 11 | mantissa``."""
    v = values.astype(np.int64)
    bits = np.frexp(v.astype(np.float64))[1].astype(np.int64)  # bit length (0 for 0)
    shift = np.maximum(0, bits - MANTISSA_BITS)
    return (shift << MANTISSA_BITS) | (v >> shift)


def decode(codes: np.ndarray) -> np.ndarray:
    """The midpoint of each bin (floats, in the values' unit)."""
    shift = codes >> MANTISSA_BITS
    width = np.left_shift(1, shift).astype(np.float64)
    return (codes & _MANTISSA) * width + (width - 1.0) / 2.0


class Counts:
    """A histogram per group: sorted distinct keys (``group << 40 | bin``, the bin of
    :func:`encode`) and how many values fell in each."""

    __slots__ = ("counts", "keys")

    def __init__(self) -> None:
        self.keys = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)

    def add(self, groups: np.ndarray, values: np.ndarray) -> None:
        """Add ``values`` (ints ≥ 0), each in its group (ints ≥ 0)."""
        if values.size == 0:
            return
        bins = encode(np.clip(values, 0, (1 << 39) - 1))
        keys = (groups.astype(np.int64) << _GROUP_SHIFT) | bins
        new, times = np.unique(keys, return_counts=True)
        at = np.searchsorted(self.keys, new)
        known = at < self.keys.size
        known[known] = self.keys[at[known]] == new[known]
        self.counts[at[known]] += times[known]  # distinct keys: distinct places
        fresh = ~known
        if fresh.any():  # inserted before their places in the old array: stays sorted
            self.keys = np.insert(self.keys, at[fresh], new[fresh])
            self.counts = np.insert(self.counts, at[fresh], times[fresh])

    def group(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """Group ``g``'s bins, as their midpoints (ascending), and their counts."""
        lo, hi = np.searchsorted(self.keys, [g << _GROUP_SHIFT, (g + 1) << _GROUP_SHIFT])
        return decode(self.keys[lo:hi] & _VALUE_MASK), self.counts[lo:hi]

    def groups(self, gs: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """The bins of the groups ``gs`` pooled, as midpoints (ascending), and their counts."""
        parts = [self.group(g) for g in gs]
        if not parts:
            return np.zeros(0), np.zeros(0, np.int64)
        values = np.concatenate([v for v, _ in parts])
        counts = np.concatenate([c for _, c in parts])
        pooled, where = np.unique(values, return_inverse=True)
        return pooled, np.bincount(where, weights=counts, minlength=pooled.size).astype(np.int64)

    @property
    def size(self) -> int:
        return int(self.keys.size)


def quantiles(values: np.ndarray, counts: np.ndarray, qs: Iterable[float]) -> list[float]:
    """Each ``q`` quantile of the multiset (``values`` ascending, each ``counts`` times)
    by ``np.percentile``'s linear rule and arithmetic (see stats._percentile_sorted)."""
    cum = np.cumsum(counts)
    n = int(cum[-1])
    out = []
    for q in qs:
        at = (n - 1) * q
        below = math.floor(at)
        t = at - below
        a = float(values[np.searchsorted(cum, below, side="right")])
        b = float(values[np.searchsorted(cum, min(below + 1, n - 1), side="right")])
        diff = b - a
        out.append(b - diff * (1 - t) if t >= 0.5 else a + diff * t)
    return out


def _grow(a: np.ndarray, n: int) -> np.ndarray:
    return a if a.size >= n else np.concatenate([a, np.zeros(n - a.size, a.dtype)])


class Tally:
    """The figures of every record delivered in ``[lo, hi]`` (s, engine clock; ``hi`` None
    while the interval runs): items by result, batches by end, overwrites and expiries
    by when they happened. Feed each record once (:meth:`add`); not thread-safe."""

    def __init__(self, lo: float, hi: float | None = None) -> None:
        self.lo, self.hi = lo, hi
        self._n = np.zeros(0, np.int64)  # per session: windows delivered
        self._sums = {stage: np.zeros(0) for stage in ("latency", *STAGES)}  # s
        self._max = np.zeros(0)  # s
        self._accuracy = np.zeros((0, 5), np.int64)  # scored, visible, no_ball, hits, false
        self._overwritten = np.zeros(0, np.int64)
        self._expired = np.zeros(0, np.int64)
        self._latency = Counts()  # per session, µs
        self._all_latency = Counts()  # group 0: every session's
        self._late = Counts()
        self._all_late = Counts()
        self._error = Counts()  # per session, px/1000
        self._fresh = Counts()
        self._sizes: dict[int, int] = {}
        self._reasons: dict[int, int] = {}
        self._padded = 0
        self._compute = np.zeros(0)  # per device, s
        self._device_sizes: dict[int, dict[int, int]] = {}
        self._served: set[tuple[int, int]] = set()  # (device, session) pairs

    def _inside(self, t: np.ndarray) -> np.ndarray:
        hi = math.inf if self.hi is None else self.hi
        return (t >= self.lo) & (t <= hi)

    def add(
        self,
        items: np.ndarray,
        batches: np.ndarray,
        overwrites: np.ndarray,
        expiries: np.ndarray,
    ) -> None:
        """Count the records that fall in the interval (ITEM_DTYPE, BATCH_DTYPE,
        OVERWRITE_DTYPE twice); each record must be added once."""
        self._add_items(pick(items, self._inside(items["result"])))
        self._add_batches(pick(batches, self._inside(batches["end"])))
        self._overwritten = self._count(self._overwritten, overwrites)
        self._expired = self._count(self._expired, expiries)

    def _count(self, per_session: np.ndarray, records: np.ndarray) -> np.ndarray:
        sid = records["session"][self._inside(records["t"])]
        if sid.size == 0:
            return per_session
        n = max(per_session.size, int(sid.max()) + 1)
        return _grow(per_session, n) + np.bincount(sid, minlength=n)

    def _add_items(self, items: np.ndarray) -> None:
        if items.size == 0:
            return
        sid = items["session"].astype(np.intp)
        n = max(self._n.size, int(sid.max()) + 1)
        self._n = _grow(self._n, n) + np.bincount(sid, minlength=n)
        latency = items["result"] - items["arrival"]
        spans = {
            "latency": latency,
            "wait": items["start"] - items["arrival"] - items["host_wait"],
            "host": items["host_wait"] + items["host_device"],
            "prep": items["prep_end"] - items["start"],
            "compute": items["compute_end"] - items["prep_end"] - items["host_device"],
            "post": items["result"] - items["compute_end"],
        }
        for key, span in spans.items():
            self._sums[key] = _grow(self._sums[key], n) + np.bincount(sid, span, minlength=n)
        self._max = _grow(self._max, n)
        np.maximum.at(self._max, sid, latency)
        us = np.rint(latency * US_PER_S).astype(np.int64)
        late = np.rint(items["host_late"] * US_PER_S).astype(np.int64)
        self._latency.add(sid, us)
        self._all_latency.add(np.zeros_like(sid), us)
        self._late.add(sid, late)
        self._all_late.add(np.zeros_like(sid), late)
        scored = items["scored"]
        self._accuracy = np.concatenate(
            [self._accuracy, np.zeros((n - self._accuracy.shape[0], 5), np.int64)]
        )
        if scored.any():
            visible = scored & items["visible"]
            no_ball = scored & ~items["visible"]
            flags = (scored, visible, no_ball, items["hit"] & visible, items["detected"] & no_ball)
            for j, flag in enumerate(flags):
                self._accuracy[:, j] += np.bincount(sid[flag], minlength=n)
            error = items["error_px"]
            keep = scored & ~np.isnan(error)
            self._error.add(sid[keep], np.rint(error[keep] * PX_QUANTUM).astype(np.int64))
        # freshness with or without a score (the emulated device: the ball's own travel)
        fresh = items["fresh_px"]
        keep = ~np.isnan(fresh)
        self._fresh.add(sid[keep], np.rint(fresh[keep] * PX_QUANTUM).astype(np.int64))
        pairs = np.unique(items["device"].astype(np.int64) << 32 | sid)
        self._served.update((int(p >> 32), int(p & 0xFFFFFFFF)) for p in pairs)

    def _add_batches(self, batches: np.ndarray) -> None:
        if batches.size == 0:
            return
        for size, k in zip(*np.unique(batches["size"], return_counts=True), strict=True):
            self._sizes[int(size)] = self._sizes.get(int(size), 0) + int(k)
        for why, k in zip(*np.unique(batches["reason"], return_counts=True), strict=True):
            self._reasons[int(why)] = self._reasons.get(int(why), 0) + int(k)
        self._padded += int(batches["padded"].sum())
        device = batches["device"].astype(np.intp)
        n = max(self._compute.size, int(device.max()) + 1)
        self._compute = _grow(self._compute, n) + np.bincount(
            device, batches["compute_s"], minlength=n
        )
        for d in np.unique(device).tolist():
            mine = self._device_sizes.setdefault(d, {})
            sizes, k = np.unique(batches["size"][device == d], return_counts=True)
            for size, c in zip(sizes.tolist(), k.tolist(), strict=True):
                mine[size] = mine.get(size, 0) + c

    # -- the figures (the interface report_body reads) ---------------------------------

    def delivered(self, sid: int) -> int:
        return int(self._n[sid]) if sid < self._n.size else 0

    def windows(self) -> int:
        return int(self._n.sum())

    def session_figures(self, sid: int) -> tuple[dict, dict, dict]:
        """Session ``sid``'s latency summary, stage means and host lateness (ms)."""
        n = self.delivered(sid)
        if n == 0:
            empty = np.zeros(0)
            return latency_summary(empty), stage_means(_NO_ITEMS), host_late_summary(_NO_ITEMS)
        values, counts = self._latency.group(sid)
        latency = _summary(
            values, counts, self._sums["latency"][sid] / n * 1000.0, self._max[sid] * 1000.0
        )
        stages = {s: round(float(self._sums[s][sid] / n * 1000.0), 3) for s in STAGES}
        late = _late(*self._late.group(sid))
        return latency, stages, late

    def overall_latency(self) -> dict[str, float]:
        n = self.windows()
        if n == 0:
            return latency_summary(np.zeros(0))
        values, counts = self._all_latency.group(0)
        total = float(self._sums["latency"].sum())
        return _summary(values, counts, total / n * 1000.0, float(self._max.max()) * 1000.0)

    def overall_host_late(self) -> dict[str, float]:
        if self.windows() == 0:
            return host_late_summary(_NO_ITEMS)
        return _late(*self._all_late.group(0))

    def accuracy(self, sids: Iterable[int]) -> dict[str, Any]:
        """stats.accuracy_summary over the sessions ``sids`` pooled."""
        ids = [s for s in sids if s < self._accuracy.shape[0]]
        scored, visible, no_ball, hits, false = (
            self._accuracy[ids].sum(axis=0).tolist() if ids else [0] * 5
        )
        return {
            "scored": scored,
            "visible": visible,
            "hit_rate": round(hits / visible, 4) if visible else None,
            "median_error_px": _median_px(*self._error.groups(ids)),
            "no_ball": no_ball,
            "false_detection_rate": round(false / no_ball, 4) if no_ball else None,
            "median_freshness_px": _median_px(*self._fresh.groups(ids)),
        }

    def batch_sizes(self) -> dict[str, int]:
        return {str(k): self._sizes[k] for k in sorted(self._sizes)}

    def batch_reasons(self) -> dict[str, int]:
        named = {REASONS[r]: n for r, n in self._reasons.items() if r}
        return {r: named[r] for r in REASONS if r in named}

    def padded_rows(self) -> tuple[int, int]:
        """(padding rows, all rows run)."""
        return self._padded, self._padded + sum(k * n for k, n in self._sizes.items())

    def compute_s(self, device: int | None = None) -> float:
        if device is None:
            return float(self._compute.sum())
        return float(self._compute[device]) if device < self._compute.size else 0.0

    def device_batch_sizes(self, device: int) -> dict[str, int]:
        mine = self._device_sizes.get(device, {})
        return {str(k): mine[k] for k in sorted(mine)}

    def device_sessions(self, device: int) -> int:
        return sum(1 for d, _ in self._served if d == device)

    def overwritten(self) -> dict[int, int]:
        return {s: int(k) for s, k in enumerate(self._overwritten.tolist()) if k}

    def expired(self) -> dict[int, int]:
        return {s: int(k) for s, k in enumerate(self._expired.tolist()) if k}

    @property
    def memory_values(self) -> int:
        """Distinct values kept in all its distributions (what its memory grows with)."""
        kept = (self._latency, self._all_latency, self._late, self._all_late, self._error)
        return sum(c.size for c in (*kept, self._fresh))


def _summary(values: np.ndarray, counts: np.ndarray, mean_ms: float, max_ms: float) -> dict:
    qs = quantiles(values, counts, [q / 100 for q in PERCENTILES])
    out = {"mean": round(mean_ms, 3)}
    out |= {f"p{q}": round(v / 1000.0, 3) for q, v in zip(PERCENTILES, qs, strict=True)}
    out["max"] = round(max_ms, 3)
    return out


def _late(values: np.ndarray, counts: np.ndarray) -> dict[str, float]:
    p50, p99 = quantiles(values, counts, (0.5, 0.99))
    return {"p50": round(p50 / 1000.0, 3), "p99": round(p99 / 1000.0, 3)}


def _median_px(values: np.ndarray, counts: np.ndarray) -> float | None:
    if values.size == 0:
        return None
    return round(quantiles(values, counts, (0.5,))[0] / PX_QUANTUM, 2)


class RecordFigures:
    """The same figures as :class:`Tally`'s, from record arrays already cut to the
    interval (the simulator's traces): every figure from every record, at full precision."""

    def __init__(
        self,
        items: np.ndarray,
        batches: np.ndarray,
        overwritten: Mapping[int, int],
        expired: Mapping[int, int] | None = None,
    ) -> None:
        self.items, self.batches = items, batches
        self._overwritten, self._expired = dict(overwritten), dict(expired or {})
        grouped, self._spans, count = group_sessions(items)
        self._grouped = grouped
        self._latency = latency_summaries(latencies_ms(grouped), count)
        self._stages = stage_means_grouped(grouped, count)
        self._late = host_late_summaries(grouped, count)

    def delivered(self, sid: int) -> int:
        _, lo, hi = self._spans.get(sid, (-1, 0, 0))
        return hi - lo

    def windows(self) -> int:
        return len(self.items)

    def session_figures(self, sid: int) -> tuple[dict, dict, dict]:
        k = self._spans.get(sid, (-1, 0, 0))[0]
        if k < 0:
            return latency_summary([]), stage_means(_NO_ITEMS), host_late_summary(_NO_ITEMS)
        return dict(self._latency[k]), dict(self._stages[k]), dict(self._late[k])

    def overall_latency(self) -> dict[str, float]:
        return latency_summary(latencies_ms(self.items))

    def overall_host_late(self) -> dict[str, float]:
        return host_late_summary(self.items)

    def accuracy(self, sids: Iterable[int]) -> dict[str, Any]:
        ids = list(sids)
        if len(ids) == 1:
            _, lo, hi = self._spans.get(ids[0], (-1, 0, 0))
            return accuracy_summary(self._grouped[lo:hi])
        return accuracy_summary(pick(self.items, np.isin(self.items["session"], ids)))

    def batch_sizes(self) -> dict[str, int]:
        return batch_sizes(self.batches["size"])

    def batch_reasons(self) -> dict[str, int]:
        why, times = np.unique(self.batches["reason"], return_counts=True)
        named = {REASONS[r]: n for r, n in zip(why.tolist(), times.tolist(), strict=True) if r}
        return {r: named[r] for r in REASONS if r in named}

    def padded_rows(self) -> tuple[int, int]:
        padded = int(self.batches["padded"].sum())
        return padded, padded + int(self.batches["size"].sum())

    def compute_s(self, device: int | None = None) -> float:
        b = self.batches if device is None else pick(self.batches, self.batches["device"] == device)
        return float(b["compute_s"].sum())

    def device_batch_sizes(self, device: int) -> dict[str, int]:
        return batch_sizes(self.batches["size"][self.batches["device"] == device])

    def device_sessions(self, device: int) -> int:
        return len(np.unique(self.items["session"][self.items["device"] == device]))

    def overwritten(self) -> dict[int, int]:
        return self._overwritten

    def expired(self) -> dict[int, int]:
        return self._expired
