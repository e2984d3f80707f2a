"""Segments: the stretches of a run between two applied changes.

Why: after a change, figures over "the newest N windows" mix the old and the
new setting for tens of seconds, and a comparison of settings is only honest
when each setting's numbers are kept apart. So every applied change (policy
or knob, sessions, fps, precision, resolution, device, a fault…) closes the
running segment and opens a new one at the instant the change *took effect*
(``Engine.apply`` opens it after the swap, so a resolution change that
re-decodes a long file opens it when the new frames flow).

The settling rule: a segment's statistics leave out its first
``SETTLE_S`` = 1 s. Across a change the mailboxes still hold windows made
under the old setting, an adaptive cap or a fuller queue needs a few batches
to find its level, and a new backend's first batches are colder; one second
is ≥ 30 frames of every session at 30 fps, enough for all of that on every
profile measured (the slowest batch, 16 at 512×288 fp32 on the laptop GPU,
is 0.37 s). A segment is *stable* when perf_analyzer's test holds on its
measured interval (``IsInferWindowStable`` and ``IsLatencyWindowStable`` in
Triton's client): over its last three whole 1 s windows, max ÷ min ≤ 1.1 in
throughput and in average latency. A segment shorter than three measured
seconds is not stable: there is not enough of it to say.

Too short to measure: a segment whose measured interval (after its settling
second) is under ``MIN_MEASURED_S`` = 1 s has no figures at all (``overall``
and ``sessions`` null, ``too_short`` true), in every view. A session's fps is
delivered ÷ measured s, so each frame more or less moves it by 1 ÷ measured:
over 0.02 s one frame reads 50 fps for a 30 fps session, and Jain's index
over one or two results per session is noise. One second holds ≥ 30 frames
of each session at 30 fps, so a frame moves fps by ≤ 3%.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.stats import pick

SETTLE_S = 1.0
MIN_MEASURED_S = 1.0
STABLE_WINDOWS = 3
STABLE_WINDOW_S = 1.0
STABLE_TOLERANCE = 0.10


@dataclass
class Segment:
    """One segment; times in s on the engine's clock."""

    index: int
    start: float  # when the change took effect
    changes: dict[str, Any]  # field -> new value (empty for the first segment)
    config: RunConfig
    end: float | None = None  # None while it runs
    caption: str = ""
    error: str | None = None  # a change that failed here: the run went on as before
    # the faults in effect while it runs (Fault.as_json() each), those started here too
    faults: tuple[dict[str, Any], ...] = ()

    @property
    def measure_start(self) -> float:
        return self.start + SETTLE_S

    def settling(self, now: float) -> bool:
        return now < self.measure_start


class SegmentLog:
    """The run's segments in order; thread-safe (the worker's callers and the UI read it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._segments: list[Segment] = []

    def open(
        self,
        at: float,
        config: RunConfig,
        changes: Mapping[str, Any] | None = None,
        caption: str = "",
        error: str | None = None,
        faults: Sequence[Mapping[str, Any]] = (),
    ) -> Segment:
        """Close the running segment at ``at`` and start the next one there."""
        with self._lock:
            if self._segments and self._segments[-1].end is None:
                self._segments[-1].end = at
            seg = Segment(
                len(self._segments),
                at,
                dict(changes or {}),
                config,
                None,
                caption,
                error,
                tuple(dict(f) for f in faults),
            )
            self._segments.append(seg)
            return seg

    def relabel(
        self,
        index: int,
        changes: Mapping[str, Any],
        caption: str,
        faults: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """Say what segment ``index`` stands for (an experiment's step 0); False if gone."""
        with self._lock:
            if index >= len(self._segments):
                return False
            seg = self._segments[index]
            seg.changes, seg.caption = dict(changes), caption
            seg.faults = tuple(dict(f) for f in faults)
            return True

    def close(self, at: float) -> None:
        with self._lock:
            if self._segments and self._segments[-1].end is None:
                self._segments[-1].end = at

    def current(self) -> Segment | None:
        with self._lock:
            return self._segments[-1] if self._segments else None

    def all(self) -> list[Segment]:
        with self._lock:
            return list(self._segments)


def presence(segments: Sequence[Segment], sid: int, lo: float, hi: float) -> float:
    """Seconds of [lo, hi] session ``sid`` existed: the segments whose config has it
    (``sid`` < their session count), each up to its end (or ``hi``). A session's fps in a
    report divides by this, so one that joined late is not counted over the whole run."""
    total = 0.0
    for seg in segments:
        if sid < seg.config.sessions:
            end = hi if seg.end is None else min(seg.end, hi)
            total += max(0.0, end - max(seg.start, lo))
    return total if segments else hi - lo


def is_stable(items: np.ndarray, start: float, end: float) -> bool:
    """perf_analyzer's test on ``items`` delivered in [start, end] (see the module doc)."""
    n = int((end - start) // STABLE_WINDOW_S)
    if n < STABLE_WINDOWS:
        return False
    throughput, latency = [], []
    for k in range(n - STABLE_WINDOWS, n):
        lo = start + k * STABLE_WINDOW_S
        inside = pick(items, (items["result"] >= lo) & (items["result"] < lo + STABLE_WINDOW_S))
        if len(inside) == 0:
            return False
        throughput.append(len(inside) / STABLE_WINDOW_S)
        latency.append(float(np.mean(inside["result"] - inside["arrival"])))
    return all(_agree(values) for values in (throughput, latency))


def _agree(values: Sequence[float]) -> bool:
    """perf_analyzer's rule: max ÷ min within 1 + STABLE_TOLERANCE."""
    return min(values) > 0 and max(values) / min(values) <= 1.0 + STABLE_TOLERANCE
