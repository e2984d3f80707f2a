"""The feeder: one thread that paces every session like a live client.

Why one thread and not one per session: with 16–64 sessions at 30 fps, a
thread each would spend the GIL on wake-ups and jitter each other; a single
loop over a deadline heap publishes each frame within a fraction of a
millisecond of its due time and has one stop path.

Each session gets its own phase: a random offset inside the frame interval
(from the run's seed) so sessions do not publish in lock-step, and a frame
offset into its source (set by the engine) so they do not show the same frame.

How it stops: ``stop()`` sets the terminate flag, then the event the loop
sleeps on; the loop ends within one wake-up (≤ 0.1 s). A session whose source
fails is marked failed and reported; the others go on.

Publishing happens under the feeder's lock, so once :meth:`Feeder.set_sessions`
returns, no window of a session it dropped is still on its way to a mailbox
(the roster empties a retired session's mailbox only after that).
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections.abc import Callable

from batchscope.engine.session import Mailboxes, Session, first_frame_delay


class Feeder:
    def __init__(
        self,
        mailboxes: Mailboxes,
        on_error: Callable[[str], None],
        clock: Callable[[], float] = time.perf_counter,
        seed: int = 0,
    ) -> None:
        self._mailboxes = mailboxes
        self._on_error = on_error
        self._clock = clock
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._terminate = False
        self._sessions: dict[int, Session] = {}
        self._fps: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []
        self._thread = threading.Thread(target=self._run, name="batchscope-feeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        self._terminate = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def set_sessions(self, sessions: list[Session], fps: float | None) -> None:
        """Replace the set of paced sessions; sessions kept keep their schedule."""
        now = self._clock()
        with self._lock:
            old = set(self._sessions)
            self._sessions = {s.id: s for s in sessions}
            self._fps = {s.id: fps or s.source.fps for s in sessions}
            kept = [(due, sid) for due, sid in self._heap if sid in self._sessions]
            for s in sessions:
                if s.id not in old:
                    kept.append((now + first_frame_delay(self._rng, self._fps[s.id]), s.id))
            heapq.heapify(kept)
            self._heap = kept
        self._wake.set()

    def _run(self) -> None:
        while not self._terminate:
            try:
                with self._lock:
                    due = self._heap[0][0] if self._heap else None
                now = self._clock()
                if due is None or due > now:
                    self._wake.wait(0.1 if due is None else min(0.1, due - now))
                    self._wake.clear()
                    continue
                self._publish_due(now)
            except Exception as exc:  # never die silently: report, wait a little, go on
                self._on_error(f"feeder: {type(exc).__name__}: {exc}")
                self._wake.wait(0.1)

    def _publish_due(self, now: float) -> None:
        with self._lock:
            due_sessions = []
            while self._heap and self._heap[0][0] <= now:
                due, sid = heapq.heappop(self._heap)
                session = self._sessions[sid]
                period = 1.0 / self._fps[sid]
                nxt = due + period
                if nxt < now - period:  # fell behind (e.g. a stall): skip, do not burst
                    nxt = now + period
                if session.state == "running":
                    heapq.heappush(self._heap, (nxt, sid))
                    due_sessions.append(session)
            for session in due_sessions:
                try:
                    window = session.next_window(now)
                except Exception as exc:  # a source failing must not stop the others
                    session.fail(str(exc))
                    self._on_error(f"session {session.id}: {exc}")
                    continue
                if window is not None:
                    self._mailboxes.publish(window)
