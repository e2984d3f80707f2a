"""Sessions, their phases and their latest-only mailboxes.

A session is one simulated client: it owns a 3-frame window over its source
and publishes the latest window each time a frame arrives. The mailbox keeps
only the newest untaken window per session; a window replaced before the
worker took it counts one *overwritten* frame (the production worker's rule).

The live feeder and the simulator share the phase draw (:func:`first_frame_delay`).
The mailbox rule (the newest window replaces a waiting one in place; ``since`` kept
from when the mailbox opened) is :class:`Mailboxes` here, and the simulator's loops
hold it again on their own data (``pending`` in sim/simulator.py and sim/devices.py, the
``waitq`` arrays of sim/fast_loop.py): those are held together by their identity tests.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from batchscope.engine.policies import Waiting
from batchscope.engine.routing import Router
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
    offset: tuple[int, int] = (0, 0)  # model pixels of the source's top-left (letterbox bars)
    publish_late: float = 0.0  # s the feeder published it after it was due (the host's)


def first_frame_delay(rng: random.Random, fps: float) -> float:
    """s from a session joining to its first frame: one draw, uniform in a frame interval.

    The phase keeps sessions from publishing in lock-step. The feeder and the
    simulator both draw it here, one draw per session in id order from
    ``random.Random(seed)``, so a live and a simulated run with the same seed
    start their sessions at the same relative instants.
    """
    return rng.random() / fps


class Session:
    """One client: source, phase, 3-frame window and state."""

    def __init__(self, sid: int, source: FrameSource, phase_frames: int = 0) -> None:
        self.id = sid
        self.source = source
        self.phase_frames = phase_frames
        self.seq = 0
        self.state = "running"  # running | error | stopped (see shown_state for stalled)
        self.error: str | None = None
        self._frames: deque[np.ndarray] = deque(maxlen=WINDOW)
        where = source.placement
        self._scale, self._offset = where.scale, where.offset

    def next_window(self, now: float, publish_late: float = 0.0) -> Window | None:
        """Advance one frame; the new window once 3 frames are in, else None. ``publish_late``:
        how long after its due time the feeder publishes it (s)."""
        index = self.phase_frames + self.seq
        self._frames.append(self.source.frame(index))
        self.seq += 1
        if len(self._frames) < WINDOW:
            return None
        frames = tuple(self._frames)
        return Window(
            self.id, self.seq, index, frames, now, self._scale, self._offset, publish_late
        )

    def forget_frames(self) -> None:
        """Drop the window it is building (views of the frame cache, given back next)."""
        self._frames.clear()

    def current_index(self) -> int:
        """Index in the source of the session's newest frame (-1 before its first)."""
        return self.phase_frames + self.seq - 1

    def fail(self, message: str) -> None:
        self.state = "error"
        self.error = message


def shown_state(session: Session, stalled: bool, paused: bool = False) -> str:
    """The state views and reports show: ``stalled`` for a running session a stall holds,
    ``reconnecting (n)`` for one whose network stream is lost (its source's trouble).

    A stall is a fault on the feeder's pace (the session stays in the feeder's
    schedule and sends nothing), and a stream that reconnects sends nothing until it is
    back, so :attr:`Session.state` stays ``running`` through both. While the run is
    ``paused`` a running session reads ``paused``.
    """
    if session.state != "running":
        return session.state
    if paused:  # the whole run is paused: nobody is being served
        return "paused"
    if stalled:
        return "stalled"
    return session.source.trouble or session.state


class Mailboxes:
    """Latest-only mailboxes of all sessions, with one condition the worker waits on.

    Used by the live feeder and worker and by the simulator (with frameless
    windows on its virtual clock), so both count overwrites by the same rule.
    """

    def __init__(self, on_overwrite: Callable[[int, float], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._on_overwrite = on_overwrite  # (session, t) of each overwrite, for segments
        # Threads inside wait(): publish notifies only when there is one. The simulator
        # publishes ~15 000 windows per run with nobody waiting, and an idle
        # Condition.notify (≈ 0.4 µs) was a third of publish's cost.
        self._sleepers = 0
        self._pending: dict[int, Window] = {}
        # The policy's view of each pending window, made once per publish (not per
        # decision); ``since`` is when the mailbox became non-empty.
        self._waiting: dict[int, Waiting] = {}
        self._overwritten: dict[int, int] = {}
        self._expired: dict[int, int] = {}
        self.published_at = -float("inf")  # arrival of the newest window (the worker's cue)
        # several devices (route): the router, the device each waiting window waits on,
        # and each device's count of waiting windows
        self._router: Router | None = None
        self._where: dict[int, int] = {}
        self._on_device: list[int] = []

    def publish(self, window: Window) -> bool:
        """Put ``window`` in its session's mailbox; True if it replaced an untaken one."""
        with self._lock:
            sid = window.session
            old = self._waiting.get(sid)
            self._pending[sid] = window
            self._waiting[sid] = Waiting(
                sid, window.arrival, window.arrival if old is None else old.since
            )
            if old is not None:
                self._overwritten[sid] = self._overwritten.get(sid, 0) + 1
            elif self._router is not None:  # a mailbox opens: the router places it
                self._place(sid)
            self.published_at = window.arrival
            if self._sleepers:
                if self._router is None:
                    self._changed.notify()
                else:  # one worker per device waits: the one it waits on must wake
                    self._changed.notify_all()
        if old is not None and self._on_overwrite is not None:
            self._on_overwrite(sid, window.arrival)
        return old is not None

    def route(self, router: Router | None) -> None:
        """Place every window on a device by ``router`` (several devices), or stop (None).

        The windows waiting now are placed again, in session order, as if they had just
        opened their mailboxes (a change of devices or router: the new placement).
        """
        with self._lock:
            self._router = router
            self._where = {}
            self._on_device = [0] * router.devices if router is not None else []
            if router is not None:
                for sid in sorted(self._pending):
                    self._place(sid)
            self._changed.notify_all()

    def _place(self, sid: int) -> None:
        """Under the lock: put ``sid``'s waiting window on the device the router picks."""
        assert self._router is not None
        d = self._router.place(sid, self._on_device)
        self._where[sid] = d
        self._on_device[d] += 1

    def _unplace(self, sid: int) -> None:
        """Under the lock: ``sid``'s window left its device (taken, dropped, expired)."""
        d = self._where.pop(sid, None)
        if d is not None:
            self._on_device[d] -= 1

    def waiting(self, device: int | None = None) -> list[Waiting]:
        """The windows waiting (on ``device`` when the router places them)."""
        with self._lock:
            if device is None or self._router is None:
                return list(self._waiting.values())
            where = self._where
            return [w for sid, w in self._waiting.items() if where[sid] == device]

    def waiting_on(self) -> list[int]:
        """Each device's count of waiting windows (empty without a router)."""
        with self._lock:
            return list(self._on_device)

    def take(self, sessions: Iterable[int]) -> list[Window]:
        """Remove and return the windows of ``sessions`` (those still there), in that order."""
        with self._lock:
            taken = [self._pending.pop(s) for s in sessions if s in self._pending]
            for w in taken:
                del self._waiting[w.session]
                if self._router is not None:
                    self._unplace(w.session)
            return taken

    def wait(self, timeout: float) -> None:
        """Block until a window is published or ``timeout`` seconds pass."""
        with self._lock:
            if timeout > 0:
                self._sleepers += 1
                try:
                    self._changed.wait(timeout)
                finally:
                    self._sleepers -= 1

    def wake(self) -> None:
        with self._lock:
            self._changed.notify_all()

    def drop(self, sid: int) -> None:
        """Forget a retired session's pending window (its counters stay for the report)."""
        with self._lock:
            self._pending.pop(sid, None)
            self._waiting.pop(sid, None)
            self._unplace(sid)

    def overwritten(self) -> dict[int, int]:
        with self._lock:
            return dict(self._overwritten)

    def expire(
        self, now: float, max_wait_s: float, device: int | None = None
    ) -> list[tuple[int, float]]:
        """Drop every window that has waited longer than ``max_wait_s`` (``--drop-after-ms``).

        Clockwork's and Clipper's rule: work that can no longer meet its deadline is
        discarded rather than run late. A window's wait counts from its own arrival
        (an overwrite brings a fresh window). Returns (session, now) per drop; each is
        counted as *expired*, apart from overwritten. ``device``: only the windows waiting
        on it (when the router places them).
        """
        with self._lock:
            late = [sid for sid, w in self._pending.items() if now - w.arrival > max_wait_s]
            if device is not None and self._router is not None:
                late = [sid for sid in late if self._where[sid] == device]
            for sid in late:
                del self._pending[sid]
                del self._waiting[sid]
                self._unplace(sid)
                self._expired[sid] = self._expired.get(sid, 0) + 1
        return [(sid, now) for sid in late]

    def expired(self) -> dict[int, int]:
        with self._lock:
            return dict(self._expired)

    def reset_counts(self) -> None:
        """Start counting overwrites afresh (the end of a warm-up, a statistics reset)."""
        with self._lock:
            self._overwritten.clear()
            self._expired.clear()
