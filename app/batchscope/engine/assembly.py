"""Batch assembly: ship each session's new frames only, and stack the windows on the device.

A window is a session's three newest frames; the next window of the same
session shares two of them (the very same frame objects, kept by the
session's deque). So the backend keeps every session's current three frames
in a *frame pool* on the device, and a batch ships only the frames the pool
does not hold yet — one per window when no frame was skipped, three after an
overwrite of two or more — then gathers the windows from the pool on the
device. Host copy and host→device transfer shrink up to 3×.

:class:`FramePool` is the bookkeeping (pure Python, no device): which pool
position holds which frame. :class:`Staging` is the reused host buffer the new
frames are copied into before they travel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchscope.engine.session import WINDOW, Window


class Staging:
    """A reusable host buffer of frames (uint8, height × width × 3 each).

    Grown in powers of two, never shrunk, so steady batching allocates nothing.
    ``allocate(shape)`` returns the buffer (a pinned torch tensor for CUDA, a
    numpy array otherwise); ``host`` is its numpy view.
    """

    def __init__(
        self, resolution: tuple[int, int], allocate: Callable[[tuple], Any] | None = None
    ) -> None:
        self.resolution = resolution
        self._allocate = allocate or (lambda shape: np.empty(shape, np.uint8))
        self.buffer: Any = None
        self.host: np.ndarray | None = None

    def put(self, frames: Sequence[np.ndarray]) -> Any:
        """Copy ``frames`` into rows 0…len-1; returns the whole buffer."""
        m = len(frames)
        if self.host is None or len(self.host) < m:
            cap = 1 << max(0, (m - 1).bit_length())
            w, h = self.resolution
            self.buffer = self._allocate((cap, h, w, 3))
            self.host = self.buffer if isinstance(self.buffer, np.ndarray) else self.buffer.numpy()
        for i, frame in enumerate(frames):
            self.host[i] = frame
        return self.buffer

    def release(self) -> None:
        self.buffer = self.host = None


@dataclass
class Plan:
    """What one batch needs: frames to ship, where they go, and how to gather the windows."""

    uploads: list[np.ndarray]  # frames the pool does not hold yet
    positions: np.ndarray  # int64 (len(uploads),): pool position of each upload
    gather: np.ndarray  # int64 (n, 3): pool positions of each window's frames, oldest first
    slots_needed: int  # pool size (in sessions) this plan needs
    _added: dict[int, int] = field(repr=False)
    _resident: dict[int, tuple[tuple[np.ndarray, ...], list[int]]] = field(repr=False)


class FramePool:
    """Which frames of each session sit at which of its three pool positions.

    Session ``s`` owns positions ``3*slot(s) … 3*slot(s)+2``. A plan is only
    committed after the device has the uploads, so a batch that fails (device
    out of memory) leaves the bookkeeping as it was; ``forget()`` drops it all.
    """

    def __init__(self) -> None:
        self._slot: dict[int, int] = {}
        self._resident: dict[int, tuple[tuple[np.ndarray, ...], list[int]]] = {}

    def plan(self, windows: Sequence[Window]) -> Plan:
        uploads: list[np.ndarray] = []
        positions: list[int] = []
        gather = np.empty((len(windows), WINDOW), np.int64)
        resident: dict[int, tuple[tuple[np.ndarray, ...], list[int]]] = {}
        added: dict[int, int] = {}  # sessions new to the pool (no per-batch copy of all)
        for i, win in enumerate(windows):
            slot = self._slot.get(win.session)
            if slot is None:
                slot = added.setdefault(win.session, len(self._slot) + len(added))
            held, pos = self._resident.get(win.session, ((), []))
            if not pos:
                pos = [WINDOW * slot + k for k in range(WINDOW)]
            keep = _overlap(held, win.frames)
            # the kept frames stay where they are; the new ones take the freed positions
            order = pos[WINDOW - keep :] + pos[: WINDOW - keep]
            uploads.extend(win.frames[keep:])
            positions.extend(order[keep:])
            gather[i] = order
            resident[win.session] = (win.frames, order)
        slots_needed = len(self._slot) + len(added)
        return Plan(uploads, np.array(positions, np.int64), gather, slots_needed, added, resident)

    def commit(self, plan: Plan) -> None:
        """The device now holds ``plan``'s uploads."""
        self._slot.update(plan._added)
        self._resident.update(plan._resident)

    def forget(self) -> None:
        self._slot.clear()
        self._resident.clear()


def _overlap(held: tuple[np.ndarray, ...], frames: tuple[np.ndarray, ...]) -> int:
    """How many of ``held``'s newest frames are (the same objects as) ``frames``' oldest."""
    for k in range(min(len(held), len(frames)), 0, -1):
        if all(held[len(held) - k + j] is frames[j] for j in range(k)):
            return k
    return 0
