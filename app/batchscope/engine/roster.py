"""The roster: which sources are open and which sessions play them.

N sessions cycle over the opened sources (session i plays source i mod k),
each with its own frame phase so that sessions on one source do not show the
same frame. A source that failed to open stays in the roster with its reason,
so its sessions can show the error while the others run.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from batchscope.config import FITS
from batchscope.engine.feeder import Feeder
from batchscope.engine.session import Mailboxes, Session
from batchscope.engine.sources import (
    CACHE_BYTES,
    FrameSource,
    OpenCancelled,
    SourceError,
    VideoFileSource,
    is_live_or_synthetic,
    open_source,
)
from batchscope.engine.streams import StreamSettings, StreamSource
from batchscope.paths import sample_videos
from batchscope.urls import is_stream

GOLDEN = (math.sqrt(5) - 1) / 2  # spreads frame phases evenly for any session count


@dataclass
class SourceSlot:
    """An opened source, or the reason it could not be opened."""

    spec: str
    source: FrameSource | None = None
    error: str | None = None


def default_sources() -> tuple[str, ...]:
    videos = sample_videos()
    return tuple(str(p) for p in videos) if videos else ("synthetic",)


def open_slots(
    specs: Iterable[str],
    resolution: tuple[int, int],
    cancel: threading.Event | None = None,
    fit: str = FITS[0],
    progress: Callable[[str, int, int], None] | None = None,
    run_s: float | None = None,
    paced_fps: float | None = None,
    stream: StreamSettings | None = None,
) -> list[SourceSlot]:
    """Open each source; a bad one keeps its reason. OpenCancelled leaves none open.

    Video files share one frame-cache budget (CACHE_BYTES in all, not each), so
    three long files take the memory one would. ``progress(spec, done, total)`` follows
    each file's decoding; ``run_s`` and ``paced_fps``: the run a clip's note says it
    loops in (:func:`~batchscope.engine.sources.loop_note`); ``stream``: how network
    streams connect.
    """
    specs = list(specs)
    files = sum(not is_live_or_synthetic(s) for s in specs)
    budget = CACHE_BYTES // max(1, files)
    slots: list[SourceSlot] = []
    try:
        for spec in specs:
            try:
                told = _progress_of(spec, progress)
                source: FrameSource
                if is_stream(spec):
                    source = StreamSource(spec, resolution, stream, fit, cancel)
                else:
                    source = open_source(
                        spec,
                        resolution,
                        cancel,
                        budget,
                        fit,
                        told,
                        run_s=run_s,
                        paced_fps=paced_fps,
                    )
                slots.append(SourceSlot(spec, source))
            except SourceError as exc:
                slots.append(SourceSlot(spec, error=exc.reason))
    except OpenCancelled:
        close_slots(slots)
        raise
    return slots


class Roster:
    def __init__(self, mailboxes: Mailboxes, feeder: Feeder) -> None:
        self._mailboxes = mailboxes
        self._feeder = feeder
        self._lock = threading.RLock()
        self._slots: list[SourceSlot] = []
        self._sessions: dict[int, Session] = {}
        # sessions retired by a smaller count, with the state they ran in: the report's
        # segments they ran in still list them
        self._retired: dict[int, tuple[Session, str]] = {}

    @property
    def slots(self) -> list[SourceSlot]:
        return list(self._slots)

    def sessions(self) -> list[Session]:
        with self._lock:
            return sorted(self._sessions.values(), key=lambda s: s.id)

    def retired(self) -> list[tuple[Session, str]]:
        """The sessions a smaller count retired (none of the current ids), each with the
        state it ran in, by id."""
        with self._lock:
            return [self._retired[sid] for sid in sorted(self._retired.keys() - self._sessions)]

    def active(self) -> list[Session]:
        return [s for s in self.sessions() if s.state == "running"]

    def has(self, sid: int) -> bool:
        return sid in self._sessions

    def release_caches(self) -> None:
        """Give the video files' frame caches back (sessions paused: a re-decode follows)."""
        with self._lock:
            for slot in self._slots:
                if isinstance(slot.source, VideoFileSource):
                    slot.source.release()
            for session in self._sessions.values():
                session.forget_frames()

    def replace_sources(self, slots: list[SourceSlot]) -> None:
        """Swap in newly opened sources (e.g. at another resolution): the sessions of the
        sources replaced restart; a source ``slots`` keeps (the same object, e.g. a file
        beside a stream opened again) stays open and its sessions play on."""
        with self._lock:
            old, self._slots = self._slots, slots
            kept = {id(s.source) for s in slots if s.source is not None}
            for sid, session in list(self._sessions.items()):
                if id(session.source) not in kept:
                    del self._sessions[sid]
        close_slots(s for s in old if id(s.source) not in kept)

    def add(self, slot: SourceSlot) -> None:
        with self._lock:
            self._slots.append(slot)

    def remove(self, spec: str) -> bool:
        """Drop a source (not the last one); False if nothing would be left."""
        with self._lock:
            keep = [s for s in self._slots if s.spec != spec]
            gone = [s for s in self._slots if s.spec == spec]
            if not keep:
                return False
            self._slots = keep
        close_slots(gone)
        return True

    def sync(self, n: int, fps: float | None) -> None:
        """Make ``n`` sessions cycling over the sources, retire the rest, re-pace the feeder."""
        with self._lock:
            retired = [self._sessions.pop(sid) for sid in [s for s in self._sessions if s >= n]]
            for session in retired:
                self._retired[session.id] = (session, session.state)
                session.state = "stopped"
            for sid in range(n):
                slot = self._slots[sid % len(self._slots)] if self._slots else None
                current = self._sessions.get(sid)
                if current is not None and slot is not None and current.source is slot.source:
                    continue
                self._sessions[sid] = _make_session(sid, slot)
            # re-pace first: once the feeder has let go of a retired session it publishes
            # nothing more for it, so its mailbox can be emptied for good
            self._feeder.set_sessions(self.active(), fps)
            for session in retired:
                self._mailboxes.drop(session.id)

    def session(self, sid: int) -> Session | None:
        with self._lock:
            return self._sessions.get(sid)

    def recover(self, sid: int, fps: float | None) -> None:
        """A session whose source failed for a while plays again (a fault that ended)."""
        with self._lock:
            session = self._sessions.get(sid)
            if session is None or session.state != "error":
                return
            session.state, session.error = "running", None
            self._feeder.set_sessions(self.active(), fps)

    def signal_stop(self) -> None:
        """Tell every source's thread to end, without waiting (:meth:`close` waits)."""
        for slot in self._slots:
            if slot.source is not None:
                slot.source.signal_stop()

    def close(self, timeout: float | None = None) -> None:
        close_slots(self._slots, timeout)

    def refuse_broken(self, slots: list[SourceSlot]) -> list[SourceSlot]:
        """``slots``, or SourceError (all of them closed) if a source that works now
        fails in them: a live change must not break a working source."""
        working = {s.spec for s in self._slots if s.error is None}
        broken = [(s.spec, s.error) for s in slots if s.error and s.spec in working]
        if broken:
            close_slots(slots)
            raise SourceError(*broken[0])
        return slots

    def cache_estimate(self, specs: tuple[str, ...], resolution: tuple[int, int]) -> int:
        """Bytes the video files of ``specs`` will hold at ``resolution`` (a file opened
        now counts its whole length, or its share of the budget if it was cut; a new one
        its share of CACHE_BYTES)."""
        files = [spec for spec in specs if not is_live_or_synthetic(spec)]
        share = CACHE_BYTES // max(1, len(files))
        frame = resolution[0] * resolution[1] * 3
        opened = {s.spec: s.source for s in self._slots}
        total = 0
        for spec in files:
            source = opened.get(spec)
            if isinstance(source, VideoFileSource) and source.complete:
                total += min(share, source.n_frames * frame)
            else:
                total += share
        return total


def _progress_of(
    spec: str, progress: Callable[[str, int, int], None] | None
) -> Callable[[int, int], None] | None:
    if progress is None:
        return None
    return lambda done, total: progress(spec, done, total)


def cache_bytes(slots: Iterable[SourceSlot]) -> int:
    """Memory the video files' frame caches hold (the budget CACHE_BYTES covers them)."""
    return sum(s.source.nbytes for s in slots if isinstance(s.source, VideoFileSource))


def close_slots(slots: Iterable[SourceSlot], timeout: float | None = None) -> None:
    """Close each slot's source; ``timeout``: within it in all (s), every source told
    first and then each waited for until one deadline (a stream stalled in a read ends
    by itself later); None: each within its own limit."""
    sources = [slot.source for slot in slots if slot.source is not None]
    if timeout is None:
        for source in sources:
            source.close()
        return
    deadline = time.monotonic() + timeout
    for source in sources:
        source.signal_stop()
    for source in sources:
        source.close(max(0.0, deadline - time.monotonic()))


def _make_session(sid: int, slot: SourceSlot | None) -> Session:
    if slot is None or slot.source is None:
        session = Session(sid, _NoSource(slot.spec if slot else "no source"))
        reason = slot.error if slot else "no source opened"
        assert reason is not None, "a SourceSlot holds its source or the error that stopped it"
        session.fail(reason)
        return session
    n = slot.source.n_frames or 1
    return Session(sid, slot.source, int(n * ((sid * GOLDEN) % 1.0)))


class _NoSource(FrameSource):
    """Stands in for a source that failed to open, so its session can show the error."""

    def __init__(self, spec: str) -> None:
        self.spec = self.name = spec
        self.fps = 30.0
        self.source_size = self.resolution = (32, 16)

    def frame(self, index: int) -> np.ndarray:
        raise SourceError(self.spec, "not open")
