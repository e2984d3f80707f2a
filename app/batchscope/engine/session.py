"""Sessions and their latest-only mailboxes.

A session is one simulated client: it owns a 3-frame window over its source
and publishes the latest window each time a frame arrives. The mailbox keeps
only the newest untaken window per session; a window replaced before the
worker took it counts one *overwritten* frame (the production worker's rule).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from batchscope.engine.policies import Waiting
from batchscope.engine.sources import FrameSource

WINDOW = 3  # BlurBall consumes the 3 most recent frames


@dataclass(frozen=True)
class Window:
    """What a session publishes: its 3 newest frames (oldest first) and when."""

    session: int
    seq: int  # frame counter of the newest frame in this session
    frame_index: int  # index of the newest frame in the source (for ground truth)
    frames: tuple[np.ndarray, ...]
    arrival: float  # s, perf_counter clock
    scale: tuple[float, float] = (1.0, 1.0)  # model pixels -> source pixels (x, y)


class Session:
    """One client: source, phase, 3-frame window and state."""

    def __init__(self, sid: int, source: FrameSource, phase_frames: int = 0) -> None:
        self.id = sid
        self.source = source
        self.phase_frames = phase_frames
        self.seq = 0
        self.state = "running"  # running | error | stopped
        self.error: str | None = None
        self._frames: deque[np.ndarray] = deque(maxlen=WINDOW)
        (sw, sh), (mw, mh) = source.source_size, source.resolution
        self._scale = (sw / mw, sh / mh)

    def next_window(self, now: float) -> Window | None:
        """Advance one frame; the new window once 3 frames are in, else None."""
        index = self.phase_frames + self.seq
        self._frames.append(self.source.frame(index))
        self.seq += 1
        if len(self._frames) < WINDOW:
            return None
        return Window(self.id, self.seq, index, tuple(self._frames), now, self._scale)

    def fail(self, message: str) -> None:
        self.state = "error"
        self.error = message


class Mailboxes:
    """Latest-only mailboxes of all sessions, with one condition the worker waits on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)
        self._pending: dict[int, Window] = {}
        self._since: dict[int, float] = {}  # when each non-empty mailbox became non-empty
        self._overwritten: dict[int, int] = {}
        self._published: dict[int, int] = {}

    def publish(self, window: Window) -> bool:
        """Put ``window`` in its session's mailbox; True if it replaced an untaken one."""
        with self._lock:
            sid = window.session
            replaced = sid in self._pending
            self._pending[sid] = window
            self._since.setdefault(sid, window.arrival)
            self._published[sid] = self._published.get(sid, 0) + 1
            if replaced:
                self._overwritten[sid] = self._overwritten.get(sid, 0) + 1
            self.changed.notify()
            return replaced

    def waiting(self) -> list[Waiting]:
        with self._lock:
            return [
                Waiting(w.session, w.arrival, self._since[w.session])
                for w in self._pending.values()
            ]

    def take(self, sessions: Iterable[int]) -> list[Window]:
        """Remove and return the windows of ``sessions`` (those still there), in that order."""
        with self._lock:
            taken = [self._pending.pop(s) for s in sessions if s in self._pending]
            for w in taken:
                del self._since[w.session]
            return taken

    def wait(self, timeout: float) -> None:
        """Block until a window is published or ``timeout`` seconds pass."""
        with self._lock:
            if timeout > 0:
                self.changed.wait(timeout)

    def wake(self) -> None:
        with self._lock:
            self.changed.notify_all()

    def drop(self, sid: int) -> None:
        """Forget a retired session's pending window (its counters stay for the report)."""
        with self._lock:
            self._pending.pop(sid, None)
            self._since.pop(sid, None)

    def overwritten(self) -> dict[int, int]:
        with self._lock:
            return dict(self._overwritten)

    def published(self) -> dict[int, int]:
        with self._lock:
            return dict(self._published)

    def reset_counts(self) -> None:
        with self._lock:
            self._overwritten.clear()
            self._published.clear()
