"""The host check: how late this machine's timers fire, probed once at the start.

Why: a busy machine (slides, a video call, a build beside the run) wakes threads late,
and the tail of every latency then carries the machine's delay. Before the first
figure, :func:`probe_timers` sleeps in short steps for about a second and measures how
much later than asked each sleep ended; its p99 says ``quiet`` or ``busy``
(:func:`~batchscope.engine.report.host.host_word`), so a warning can come before the
numbers that it would explain. The run's own windows then measure it all along
(``host_late_ms``).

It runs on a thread of its own while the engine opens its sources (a decode takes that
long anyway), so it costs no time; :class:`HostProbe` holds the answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from batchscope.engine.report.host import host_word

PROBE_S = 1.0
STEP_S = 0.005  # a 5 ms sleep: shorter than a frame, longer than a timer slack


def probe_timers(
    seconds: float = PROBE_S,
    step_s: float = STEP_S,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Sleep ``step_s`` at a time for ``seconds``: p50 and p99 ms of how late each sleep
    ended, and the word for it (``quiet``/``busy``)."""
    lateness = []
    end = clock() + seconds
    while clock() < end and not (stop is not None and stop.is_set()):
        t = clock()
        time.sleep(step_s)
        lateness.append(clock() - t - step_s)
    ms = np.maximum(np.asarray(lateness or [0.0]), 0.0) * 1000.0
    p50, p99 = np.percentile(ms, [50, 99])
    return {
        "p50_ms": round(float(p50), 3),
        "p99_ms": round(float(p99), 3),
        "sleeps": len(lateness),
        "verdict": host_word(float(p99)),
    }


class HostProbe:
    """:func:`probe_timers` on a thread; :attr:`result` once it ended (None before)."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.result: dict[str, Any] | None = None
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name="batchscope-host-probe", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event | None) -> None:
        self.result = probe_timers(stop=stop)

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        self._thread.join(timeout)
        return self.result


def probe_phrase(result: dict[str, Any]) -> str:
    """The probe in one line, for the terminal and the status bar."""
    if result["verdict"] == "quiet":
        return f"host: quiet (timers late by p99 {result['p99_ms']:.1f} ms over a 1 s probe)"
    return (
        f"host: busy (timers late by p99 {result['p99_ms']:.1f} ms over a 1 s probe): "
        "other work is using this machine, and latency tails will include its delay "
        "(each report's host_late_ms says how much)"
    )
