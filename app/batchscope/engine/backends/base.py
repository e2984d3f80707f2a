"""What every backend is: ``run(windows)`` for one batch, its memory, and its errors.

``run(windows, pad)`` does prep → compute → post for one batch and returns the
detections with the three stage end times (s, ``time.perf_counter``). The
worker owns the only thread that calls it (one job on the device at a time).
``pad`` empty rows run after the windows (a fixed batch shape, see
``BatchPolicy.shape``): they take device time like any row and their results
are dropped.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from batchscope.device.memory import rss_mb
from batchscope.engine.session import Window


class BuildCancelled(RuntimeError):
    """A backend build given up half-way because the engine is stopping."""

    def __init__(self) -> None:
        super().__init__("backend build cancelled: the engine is stopping")


class BatchInterrupted(RuntimeError):
    """A batch given up half-way because the worker is stopping (no result recorded)."""

    def __init__(self) -> None:
        super().__init__("batch interrupted: the worker is stopping")


class DeviceOutOfMemory(RuntimeError):
    """The device ran out of memory for a batch of ``batch`` windows."""

    def __init__(self, batch: int, detail: str = "") -> None:
        self.batch = batch
        super().__init__(
            f"out of device memory at batch {batch}" + (f" ({detail})" if detail else "")
        )


@dataclass(frozen=True)
class BatchResult:
    detections: list[Any]  # one Detection or None per window
    prep_end: float
    compute_end: float
    post_end: float
    device_late: float = 0.0  # s its device time ran past its deadline: a late timer (emulated)


class Backend(ABC):
    label: str  # e.g. "cuda:0 (NVIDIA H200)" or "emulated: laptop-8gb"
    resolution: tuple[int, int]  # (width, height) of the windows it accepts
    weights: str  # "untrained weights: timing only" | "checkpoint NAME" | "emulated"
    draws_detections: bool = False

    @abstractmethod
    def run(self, windows: Sequence[Window], pad: int = 0) -> BatchResult: ...

    def memory(self) -> dict[str, float]:
        """Current memory figures in MB (keys depend on what the device can report)."""
        return {"rss_mb": rss_mb()}

    def forget_frames(self) -> None:
        """Let go of the source frames it remembers (which frames its pool holds): the
        next batch ships whole windows. Before the frame caches are given back."""

    def interrupt(self) -> None:
        """Cut short the batch running now (any thread; the worker is stopping).

        A wait that stands for device time (the emulated device) ends at once with
        BatchInterrupted; a real kernel cannot be cut and finishes its batch.
        """

    def close(self) -> None:
        """Free the device."""
