"""Network streams as sources: RTSP, HTTP(S), UDP/RTP and HLS, live, with reconnects.

A stream is the opposite of a file: it arrives at its own rate, with jitter, gaps and
disconnects, and can be neither paced nor looped. So a :class:`StreamSource` is never
paced by the feeder (``paced = False``): its capture thread reads frames as they
arrive, keeps only the latest (the mailbox rule: a slow worker overwrites, never
queues) and tells its listeners, and the feeder publishes a window for each of the
stream's sessions at that instant. A session's fps is what arrives.

Why OpenCV's FFmpeg backend and not PyAV: it is already a dependency, reads every kind
listed (its wheels bundle FFmpeg with the network protocols), takes connect and read
timeouts as open parameters (``CAP_PROP_OPEN_TIMEOUT_MSEC``, ``…READ…``), and gives the
RTCP wall clock of an RTSP stream (``CAP_PROP_STREAM_OPEN_TIME_USEC``, FFmpeg's
``start_time_realtime``), which is what the frame's age needs. FFmpeg's per-open options
(RTSP transport) go through the ``OPENCV_FFMPEG_CAPTURE_OPTIONS`` variable, set under a
lock for the one open that reads it.

Faults that happen by themselves: a read that fails (the stream ended, the server went
away) or no frame within the read timeout (a stall) closes the capture, and the thread
reconnects with backoff (:data:`BACKOFF_S`), each attempt bounded by the connect
timeout; its sessions show ``reconnecting (n)`` and its listeners hear ``lost`` and
``back``. The first open is stricter: a URL that does not answer within the connect
timeout is a :class:`~batchscope.engine.sources.SourceError` in one line.

Credentials: the source's ``spec`` is the URL as given (the session connects with it);
its ``name`` and everything it says are masked (:func:`batchscope.urls.mask_credentials`).

How it stops: ``close()`` sets the stop event that every wait (backoff, reads bounded by
the read timeout) ends on and joins the thread, up to a timeout; the thread releases its
capture as it ends, so a read that cannot be cut short (a stalled stream: up to the read
timeout) is never released under it, and a stop need not wait for it.
"""

from __future__ import annotations

import math
import os
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import cv2
import numpy as np

from batchscope.config import FITS, KNOBS, STREAM_TRANSPORTS, RunConfig
from batchscope.engine.sources import FrameSource, OpenCancelled, SourceError, fourcc, to_model
from batchscope.engine.stats import RECONNECTING
from batchscope.urls import has_credentials, is_hls, is_url, mask_credentials, stream_host

#: Waits before reconnect attempts 1, 2, 3…: doubling from half a second, then every 8 s.
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)

#: Ports a URL implies when it names none (for the connection check).
DEFAULT_PORTS = {"rtsp": 554, "rtsps": 322, "http": 80, "https": 443}

#: A connection's first second is left out of its arrival rate: the frames FFmpeg read
#: while it probed the stream come out at once (42 fps "arriving" from a 30 fps camera).
CONNECT_SETTLE_S = 1.0

#: Arrivals kept for the live rate and the jitter (about 4 s at 30 fps).
RECENT = 128

#: A frame age outside (-MAX_CLOCK_SKEW_MS, MAX_AGE_MS) says the camera's clock and this
#: machine's disagree, not how old the frame is: no age is shown.
MAX_CLOCK_SKEW_MS = 1000.0
MAX_AGE_MS = 60_000.0

_OPTIONS_ENV = "OPENCV_FFMPEG_CAPTURE_OPTIONS"
_OPEN_LOCK = threading.Lock()  # one open at a time reads the options variable


#: The RunConfig fields that make :class:`StreamSettings`: a live change of one opens
#: again the streams it changes (engine/live_change.py), as a transaction.
STREAM_FIELDS = ("stream_transport", "stream_timeout_s", "stream_read_timeout_s")


@dataclass(frozen=True)
class StreamSettings:
    """How streams connect: RTSP transport, connect timeout, read timeout (s)."""

    transport: str = STREAM_TRANSPORTS[0]
    connect_timeout_s: float = KNOBS["stream_timeout_s"].default
    read_timeout_s: float = KNOBS["stream_read_timeout_s"].default

    @classmethod
    def of(cls, config: RunConfig) -> StreamSettings:
        return cls(config.stream_transport, config.stream_timeout_s, config.stream_read_timeout_s)

    def on(self, url: str) -> tuple[str, float, float]:
        """What of these settings a stream of ``url`` is opened with (the transport is
        RTSP's only): two settings with the same for ``url`` open it the same way."""
        return (self.ffmpeg_options(url), self.connect_timeout_s, self.read_timeout_s)

    def ffmpeg_options(self, url: str) -> str:
        """FFmpeg's options for ``url`` in OpenCV's ``key;value|key;value`` form."""
        if url.lower().startswith(("rtsp://", "rtsps://")) and self.transport != "auto":
            return f"rtsp_transport;{self.transport}"
        return ""


class Capture(Protocol):
    """What a stream needs of a capture (cv2.VideoCapture, or a test's fake)."""

    def isOpened(self) -> bool: ...

    def read(self) -> tuple[bool, Any]: ...

    def get(self, prop: int) -> float: ...

    def release(self) -> None: ...


Opener = Callable[[str, StreamSettings], Capture]


def open_capture(url: str, settings: StreamSettings) -> Capture:
    """A cv2.VideoCapture on ``url`` with the settings' timeouts and options."""
    params = [
        cv2.CAP_PROP_OPEN_TIMEOUT_MSEC,
        int(settings.connect_timeout_s * 1000),
        cv2.CAP_PROP_READ_TIMEOUT_MSEC,
        int(settings.read_timeout_s * 1000),
    ]
    with _OPEN_LOCK:
        before = os.environ.get(_OPTIONS_ENV)
        options = settings.ffmpeg_options(url)
        if options:
            os.environ[_OPTIONS_ENV] = options
        else:
            os.environ.pop(_OPTIONS_ENV, None)
        try:
            return cv2.VideoCapture(url, cv2.CAP_FFMPEG, params)
        finally:
            if before is None:
                os.environ.pop(_OPTIONS_ENV, None)
            else:
                os.environ[_OPTIONS_ENV] = before


def check_reachable(url: str, timeout_s: float) -> str | None:
    """Why a TCP stream's server cannot be reached (one phrase), or None if it answers.

    OpenCV says only "not opened"; a connection tried first tells a wrong port
    (refused), a host that does not answer (timeout) and a name that does not resolve
    apart. UDP and RTP have no connection to try: None.
    """
    scheme = url.split(":", 1)[0].lower()
    if scheme not in DEFAULT_PORTS:
        return None
    host, port = stream_host(url)
    if not host:
        return "no host in the URL"
    port = port or DEFAULT_PORTS[scheme]
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except socket.gaierror:
        return f"unknown host {host!r}"
    except ConnectionRefusedError:
        return f"connection refused: nothing listens on {host}:{port}"
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    except OSError as exc:
        return f"cannot connect to {host}:{port} ({exc.strerror or exc})"


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if is_url(url) else ""


def rtsp_answer(url: str, timeout_s: float) -> tuple[int, str] | None:
    """(status code, reason) of the server's answer to DESCRIBE ``url`` (plain RTSP), or
    None when it gives none. Asked only after an open failed, to say why: OpenCV passes
    on none of FFmpeg's words."""
    if _scheme(url) != "rtsp":
        return None
    host, port = stream_host(url)
    shown = re.sub(r"//[^/@]*@", "//", url)  # no credentials on the wire in clear
    request = f"DESCRIBE {shown} RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n\r\n"
    try:
        with socket.create_connection((host, port or DEFAULT_PORTS["rtsp"]), timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(request.encode())
            first = conn.recv(4096).split(b"\r\n", 1)[0].decode("latin-1")
    except OSError:
        return None
    m = re.match(r"RTSP/\d\.\d (\d{3}) ?(.*)", first)
    return (int(m.group(1)), m.group(2).strip()) if m else None


def refused_why(url: str, settings: StreamSettings, elapsed_s: float) -> str:
    """Why a stream that did not open did not, as far as can be told (its server, if it
    has one, answered a connection)."""
    timeout = settings.connect_timeout_s
    if _scheme(url) in ("udp", "rtp"):
        return (
            f"no video stream opened within {timeout:g} s (nothing sending to this port, or "
            "packets FFmpeg cannot read as video)"
        )
    answer = rtsp_answer(url, timeout)
    if answer is not None:
        code, reason = answer
        said = f"the server answered {code} {reason}".rstrip()
        if code == 401:
            return f"{said}: " + (
                "it refused the credentials in the URL"
                if has_credentials(url)
                else "it needs a user and password (rtsp://user:password@host/…)"
            )
        if code == 404:
            return f"{said}: no stream at this path"
        if code == 200 and settings.transport == "tcp":
            return (
                "the server describes the stream but did not play it over TCP (some servers "
                "offer RTP over UDP only): try --stream-transport udp or auto"
            )
        if code != 200:
            return said
    if elapsed_s < 0.9 * timeout and _scheme(url) in DEFAULT_PORTS:
        return (
            f"the server would not play it (after {elapsed_s:.1f} s: a wrong path or "
            "credentials, a transport it does not offer, or a codec this FFmpeg lacks)"
        )
    return (
        f"no video stream opened within {timeout:g} s (no packets arriving, a wrong path "
        "or credentials, or a codec this FFmpeg lacks)"
    )


@dataclass(frozen=True)
class StreamStatus:
    """A stream's state and figures at one instant (what views and reports show)."""

    state: str  # "playing" or "reconnecting (n)"
    own_fps: float | None  # the rate the stream declares
    arrival_fps: float  # frames received per second connected, past each connection's 1st s
    recent_fps: float  # over the last RECENT arrivals (live)
    jitter_ms: float  # RFC 3550 interarrival jitter
    age_ms: float | None  # median age of a frame at arrival (stream wall clock), if known
    frames: int
    reconnects: int  # times it came back
    down_s: float  # seconds without a connection in all
    lost_reason: str | None  # why it was last lost
    last_error: str | None  # why the last reconnect attempt failed (while reconnecting)
    on_demand: bool = False  # of known length
    held: bool = False  # read at its own timestamps (on demand, or HLS)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "own_fps": None if self.own_fps is None else round(self.own_fps, 3),
            "arrival_fps": round(self.arrival_fps, 3),
            "jitter_ms": round(self.jitter_ms, 3),
            "age_ms": None if self.age_ms is None else round(self.age_ms, 2),
            "frames": self.frames,
            "reconnects": self.reconnects,
            "down_s": round(self.down_s, 3),
            "on_demand": self.on_demand,
            "held": self.held,
        }
        if self.lost_reason:
            out["lost_reason"] = self.lost_reason
        if self.last_error:
            out["last_error"] = self.last_error
        return out


FrameListener = Callable[["StreamSource"], None]
StatusListener = Callable[["StreamSource", bool, str], None]  # (source, lost, phrase)


class StreamSource(FrameSource):
    """A live network stream: one capture thread, its latest frame, reconnects."""

    live = True
    paced = False

    def __init__(
        self,
        url: str,
        resolution: tuple[int, int],
        settings: StreamSettings | None = None,
        fit: str = FITS[0],
        cancel: threading.Event | None = None,
        opener: Opener = open_capture,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
        backoff: Sequence[float] = BACKOFF_S,
    ) -> None:
        self.spec = url
        self._backoff = tuple(backoff)
        self.name = mask_credentials(url)
        self.fit = fit
        self.resolution = resolution
        self.settings = settings or StreamSettings()
        self._opener, self._clock, self._wall = opener, clock, wall
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._frame_listeners: dict[int, FrameListener] = {}
        self._status_listeners: dict[int, StatusListener] = {}
        self._recent: deque[tuple[float, float | None]] = deque(maxlen=RECENT)
        self._ages: deque[float] = deque(maxlen=RECENT)
        self._jitter = 0.0
        self._frames = 0
        self._counted = 0  # frames past each connection's first CONNECT_SETTLE_S
        self._connected_s = 0.0
        self._connected_at: float | None = None
        self._down_s = 0.0
        self._reconnects = 0
        self._attempt = 0  # the reconnect attempt under way (0: playing)
        self._lost_at: float | None = None
        self.lost_reason: str | None = None
        self.last_error: str | None = None
        if cancel is not None and cancel.is_set():
            raise OpenCancelled()
        cap, bgr = self._connect()
        fps = cap.get(cv2.CAP_PROP_FPS)
        self.own_fps = fps if fps and math.isfinite(fps) and 0 < fps <= 1000 else None
        # MJPEG over HTTP carries no times: FFmpeg stamps its frames at an assumed 25 fps,
        # so neither that rate nor those stamps say anything (jitter is then measured
        # against the stream's own mean gap)
        self._clocked = not (fourcc(cap) == "MJPG" and _scheme(url) in ("http", "https"))
        if not self._clocked:
            self.own_fps = None
        self.fps = self.own_fps or 30.0
        self.source_size = (bgr.shape[1], bgr.shape[0])
        # a stream of known length (an HLS playlist on demand, a progressive file over
        # HTTP) arrives as fast as it downloads: it is read at its own timestamps, as a
        # player shows it; a live one is read as it comes
        self.on_demand = (cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0) > 0
        # HLS, live too, comes a segment at a time (a second's frames within a
        # millisecond): read as it came, the latest-only rule kept 1 frame in 5; a player
        # holds such frames to their times, and so does this
        self.held = self.on_demand or is_hls(url)
        self._started: tuple[float, float] | None = None  # (clock, stream s) of its start
        self._cap: Capture | None = cap
        self._latest = to_model(bgr, resolution, fit)
        self.note = "live stream: never paced or looped; its sessions get its frames as they arrive"
        self._arrived(cap, self._clock())
        self._thread = threading.Thread(target=self._run, name="stream", daemon=True)
        self._thread.start()

    # -- what the engine asks --------------------------------------------------------

    def frame(self, index: int) -> np.ndarray:
        with self._lock:
            return self._latest

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def trouble(self) -> str | None:
        with self._lock:
            return f"{RECONNECTING} ({self._attempt})" if self._attempt else None

    def subscribe(self, key: object, on_frame: FrameListener, on_status: StatusListener) -> None:
        """Call ``on_frame(source)`` at each new frame (capture thread), and
        ``on_status(source, lost, phrase)`` when it is lost or back; one pair per ``key``."""
        with self._lock:
            self._frame_listeners[id(key)] = on_frame
            self._status_listeners[id(key)] = on_status

    def status(self) -> StreamStatus:
        now = self._clock()
        with self._lock:
            recent = list(self._recent)
            connected = self._connected_s + (
                max(0.0, now - self._connected_at) if self._connected_at is not None else 0.0
            )
            ages = sorted(self._ages)
            state = f"{RECONNECTING} ({self._attempt})" if self._attempt else "playing"
            frames, reconnects, down = self._frames, self._reconnects, self._down_s
            counted = self._counted
            jitter = self._jitter
            if self._lost_at is not None:  # down now: the gap so far counts
                down += now - self._lost_at
        span = recent[-1][0] - recent[0][0] if len(recent) > 1 else 0.0
        return StreamStatus(
            state=state,
            own_fps=self.own_fps,
            arrival_fps=counted / connected if connected > 0 else 0.0,
            recent_fps=(len(recent) - 1) / span if span > 0 else 0.0,
            jitter_ms=1000.0 * jitter,
            age_ms=ages[len(ages) // 2] if ages else None,
            frames=frames,
            reconnects=reconnects,
            down_s=down,
            lost_reason=self.lost_reason,
            last_error=self.last_error,
            on_demand=self.on_demand,
            held=self.held,
        )

    def reset_counts(self) -> None:
        """Count afresh from now (the end of a warm-up, a statistics reset), as the
        report's other figures do; the state and the latest frame stay."""
        now = self._clock()
        with self._lock:
            self._frames, self._reconnects, self._down_s = 0, 0, 0.0
            self._counted, self._connected_s = 0, 0.0
            if self._connected_at is not None:
                self._connected_at = max(now, self._connected_at)
            if self._lost_at is not None:
                self._lost_at = now
            self._ages.clear()

    def describe(self) -> str:
        """The stream in one line: live, its rates, jitter, age, reconnects."""
        st = self.status()
        declared = f"{st.own_fps:g} fps declared" if st.own_fps else "no declared rate"
        if st.on_demand:
            kind = "on-demand stream (read at its own timestamps, never looped)"
        elif st.held:
            kind = "live HLS stream (its segments' frames held to their timestamps)"
        else:
            kind = "live stream (never paced or looped)"
        parts = [
            f"{kind}: {st.recent_fps or st.arrival_fps:.1f} fps arriving, {declared}",
            f"jitter {st.jitter_ms:.1f} ms",
        ]
        if st.age_ms is not None:
            parts.append(f"frame age at arrival {st.age_ms:.0f} ms")
        if st.reconnects:
            parts.append(f"reconnected {st.reconnects}× ({st.down_s:.1f} s down)")
        if st.state != "playing":
            why = f"lost: {st.lost_reason}" if st.lost_reason else "lost"
            tried = f"; last attempt: {st.last_error}" if st.last_error else ""
            parts.append(f"{st.state} ({why}{tried})")
        return "; ".join(parts)

    def signal_stop(self) -> None:
        self._stop.set()

    def close(self, timeout: float | None = None) -> None:
        """Stop the capture thread, waiting up to ``timeout`` s (None: until its read
        timeout has passed); a thread still in a read ends and releases by itself."""
        self._stop.set()
        if timeout is None:
            timeout = max(1.0, self.settings.read_timeout_s + 0.5)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._release()

    def _release(self) -> None:
        """Release the capture once: by the thread as it ends, or by close() after it."""
        with self._lock:
            cap, self._cap = self._cap, None
        if cap is not None:
            cap.release()

    # -- the capture thread ----------------------------------------------------------

    def _connect(self) -> tuple[Capture, np.ndarray]:
        """An open capture and its first frame, or SourceError(spec, reason).

        Only a failed open tries a plain connection, to say why (refused, no answer,
        unknown host): a server for one client (ffmpeg's ``-listen 1``, some cameras)
        would take a probe made first for its client.
        """
        timeout = self.settings.connect_timeout_s
        started = self._clock()
        cap = self._opener(self.spec, self.settings)
        if not cap.isOpened():
            cap.release()
            elapsed = self._clock() - started
            why = check_reachable(self.spec, timeout) if is_url(self.spec) else None
            raise SourceError(self.spec, why or refused_why(self.spec, self.settings, elapsed))
        ok, bgr = cap.read()
        if not ok or bgr is None:
            cap.release()
            raise SourceError(
                self.spec,
                f"connected, but no frame arrived within {self.settings.read_timeout_s:g} s",
            )
        return cap, bgr

    def _run(self) -> None:
        try:
            self._read()
        finally:
            self._release()  # the thread that reads releases: never under its read

    def _read(self) -> None:
        while not self._stop.is_set():
            cap = self._cap
            if cap is None:
                self._reconnect()
                continue
            started = self._clock()
            try:
                ok, bgr = cap.read()
                frame = to_model(bgr, self.resolution, self.fit) if ok and bgr is not None else None
            except Exception as exc:  # a frame that cannot be converted: the stream is bad
                frame, why = None, f"frame failed: {type(exc).__name__}: {exc}"
            else:
                waited = self._clock() - started
                why = (
                    f"no frame for {waited:.1f} s (stalled)"
                    if waited >= 0.9 * self.settings.read_timeout_s
                    else "the stream ended or the connection closed"
                )
            if self._stop.is_set():
                return
            if frame is None:
                self._lose(cap, why)
                continue
            if self.held and self._hold(cap):
                return
            now = self._clock()
            with self._lock:
                self._latest = frame
            self._arrived(cap, now)
            self._tell_frame()

    def _hold(self, cap: Capture) -> bool:
        """Wait until a held frame is due by its timestamp; True if stopped.

        A frame that comes after its time (the next HLS segment came late) moves the
        schedule back by its lateness, as a player's buffer grows: the frames after it
        keep their spacing rather than coming at once (where all but the last would be
        overwritten)."""
        pos = cap.get(cv2.CAP_PROP_POS_MSEC)
        at = pos / 1000.0 if pos and math.isfinite(pos) else 0.0
        now = self._clock()
        if self._started is None or at < self._started[1]:  # its start, or it began again
            self._started = (now, at)
            return False
        due = self._started[0] + (at - self._started[1])
        if due < now:
            self._started = (self._started[0] + (now - due), self._started[1])
            return False
        return self._stop.wait(due - now)

    def _arrived(self, cap: Capture, now: float) -> None:
        """Count a frame that arrived at ``now``: rate, RFC 3550 jitter, age."""
        pos = cap.get(cv2.CAP_PROP_POS_MSEC) if self._clocked else None
        pts = pos / 1000.0 if pos and math.isfinite(pos) and pos > 0 else None
        # RTSP lines its times up with the sender reports' wall clock; plain RTP's
        # MPEG-TS times are the encoder's own (an "age" of -4.5 s came out of them)
        rtsp = _scheme(self.spec) in ("rtsp", "rtsps")
        start_us = cap.get(cv2.CAP_PROP_STREAM_OPEN_TIME_USEC) if rtsp else 0.0
        with self._lock:
            if self._connected_at is None:  # a connection: its rate counts after it settles
                self._connected_at = now + CONNECT_SETTLE_S
            expected: float | None = None
            if self._recent:
                last_t, last_pts = self._recent[-1]
                if pts is not None and last_pts is not None:
                    expected = pts - last_pts
                elif len(self._recent) > 1:  # no media clock: against the mean gap so far
                    expected = (last_t - self._recent[0][0]) / (len(self._recent) - 1)
            if expected is not None:
                d = abs((now - last_t) - expected)
                self._jitter += (d - self._jitter) / 16.0  # RFC 3550, section 6.4.1
            self._recent.append((now, pts))
            self._frames += 1
            if now >= self._connected_at:
                self._counted += 1
            if pts is not None and start_us and 0 < start_us < 1e17:  # an RTCP wall clock
                age = 1000.0 * (self._wall() - (start_us / 1e6 + pts))
                if -MAX_CLOCK_SKEW_MS < age < MAX_AGE_MS:  # else the clocks do not agree
                    self._ages.append(age)

    def _lose(self, cap: Capture, why: str) -> None:
        cap.release()
        now = self._clock()
        with self._lock:
            self._cap = None
            self._attempt = 1
            self._lost_at = now
            if self._connected_at is not None:
                self._connected_s += max(0.0, now - self._connected_at)
                self._connected_at = None
            self._recent.clear()  # the rate and jitter start again after the gap
            self.lost_reason = why
        self._tell(True, f"stream lost on {self.name}: {why}; reconnecting")

    def _reconnect(self) -> None:
        wait = self._backoff[min(self._attempt, len(self._backoff)) - 1]
        if self._stop.wait(wait):
            return
        try:
            cap, bgr = self._connect()
        except SourceError as exc:
            with self._lock:
                self._attempt += 1
                self.last_error = exc.reason
            return
        if self._stop.is_set():
            cap.release()
            return
        frame = to_model(bgr, self.resolution, self.fit)
        now = self._clock()
        with self._lock:
            attempts, self._attempt = self._attempt, 0
            down = now - (self._lost_at or now)
            self._down_s += down
            self._lost_at = None
            self._reconnects += 1
            self._cap, self._latest = cap, frame
            self._started = None
            self.last_error = None
        self._arrived(cap, now)
        self._tell(
            False,
            f"stream back on {self.name} after {down:.1f} s "
            f"({attempts} attempt{'s' if attempts != 1 else ''})",
        )
        self._tell_frame()

    def _listeners(self, table: dict[int, Any]) -> list[Any]:
        with self._lock:
            return list(table.values())

    def _tell_frame(self) -> None:
        for listener in self._listeners(self._frame_listeners):
            self._safely(listener, self)

    def _tell(self, lost: bool, phrase: str) -> None:
        for listener in self._listeners(self._status_listeners):
            self._safely(listener, self, lost, phrase)

    def _safely(self, listener: Callable[..., object], *args: Any) -> None:
        """Call a listener; one that fails must not end the capture (its error is kept)."""
        try:
            listener(*args)
        except Exception as exc:
            self.last_error = f"a listener failed: {type(exc).__name__}: {exc}"
