"""The live run's figures, kept as the records arrive: the run's and each segment's.

Why: the store's rings are bounded (metrics.py) and a long or wide run outgrows them,
so a report cut from them covers only the newest windows. This object reads every
record once, shortly after the worker wrote it (the monitor's tick, every 0.25 s, far
inside the ring's 136 s at 64 sessions), into a :class:`~batchscope.engine.tally.Tally`
for the interval since the statistics began and one for each segment still open. When a
segment has closed (and the records up to its end have been read: ``FREEZE_AFTER_S``
later) its report entry is computed once and kept: a closed segment's figures never
change, and reading them costs nothing.

Paused time is in no figure: the engine says when it pauses and resumes
(:meth:`LiveFigures.pause`), and every interval's seconds leave it out (a session's
fps, throughput, busy), as a segment's ``paused_s`` says.

Thread-safe: the monitor thread, the report's callers and the UI's reader all call in.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from batchscope.engine.metrics import MetricsStore
from batchscope.engine.report.body import SessionInfo
from batchscope.engine.report.segment import segment_entry
from batchscope.engine.segments import STABLE_WINDOW_S, STABLE_WINDOWS, Segment
from batchscope.engine.stats import pick
from batchscope.engine.tally import Tally

#: A closed segment is frozen once the records up to its end were surely written: a
#: batch whose results land just before the change is recorded just after it.
FREEZE_AFTER_S = 0.5


class LiveFigures:
    def __init__(self, store: MetricsStore, t0: float) -> None:
        self._store = store
        self._lock = threading.RLock()
        # records read of items, batches, overwrites, expiries (each ring's ``total``)
        self._cursors: tuple[int, ...] = (0, 0, 0, 0)
        self.missed = 0  # records the rings overwrote before they were read (none expected)
        self.run = Tally(t0)
        self._open: dict[int, Tally] = {}
        self._frozen: dict[int, dict[str, Any]] = {}
        self._pauses: list[list[float]] = []  # [start, end] (end inf while paused)
        self._session_source: Callable[[], Sequence[SessionInfo]] = list
        self._t0 = t0

    # -- what the engine tells it ----------------------------------------------------

    def reset(self, at: float) -> None:
        """The statistics restart at ``at`` (the run's figures; segments keep theirs)."""
        with self._lock:
            self.update(())
            self.run = Tally(at)

    def pause(self, at: float) -> None:
        with self._lock:
            if not self._pauses or self._pauses[-1][1] != math.inf:
                self._pauses.append([at, math.inf])

    def resume(self, at: float) -> None:
        with self._lock:
            if self._pauses and self._pauses[-1][1] == math.inf:
                self._pauses[-1][1] = at

    def paused_in(self, lo: float, hi: float) -> float:
        """Seconds of [lo, hi] the run was paused."""
        with self._lock:
            return sum(max(0.0, min(hi, b) - max(lo, a)) for a, b in self._pauses)

    # -- reading the records ------------------------------------------------------------

    def update(self, segments: Sequence[Segment], now: float | None = None) -> None:
        """Read the records written since the last call into every open tally; then freeze
        the segments closed more than FREEZE_AFTER_S before ``now``."""
        store = self._store
        with self._lock:
            with store.lock:
                rings = (store.items, store.batches, store.overwrites, store.expiries)
                new = [r.appended_since(c) for r, c in zip(rings, self._cursors, strict=True)]
                totals = tuple(r.total for r in rings)
                capacity = [r.capacity for r in rings]
            self.missed += sum(
                max(0, t - c - k) for t, c, k in zip(totals, self._cursors, capacity, strict=True)
            )
            self._cursors = totals
            for seg in segments:
                if seg.index not in self._open and seg.index not in self._frozen:
                    self._open[seg.index] = Tally(seg.measure_start, seg.end)
            for seg in segments:  # a segment closed since: its end first, then its records
                tally = self._open.get(seg.index)
                if tally is not None and seg.end is not None:
                    tally.hi = seg.end
            for tally in (self.run, *self._open.values()):
                tally.add(*new)
            if now is not None:
                for seg in segments:
                    closed = seg.end is not None and now >= seg.end + FREEZE_AFTER_S
                    if closed and seg.index in self._open:
                        sessions = self._session_source()
                        entry = self._entry(seg, sessions, now, self._t0, "run")
                        self._frozen[seg.index] = entry
                        del self._open[seg.index]

    def segment_entries(
        self,
        segments: Sequence[Segment],
        sessions: Sequence[SessionInfo],
        now: float,
        t0: float,
        kind: str = "run",
    ) -> list[dict[str, Any]]:
        """Every segment's report entry: a frozen one as it was when it closed, an open
        one (or one just closed) from its tally now. Frozen entries are shared dicts:
        callers copy before they change one."""
        with self._lock:
            self.update(segments, now)
            out = []
            for seg in segments:
                frozen = self._frozen.get(seg.index)
                if frozen is not None:
                    out.append(frozen)
                else:
                    out.append(self._entry(seg, sessions, now, t0, kind))
            return out

    def bind(self, sessions: Callable[[], Sequence[SessionInfo]], t0: float) -> None:
        """``sessions()``: the run's sessions as a report lists them (a frozen entry lists
        them as they were when it froze); ``t0``: the run's start on the engine's clock
        (a segment's ``start_s`` counts from it)."""
        self._session_source, self._t0 = sessions, t0

    def _entry(
        self, seg: Segment, sessions: Sequence[SessionInfo], now: float, t0: float, kind: str
    ) -> dict[str, Any]:
        end = seg.end if seg.end is not None else now
        lo = min(seg.measure_start, end)
        return segment_entry(
            seg,
            sessions,
            self._open[seg.index],
            self._recent(lo, end),
            now,
            t0,
            kind,
            self.paused_in(lo, end),
        )

    def _recent(self, lo: float, end: float) -> np.ndarray:
        """The items delivered in [max(lo, end − the stability test's span), end]."""
        since = max(lo, end - STABLE_WINDOWS * STABLE_WINDOW_S - STABLE_WINDOW_S)
        with self._store.lock:
            items = self._store.items.since("result", since)
        return pick(items, (items["result"] >= since) & (items["result"] <= end))
