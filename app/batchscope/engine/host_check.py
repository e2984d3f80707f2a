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

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


@dataclass(frozen=True)
class LoadMark:
    """Where the process's CPU time and the machine's stolen time stood at an instant."""

    wall: float
    cpu: float  # this process's CPU seconds (all its threads)
    steal: float | None  # the machine's stolen jiffies (/proc/stat; None where unknown)


def load_mark() -> LoadMark:
    return LoadMark(time.monotonic(), time.process_time(), _steal_jiffies())


def host_load_since(mark: LoadMark) -> dict[str, Any]:
    """What the machine did besides since ``mark``: the load average (1 min) against its
    cores, this process's CPU time ÷ wall (1.0: a whole core), and the share of time a
    hypervisor stole from this virtual machine (where /proc/stat tells)."""
    wall = max(1e-9, time.monotonic() - mark.wall)
    out: dict[str, Any] = {
        "cores": os.cpu_count() or 1,
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "process_cpu_share": round((time.process_time() - mark.cpu) / wall, 3),
    }
    steal = _steal_jiffies()
    if steal is not None and mark.steal is not None:
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        out["steal_share"] = round((steal - mark.steal) / ticks / wall / out["cores"], 4)
    return out


def _steal_jiffies() -> float | None:
    try:
        cpu = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return float(cpu[8]) if cpu[0] == "cpu" and len(cpu) > 8 else None
    except (OSError, ValueError):
        return None


class LoadWatch:
    """The machine's load over the last ``span_s`` seconds, from marks taken as asked
    (the app's snapshots, 10-20 a second): whose work delays the threads, others' or
    BatchScope's own (its window drawing on the GIL)."""

    def __init__(self, span_s: float = 5.0) -> None:
        self.span_s = span_s
        self._marks: deque[LoadMark] = deque()
        self._lock = threading.Lock()  # the UI timer and the segment feed both snapshot

    def now(self) -> dict[str, Any]:
        mark = LoadMark(time.monotonic(), time.process_time(), None)
        with self._lock:
            while self._marks and mark.wall - self._marks[0].wall > self.span_s:
                self._marks.popleft()
            self._marks.append(mark)
            first = self._marks[0]
        wall = mark.wall - first.wall
        own = (mark.cpu - first.cpu) / wall if wall > 0.5 else 0.0
        avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return {
            "cores": os.cpu_count() or 1,
            "load_avg_1m": avg,
            "process_cpu_share": round(own, 3),
            # the load besides this process's own (cores): others' work, if any
            "others": None if avg is None else round(max(0.0, avg - own), 2),
        }


#: Others' load (cores) from which lateness is said to be other work's, not BatchScope's.
OTHERS_BUSY = 0.75


def load_phrase(load: dict[str, Any]) -> str:
    """The machine's load in one line (the terminal, beside a busy host)."""
    avg = load.get("load_avg_1m")
    parts = [f"load {avg:g} on {load['cores']} cores" if avg is not None else ""]
    parts.append(f"BatchScope used {load['process_cpu_share']:.2f} of a core")
    if load.get("steal_share"):
        parts.append(f"{100 * load['steal_share']:.1f}% stolen by the hypervisor")
    return "machine: " + ", ".join(p for p in parts if p)


def probe_phrase(result: dict[str, Any]) -> str:
    """The probe in one line, for the terminal and the status bar."""
    if result["verdict"] == "quiet":
        return f"host: quiet (timers late by p99 {result['p99_ms']:.1f} ms over a 1 s probe)"
    return (
        f"host: busy (timers late by p99 {result['p99_ms']:.1f} ms over a 1 s probe): "
        "other work is using this machine, and latency tails will include its delay "
        "(each report's host_late_ms says how much)"
    )
