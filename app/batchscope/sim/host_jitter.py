"""The host's delay in the simulator: a measured machine's late wake-ups, replayed.

Why: the simulator's threads are never late, so on a busy machine live ÷ predicted p99
reads 1.5–8× with nothing to say why (issue 25). A run measures how late its host was
(the report's ``host_jitter``: the feeder's publish lateness per frame and the worker's
wake lateness per batch, as quantiles 0…100 %); ``simulate|plan --host-jitter REPORT``
replays them: every frame is published late by a draw from the first, the worker, when
it was idle, starts deciding late by a draw from the second, and every batch's device
time ends late by a draw from the third (an emulated device's timer, ``device_ms``). A draw is the
inverse of the measured distribution at a uniform number from the run's seed, so a
simulation stays a pure function of its inputs.

How the draws enter the simulator's model, and what they leave out: a frame's delay
never reorders its own session's frames (a late feeder publishes them in order); a
frame due before a change but delayed past it is dropped with its schedule (rare: a
change and a delay longer than the gap to it); the worker is late only when it was
idle (a batch that ends leads straight into the next decision, as live). ``none`` (the
default) keeps the simulator exactly as it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from batchscope.engine.report.host import host_word


class HostJitterError(ValueError):
    """A ``--host-jitter`` file that cannot be replayed; ``str()`` names it and why."""


@dataclass(frozen=True)
class HostJitter:
    """A measured host's lateness: quantiles 0, 1, … 100 % in ms, of publishes and wakes."""

    publish_ms: tuple[float, ...]
    wake_ms: tuple[float, ...]
    source: str = "measured"
    device_ms: tuple[float, ...] = ()  # how late an emulated device's batches ended

    @classmethod
    def from_report(cls, report: Mapping[str, Any], source: str) -> HostJitter:
        jitter = report.get("host_jitter")
        if not isinstance(jitter, Mapping):
            raise HostJitterError(
                f"{source}: no host_jitter in it (a report of batchscope run, or the app's "
                "Export numbers, measures it; a simulation's report has none)"
            )
        publish, wake = (
            _quantiles(jitter, "publish_ms", source),
            _quantiles(jitter, "wake_ms", source),
        )
        if not publish and not wake:
            raise HostJitterError(f"{source}: its host_jitter is empty (nothing was measured)")
        return cls(publish, wake, source)

    def _draw(self, quantiles: Sequence[float], u: np.ndarray) -> np.ndarray:
        if not quantiles:
            return np.zeros_like(u)
        grid = np.linspace(0.0, 1.0, len(quantiles))
        return np.interp(u, grid, np.asarray(quantiles)) / 1000.0

    def publish_delays(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Delays (s) for frames due in an array of ``shape``."""
        return self._draw(self.publish_ms, rng.random(shape))

    def wake_delay(self, u: float) -> float:
        """The worker's lateness (s) at the uniform number ``u``."""
        return float(self._draw(self.wake_ms, np.array([u]))[0])

    def device_delay(self, u: float) -> float:
        """How late a batch's device time ends (s) at the uniform number ``u``."""
        return float(self._draw(self.device_ms, np.array([u]))[0])

    def to_json(self) -> dict[str, Any]:
        """What a simulated report says of the host it modelled."""

        def pct(q: tuple[float, ...], p: int) -> float:
            return round(q[round(p * (len(q) - 1) / 100)], 3) if q else 0.0

        return {
            "source": self.source,
            "publish_ms": {"p50": pct(self.publish_ms, 50), "p99": pct(self.publish_ms, 99)},
            "wake_ms": {"p50": pct(self.wake_ms, 50), "p99": pct(self.wake_ms, 99)},
            "device_ms": {"p50": pct(self.device_ms, 50), "p99": pct(self.device_ms, 99)},
        }


def _quantiles(jitter: Mapping[str, Any], key: str, source: str) -> tuple[float, ...]:
    values = jitter.get(key, [])
    if not isinstance(values, list) or not all(
        isinstance(v, int | float) and np.isfinite(v) and v >= 0 for v in values
    ):
        raise HostJitterError(f"{source}: host_jitter.{key} is not a list of ms, 0 or more")
    if values != sorted(values):
        raise HostJitterError(f"{source}: host_jitter.{key} is not in order (quantiles rise)")
    return tuple(float(v) for v in values)


def load_host_jitter(text: str) -> HostJitter | None:
    """``--host-jitter``'s value: ``none`` (None), or a report's path (HostJitterError if it
    cannot be read or has no measurement)."""
    if text.strip().lower() == "none":
        return None
    path = Path(text)
    if not path.is_file():
        raise HostJitterError(f"{text}: no such file (give a report of batchscope run, or none)")
    try:
        report = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HostJitterError(f"{text}: not a JSON report ({type(exc).__name__})") from None
    if isinstance(report, list):  # simulate's list of reports: not a measurement
        raise HostJitterError(f"{text}: a list of simulated reports, not a run's report")
    if not isinstance(report, Mapping):
        raise HostJitterError(f"{text}: not a report (a JSON object)")
    return HostJitter.from_report(report, text)


def measured_jitter(report: Mapping[str, Any]) -> HostJitter | None:
    """A live run's host lateness to predict it with, when its host was busy (the status
    bar's rule, ``host_word``); None on a quiet host, so that predictions stay clean.
    The app's segment predictions use it, and so does what compares a live run with
    the plan (a starved host's late wake-ups are not the policy's)."""
    late = report.get("overall", {}).get("host_late_ms", {}).get("p99", 0.0)
    if host_word(late) == "quiet":
        return None
    try:
        return HostJitter.from_report(report, "this machine, measured in this run")
    except HostJitterError:
        return None
