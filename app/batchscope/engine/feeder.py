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

It also keeps the run's timers (:meth:`Feeder.at`): a fault that ends by itself
(a stalled or bursting session, a source error, a slow device) ends on this
clock, and a session's pace can be scaled for a while (:meth:`Feeder.scale`:
0 stalls it, K > 1 is a burst).

A network stream is not paced (``source.paced`` is False): it arrives at its own rate,
and the feeder publishes a window for each of its sessions when its capture thread says
a frame arrived (:meth:`Feeder._stream_frame`), within one wake-up. A stall holds such a
session as any other; a burst cannot speed a live stream up and leaves it as it is.

Publishing happens under the feeder's lock, so once :meth:`Feeder.set_sessions`
returns, no window of a session it dropped is still on its way to a mailbox
(the roster empties a retired session's mailbox only after that).
"""

from __future__ import annotations

import heapq
import math
import random
import threading
import time
from collections.abc import Callable

from batchscope.engine.loop import LoopThread
from batchscope.engine.session import Mailboxes, Session, first_frame_delay
from batchscope.engine.streams import StreamSource

#: ``on_stream(source, lost, phrase)``: a stream was lost (True) or is back (False).
StreamListener = Callable[[StreamSource, bool, str], None]


class Feeder(LoopThread):
    STOP_TIMEOUT_S = 1.0

    def __init__(
        self,
        mailboxes: Mailboxes,
        on_error: Callable[[str], object],
        clock: Callable[[], float] = time.perf_counter,
        seed: int = 0,
        on_stream: StreamListener | None = None,
    ) -> None:
        super().__init__("batchscope-feeder")
        self._on_stream = on_stream
        self._streams: dict[int, list[int]] = {}  # id(stream source) -> its sessions
        self._ready: set[int] = set()  # stream sessions with a frame not yet published
        self._mailboxes = mailboxes
        self._on_error = on_error
        self._clock = clock
        self._rng = random.Random(seed)  # the sessions' phases, drawn as they join
        self._lock = threading.Lock()
        self._sessions: dict[int, Session] = {}
        self._fps: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []
        self._scale: dict[int, float] = {}  # session -> pace factor (0: stalled, K: burst)
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = 0
        self._paused = False

    def set_sessions(self, sessions: list[Session], fps: float | None) -> None:
        """Replace the set of paced sessions; sessions kept keep their schedule."""
        now = self._clock()
        streams = [s for s in sessions if not s.source.paced]
        for s in streams:
            if isinstance(s.source, StreamSource):
                s.source.subscribe(self, self._stream_frame, self._stream_status)
        with self._lock:
            self._sessions = {s.id: s for s in sessions}
            self._fps = {s.id: fps or s.source.fps for s in sessions}
            self._streams = {}
            for s in streams:
                self._streams.setdefault(id(s.source), []).append(s.id)
            self._ready &= {s.id for s in streams}
            kept = [(due, sid) for due, sid in self._heap if sid in self._sessions]
            kept = [(due, sid) for due, sid in kept if self._sessions[sid].source.paced]
            scheduled = {sid for _, sid in kept}
            for s in sessions:
                if s.id not in scheduled and s.source.paced:
                    kept.append((now + first_frame_delay(self._rng, self._fps[s.id]), s.id))
            heapq.heapify(kept)
            self._heap = kept
        self._wake.set()

    def rephase(self, seed: int) -> None:
        """Give every paced session a new phase, as a fresh run with ``seed`` does.

        An experiment starts from its own base: whatever phases the run before left
        (sessions that joined at other instants, another seed), they are drawn again
        as at a fresh start: one draw each from ``random.Random(seed)``, in id order
        (:func:`first_frame_delay`), from now.
        """
        now = self._clock()
        with self._lock:
            self._rng = random.Random(seed)
            self._heap = [
                (now + first_frame_delay(self._rng, self._fps[sid]), sid)
                for sid in sorted(self._sessions)
                if self._sessions[sid].source.paced
            ]
            heapq.heapify(self._heap)
        self._wake.set()

    def set_paused(self, paused: bool) -> None:
        """While paused no session publishes (each holds its window, as in a stall).

        A flag of its own, not an empty session set: a live change made while
        paused (sessions, fps, a recovered source) re-makes the session set, and
        must not start feeding again (the timers still run).
        """
        with self._lock:
            self._paused = paused
            if not paused:  # each session's next frame after now, in its phase: the
                # paused stretch is no lateness of the host's (nobody was due then)
                now = self._clock()
                heap = []
                for due, sid in self._heap:
                    if due < now:
                        period = 1.0 / (self._fps[sid] * (self._scale.get(sid, 1.0) or 1.0))
                        due += math.ceil((now - due) / period) * period
                    heap.append((due, sid))
                heapq.heapify(heap)
                self._heap = heap
        self._wake.set()

    def scale(self, sid: int, factor: float) -> None:
        """Pace session ``sid`` at ``factor`` × its fps (0: it sends nothing; 1: normal)."""
        with self._lock:
            if factor == 1.0:
                self._scale.pop(sid, None)
            else:
                self._scale[sid] = factor
            if factor > 1.0:  # a burst starts now, not at the next normal frame
                self._heap = [
                    (min(due, self._clock()), s) if s == sid else (due, s) for due, s in self._heap
                ]
                heapq.heapify(self._heap)
        self._wake.set()

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn()`` on the feeder thread at ``t`` (s on its clock); dropped on stop."""
        with self._lock:
            self._timer_seq += 1
            heapq.heappush(self._timers, (t, self._timer_seq, fn))
        self._wake.set()

    def _run(self) -> None:
        while not self._terminate:
            try:
                self._run_timers()
                with self._lock:
                    # paused: nobody publishes, so only the timers wake it (a schedule
                    # ticking at every session's fps for nothing cost a sixth of a core)
                    due = self._heap[0][0] if self._heap and not self._paused else None
                    if self._timers and (due is None or self._timers[0][0] < due):
                        due = self._timers[0][0]
                    arrived = bool(self._ready)
                now = self._clock()
                if arrived:
                    self._publish_arrived(now)
                if due is None or due > now:
                    self._wake.wait(0.1 if due is None else min(0.1, due - now))
                    self._wake.clear()
                    continue
                self._publish_due(now)
            except Exception as exc:  # never die silently: report, wait a little, go on
                self._on_error(f"feeder: {type(exc).__name__}: {exc}")
                self._wake.wait(0.1)

    def _run_timers(self) -> None:
        while True:
            with self._lock:
                if not self._timers or self._timers[0][0] > self._clock():
                    return
                _, _, fn = heapq.heappop(self._timers)
            try:
                fn()
            except Exception as exc:  # one timer failing must not stop the pacing
                self._on_error(f"feeder timer: {type(exc).__name__}: {exc}")

    def _stream_frame(self, source: StreamSource) -> None:
        """A stream's capture thread: a frame arrived; its sessions publish it."""
        with self._lock:
            sids = self._streams.get(id(source))
            if not sids:
                return
            self._ready.update(sids)
        self._wake.set()

    def _stream_status(self, source: StreamSource, lost: bool, phrase: str) -> None:
        with self._lock:
            playing = id(source) in self._streams
        if playing and self._on_stream is not None:
            self._on_stream(source, lost, phrase)

    def _publish_arrived(self, now: float) -> None:
        """Publish a window for each stream session whose source has a new frame."""
        with self._lock:
            ready, self._ready = self._ready, set()
            for sid in sorted(ready):
                session = self._sessions.get(sid)
                if session is None or session.state != "running":
                    continue
                if self._scale.get(sid, 1.0) == 0 or self._paused:
                    continue  # stalled (or all paused): the frame goes by unsent
                self._publish(session, now)

    def _publish(self, session: Session, now: float, publish_late: float = 0.0) -> None:
        """Session's next window into its mailbox (under the lock); a failing source marks
        the session failed, the others go on. ``publish_late``: s past its due time (the host's)."""
        try:
            window = session.next_window(now, publish_late)
        except Exception as exc:  # a source failing must not stop the others
            session.fail(str(exc))
            self._on_error(f"session {session.id}: {exc}")
            return
        if window is not None:
            self._mailboxes.publish(window)

    def _publish_due(self, now: float) -> None:
        with self._lock:
            due_sessions = []
            while self._heap and self._heap[0][0] <= now:
                due, sid = heapq.heappop(self._heap)
                session = self._sessions[sid]
                factor = self._scale.get(sid, 1.0)
                period = 1.0 / (self._fps[sid] * (factor or 1.0))
                nxt = due + period
                if nxt < now - period:
                    # fell behind (a host that woke the feeder late): skip the frames
                    # missed, do not burst, and keep the phase (``now + period`` put every
                    # late session on one instant: a long run drifted into lock-step)
                    nxt = due + (math.floor((now - due) / period) + 1) * period
                if session.state == "running":
                    heapq.heappush(self._heap, (nxt, sid))
                    # a stalled session (or all, paused) keeps its schedule, sends nothing
                    if factor > 0 and not self._paused:
                        due_sessions.append((session, due))
            for session, due in due_sessions:
                self._publish(session, now, max(0.0, now - due))
