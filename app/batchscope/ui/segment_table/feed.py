"""The thread that reads the segment table once a second, off the GUI thread.

Why it exists: ``Engine.report()`` reads every retained record to cut it
into segments (26 ms at 16 sessions after a minute on a laptop CPU, growing
with the run), and the simulator's prediction of a segment costs about as
much again per segment (25 ms each); done on the UI tick (15 Hz) that would
take the GUI thread's whole budget. So this thread computes both once a
second and hands the result to the GUI thread as a Qt signal (queued across
threads), with a segment-scope snapshot whose latencies and stages the
table keeps per segment (the report has percentiles, not histograms).

A closed segment's prediction is made once; the open one's is re-made when
its measured time has grown by half since (so it costs O(log duration)). A
prediction that fails leaves that segment's ``predicted`` None (logged): the
live figures never wait on the simulator.

How it stops: ``stop()`` sets the terminate flag *before* waking the loop
and joins for at most 2 s; a read in progress then finishes and its result
is dropped. An exception in a read is logged and the loop goes on: the
thread never dies silently. A plain ``threading.Thread`` for the same
reason as the command thread: a QThread destroyed while it runs aborts.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, Signal

from batchscope.engine.report.segment import too_short
from batchscope.sim.host_jitter import HostJitter, measured_jitter
from batchscope.sim.prediction import add_predictions

if TYPE_CHECKING:
    from batchscope.engine.snapshot import Snapshot

log = logging.getLogger(__name__)

PERIOD_S = 1.0
REPREDICT_GROWTH = 1.5  # the open segment is predicted again once its measured time grew this much


class ReportingEngine(Protocol):
    running: bool
    paused: bool

    def report(self, kind: str = "run") -> dict[str, Any]: ...

    def snapshot(self, scope: str = "segment") -> Snapshot: ...


@dataclass(frozen=True)
class SegmentUpdate:
    segments: list[dict[str, Any]]  # report["segments"], "predicted" filled where possible
    open_index: int | None  # the segment still running (None once the engine stopped)
    snapshot: Snapshot | None  # segment scope, timeline dropped: kept for the row's plots
    cost_s: float  # what the report and the predictions took


class Predictions:
    """The simulator's prediction per segment, made again only when it would change."""

    def __init__(self, predict: Callable[..., Any] | None = None) -> None:
        self._predict = predict or _predict
        self._made: dict[tuple[int, str], tuple[float, bool, Any]] = {}

    def fill(
        self,
        segments: list[dict[str, Any]],
        open_index: int | None,
        jitter: HostJitter | None = None,
    ) -> list[dict[str, Any]]:
        """Each segment with its ``predicted``; ``jitter``: this machine's measured host
        lateness, modelled in the predictions made now (None: a quiet host, none)."""
        out = []
        for seg in segments:
            key = (seg["index"], json.dumps(seg["config"], sort_keys=True, default=str))
            measured, is_open = float(seg.get("measured_s", 0.0)), seg["index"] == open_index
            made = self._made.get(key)
            stale = (
                made is None
                or (made[1] and not is_open and made[0] != measured)
                or (is_open and measured >= REPREDICT_GROWTH * made[0])
            )
            if stale and not too_short(seg):
                try:
                    predicted = self._predict(seg, jitter) if jitter else self._predict(seg)
                except Exception:  # the table goes on without this prediction
                    log.exception("predicting segment %s failed", seg["index"])
                    predicted = None
                made = (measured, is_open, predicted)
                self._made[key] = made
            out.append({**seg, "predicted": made[2] if made else None})
        return out


def _predict(segment: dict[str, Any], jitter: HostJitter | None = None) -> dict[str, Any] | None:
    return add_predictions({"segments": [segment]}, jitter=jitter)["segments"][0]["predicted"]


class SegmentFeed(QObject):
    """Reads ``engine.report()["segments"]`` every PERIOD_S; ``updated(SegmentUpdate)``.

    ``start=False`` starts no thread (tests call :meth:`read` themselves).
    """

    updated = Signal(object)

    def __init__(self, engine: ReportingEngine, start: bool = True) -> None:
        super().__init__()
        self._engine = engine
        self._predictions = Predictions()
        self._read_paused = False  # the table was read since the run paused
        self._terminate = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(
                target=self._run, name="batchscope-ui-segments", daemon=True
            )
            self._thread.start()

    def refresh(self) -> None:
        """Read now rather than at the next second (e.g. a change was just applied)."""
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._terminate = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def read(self) -> SegmentUpdate | None:
        """One reading (None while the engine is not running)."""
        engine = self._engine
        if not engine.running:
            return None
        if engine.paused and self._read_paused:
            return None  # nothing changes while paused: read once, then wait
        self._read_paused = engine.paused
        t0 = time.perf_counter()
        report = engine.report()
        segments = report["segments"]
        snap = engine.snapshot("segment")
        open_index = segments[-1]["index"] if segments and engine.running else None
        segments = self._predictions.fill(segments, open_index, measured_jitter(report))
        return SegmentUpdate(
            segments, open_index, replace(snap, timeline=[]), time.perf_counter() - t0
        )

    def _run(self) -> None:
        while not self._terminate:
            try:
                update = self.read()
            except Exception:  # a failed read must not end the thread
                log.exception("reading the segment table failed")
                update = None
            if update is not None and not self._terminate:
                self.updated.emit(update)
            self._wake.wait(PERIOD_S)
            self._wake.clear()
