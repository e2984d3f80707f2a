"""Frame sources: video files, cameras and the synthetic scene.

Files and the synthetic scene are decoded (rendered) **once** into a shared,
read-only frame cache at the model resolution, so decoding never becomes a
hidden bottleneck of the experiment; sessions replay the cache at their own
phase, looping. A camera is live: one capture thread per physical camera,
whose latest frame is shared by every session that uses it.

Frames are RGB uint8 arrays of shape (H, W, 3) at the model resolution. A source of
another aspect is letterboxed by default: scaled by one factor to fit and centred on
black bars (:func:`placement`), so a portrait clip keeps its shape; ``fit="stretch"``
stretches it instead. Detections map back through the same placement.
"""

from __future__ import annotations

import math
import os
import re
import struct
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from batchscope.config import FITS
from batchscope.scene.synthetic import SCENE_SIZE, BallTruth, SyntheticScene
from batchscope.urls import URL, is_stream, mask_credentials

# OpenCV and its FFmpeg print their own warnings on stderr for every failed open
# ("moov atom not found"); our errors say it once. FFmpeg's level is read when its
# backend first loads, so this must run before the first VideoCapture.
cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET

#: Upper bound of the frame cache, shared by all the video files of a run; a longer
#: file loops over what fits (and says so).
CACHE_BYTES = 768 * 1024 * 1024

SYNTHETIC_SIZE = SCENE_SIZE


@dataclass(frozen=True)
class Placement:
    """Where a source frame lies in the model frame, and how model pixels map back."""

    offset: tuple[int, int]
    """(x, y) model pixels of the content's top-left corner (the bars' width and height)."""
    size: tuple[int, int]
    """(width, height) model pixels of the content."""
    scale: tuple[float, float]
    """Source pixels per content pixel (x, y): the same on both axes when letterboxed."""


def placement(
    source_size: tuple[int, int], resolution: tuple[int, int], fit: str = FITS[0]
) -> Placement:
    """How a ``source_size`` frame becomes a ``resolution`` one (see the module doc).

    A source model pixel ``x`` (pixel centres at integers) lies at source pixel
    ``(x - offset + 0.5) * scale - 0.5``.
    """
    (sw, sh), (mw, mh) = source_size, resolution
    if fit == "stretch" or sw * mh == sh * mw:
        return Placement((0, 0), (mw, mh), (sw / mw, sh / mh))
    k = min(mw / sw, mh / sh)
    w, h = min(mw, max(1, round(sw * k))), min(mh, max(1, round(sh * k)))
    return Placement(((mw - w) // 2, (mh - h) // 2), (w, h), (sw / w, sh / h))


def to_model(
    image: np.ndarray,
    resolution: tuple[int, int],
    fit: str = FITS[0],
    code: int | None = cv2.COLOR_BGR2RGB,
) -> np.ndarray:
    """``image`` (BGR from a decoder; RGB with ``code=None``) as an RGB model frame."""
    where = placement((image.shape[1], image.shape[0]), resolution, fit)
    if (image.shape[1], image.shape[0]) != where.size:
        image = cv2.resize(image, where.size, interpolation=cv2.INTER_AREA)
    if code is not None:
        image = cv2.cvtColor(image, code)
    if where.size == resolution:
        return image
    (x, y), (w, h) = where.offset, where.size
    frame = np.zeros((resolution[1], resolution[0], 3), np.uint8)
    frame[y : y + h, x : x + w] = image
    return frame


class SourceError(ValueError):
    """A source that cannot be opened; ``str()`` is ``SPEC: reason``."""

    def __init__(self, spec: str, reason: str) -> None:
        self.spec = spec
        self.reason = reason
        super().__init__(f"{mask_credentials(spec)}: {reason}")  # a URL's password never shown


class OpenCancelled(Exception):
    """Opening stopped half-way because the engine is stopping (not a bad source)."""


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise OpenCancelled()


class FrameSource(ABC):
    """Frames at the model resolution, plus what is needed to map detections back."""

    spec: str
    name: str
    fps: float  # the rate it plays at when paced at its own rate (30 when it has none)
    own_fps: float | None = None  # the rate the file or camera declares, if it does
    source_size: tuple[int, int]  # (width, height) of the original frames
    resolution: tuple[int, int]  # (width, height) of the frames handed out
    fit: str = FITS[0]  # how frames of another aspect were fitted (letterbox or stretch)
    live: bool = False
    paced: bool = True  # the feeder paces it; a network stream arrives at its own rate
    note: str = ""  # something the user should know (e.g. cache truncated)

    @abstractmethod
    def frame(self, index: int) -> np.ndarray:
        """Frame ``index`` (files loop; a camera ignores the index and gives its latest)."""

    @property
    def n_frames(self) -> int | None:
        return None

    @property
    def placement(self) -> Placement:
        """Where its frames lie in the model frame (see :func:`placement`)."""
        return placement(self.source_size, self.resolution, self.fit)

    @property
    def has_truth(self) -> bool:
        """Whether truth() gives the ball's position (labels, the scene)."""
        return False

    def truth(self, index: int) -> BallTruth | None:
        """Ground truth for frame ``index`` in source pixels, when the source knows it."""
        return None

    @property
    def alive(self) -> bool:
        """Whether a thread of this source is running (a camera's capture)."""
        return False

    @property
    def trouble(self) -> str | None:
        """What keeps a live source from delivering now (``reconnecting (2)``), else None."""
        return None

    def signal_stop(self) -> None:
        """Tell its thread to end, without waiting (:meth:`close` waits): a stop tells
        every source first, so that they all wind down at once."""

    def close(self, timeout: float | None = None) -> None:
        """Release devices and threads; ``timeout``: the longest it waits for its thread
        (s; None: its own limit). A thread still in a read then ends by itself after it,
        releasing what it reads from (``alive`` says it runs meanwhile)."""


class CachedSource(FrameSource):
    """Frames decoded once into memory and looped."""

    def __init__(
        self,
        spec: str,
        name: str,
        frames: np.ndarray,
        fps: float,
        source_size: tuple[int, int],
        fit: str = FITS[0],
    ) -> None:
        frames.setflags(write=False)
        self.fit = fit
        self.spec = spec
        self.name = name
        self._frames = frames
        self.fps = fps
        self.source_size = source_size
        self.resolution = (frames.shape[2], frames.shape[1])

    @property
    def n_frames(self) -> int:
        return len(self._frames)

    @property
    def nbytes(self) -> int:
        """Memory its frame cache holds."""
        return self._frames.nbytes

    def frame(self, index: int) -> np.ndarray:
        return self._frames[index % len(self._frames)]

    def release(self) -> None:
        """Give the frame cache back before a re-decode in its place (nothing may read it
        meanwhile: the engine has paused its sessions); a late read gets a black frame."""
        w, h = self.resolution
        self._frames = np.zeros((1, h, w, 3), np.uint8)


class VideoFileSource(CachedSource):
    """A video file decoded once into the frame cache, within ``budget_bytes``.

    Frames go straight from the decoder into one preallocated array at the
    model resolution (no list of frames, no stacked copy), so the process holds
    the cache plus one decoded frame, never twice the cache.

    A still image (PNG, JPEG: one frame an image reader knows) is accepted: its one frame
    repeats at the paced rate, it has no rate of its own, and its note says so.
    """

    def __init__(
        self,
        path: Path,
        resolution: tuple[int, int],
        cancel: threading.Event | None = None,
        budget_bytes: int = CACHE_BYTES,
        fit: str = FITS[0],
        progress: Callable[[int, int], None] | None = None,
        run_s: float | None = None,
        paced_fps: float | None = None,
    ) -> None:
        """``progress(done, total)`` is called as frames decode (total: the frames the file
        announces, or what the cache holds if fewer). ``run_s``: how long its sessions
        play (s; ``math.inf`` until stopped), paced at ``paced_fps`` (None: its own rate),
        so that its note says when it loops; None: not told, nothing said."""
        spec = str(path)
        _check_file(path)
        cap = cv2.VideoCapture(str(path))
        try:
            if not cap.isOpened():
                kind = _container(path)
                if kind and _has_video(path, kind) is False:  # a sound file: not corrupt
                    raise SourceError(spec, NO_VIDEO)
                raise SourceError(
                    spec,
                    f"truncated or corrupt {kind} file (OpenCV cannot open it)"
                    if kind
                    else "not a video OpenCV can open",
                )
            declared = cap.get(cv2.CAP_PROP_FPS)
            own = (
                declared if declared and math.isfinite(declared) and 0 < declared <= 1000 else None
            )
            fps = own or 30.0
            w, h = resolution
            limit = max(1, budget_bytes // (w * h * 3))
            expected = max(0, int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0))
            frames, n, size, stamps = _decode_frames(
                cap, resolution, fit, limit, expected, cancel, progress
            )
            longer = n == limit and cap.read()[0]
            width = cap.get(cv2.CAP_PROP_FRAME_WIDTH)
            codec = fourcc(cap)
        finally:
            cap.release()
        if n == 0:
            raise SourceError(spec, _no_frames_reason(width, codec))
        if n < len(frames):  # fewer than the file announced: give the rest back
            frames = frames[:n].copy()
        still = n == 1 and cv2.haveImageReader(str(path))
        if still:  # the 25 fps FFmpeg gives an image is no rate of its own
            own, fps = None, 30.0
        super().__init__(spec, path.name, frames, fps, size, fit)
        self.own_fps = own
        self.path = path
        self.complete = not longer  # the whole file is in the cache
        notes = []
        if still:
            notes.append("still image: its one frame repeats at the paced rate")
        elif longer:
            notes.append(
                f"long file: looping its first {n} frames "
                f"({n / fps:.0f} s, the {budget_bytes // 2**20} MB frame cache)"
            )
        elif expected and n < 0.9 * (presented := _presented_frames(path, expected, fps)):
            notes.append(
                f"truncated or corrupt: decoded {n} of the {presented} frames it announces"
            )
        if not (still or longer) and (loops := loop_note(n, fps, run_s, paced_fps)):
            notes.append(loops)
        if uneven := _uneven_note(stamps):
            notes.append(uneven)
        try:
            self._truth = read_labels(path.with_suffix(".csv"), n, size)
        except LabelError as error:
            self._truth = []
            notes.append(f"no accuracy: {error}")
        self.note = "; ".join(notes)

    @property
    def has_truth(self) -> bool:
        return bool(self._truth)

    def truth(self, index: int) -> BallTruth | None:
        return self._truth[index % self.n_frames] if self._truth else None


class SyntheticSource(CachedSource):
    """The procedural table-tennis scene, rendered once for one loop."""

    def __init__(
        self,
        resolution: tuple[int, int],
        seed: int = 0,
        fps: float = 30.0,
        cancel: threading.Event | None = None,
        fit: str = FITS[0],
    ) -> None:
        scene = SyntheticScene(*SYNTHETIC_SIZE, fps=fps, seed=seed)
        frames, truths = [], []
        for i in range(scene.period_frames):
            _check_cancel(cancel)
            rgb, truth = scene.render(i)
            frames.append(to_model(rgb, resolution, fit, code=None))
            truths.append(truth)
        spec = "synthetic" if seed == 0 else f"synthetic:{seed}"
        super().__init__(spec, spec, np.stack(frames), fps, SYNTHETIC_SIZE, fit)
        self._truths = truths

    has_truth = True

    def truth(self, index: int) -> BallTruth:
        return self._truths[index % len(self._truths)]


class CameraSource(FrameSource):
    """A live camera; one capture thread, latest frame shared by its sessions.

    Why a thread: a camera delivers frames at its own pace whether or not a
    session asks, and reading it blocks; the thread keeps only the newest frame,
    converted once to the model resolution, for every session on this camera.
    How it stops: ``close()`` sets the stop event the loop waits on, then joins; the
    thread releases the capture as it ends (never under its own read). A read or
    conversion that fails is the camera's error (its sessions show it) and the loop
    goes on, so a camera that recovers delivers again.
    """

    live = True

    def __init__(
        self,
        index: int,
        resolution: tuple[int, int],
        capture: Any = None,
        fit: str = FITS[0],
    ) -> None:
        self.spec = f"camera:{index}"
        self.fit = fit
        self.name = camera_name(index) or self.spec
        self.resolution = resolution
        if capture is None:
            if not camera_present(index):
                raise SourceError(self.spec, f"no camera at index {index}")
            capture = cv2.VideoCapture(index)
        cap = capture
        if not cap.isOpened():
            cap.release()
            raise SourceError(self.spec, f"no camera at index {index}")
        ok, bgr = cap.read()
        if not ok or bgr is None:
            cap.release()
            raise SourceError(self.spec, "camera opened but gave no frame")
        fps = cap.get(cv2.CAP_PROP_FPS)
        self.own_fps = fps if fps and math.isfinite(fps) and fps > 0 else None
        self.fps = self.own_fps or 30.0
        self.source_size = (bgr.shape[1], bgr.shape[0])
        self._cap = cap
        self._latest = to_model(bgr, resolution, fit)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name=self.spec, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._capture()
        finally:
            self._release()

    def _capture(self) -> None:
        while not self._stop.is_set():
            try:
                ok, bgr = self._cap.read()
                if not ok or bgr is None:
                    self.error = "camera stopped delivering frames"
                    self._stop.wait(0.2)
                    continue
                frame = to_model(bgr, self.resolution, self.fit)
            except Exception as exc:  # one bad frame must not end the capture
                self.error = f"camera frame failed: {type(exc).__name__}: {exc}"
                self._stop.wait(0.2)
                continue
            self.error = None
            with self._lock:
                self._latest = frame

    def frame(self, index: int) -> np.ndarray:
        if self.error:
            raise SourceError(self.spec, self.error)
        with self._lock:
            return self._latest

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def signal_stop(self) -> None:
        self._stop.set()

    def close(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._thread.join(1.0 if timeout is None else timeout)
        if not self._thread.is_alive():
            self._release()

    def _release(self) -> None:
        """Release the capture once: by the thread as it ends, or by close() after it."""
        with self._lock:
            cap, self._cap = self._cap, None
        if cap is not None:
            cap.release()


def open_source(
    spec: str,
    resolution: tuple[int, int],
    cancel: threading.Event | None = None,
    budget_bytes: int = CACHE_BYTES,
    fit: str = FITS[0],
    progress: Callable[[int, int], None] | None = None,
    run_s: float | None = None,
    paced_fps: float | None = None,
) -> FrameSource:
    """Open a source spec: a video path, ``camera:N``, ``synthetic`` or ``synthetic:SEED``
    (a network stream: :class:`~batchscope.engine.streams.StreamSource`).

    Decoding a file stops half-way with OpenCancelled once ``cancel`` is set; ``fit``:
    how frames of another aspect than ``resolution`` become model frames; ``run_s`` and
    ``paced_fps``: the run a file's note compares its length with (VideoFileSource).
    """
    if URL.match(spec):  # streams are engine/streams.py's (the roster opens them there)
        raise SourceError(
            spec,
            "not a stream kind BatchScope reads: use rtsp://, rtsps://, http(s)://, udp://, "
            "rtp:// or an .m3u8 playlist, or give a video file, camera:N or synthetic",
        )
    if spec == "synthetic" or spec.startswith("synthetic:"):
        seed_text = spec.partition(":")[2] or "0"
        if not seed_text.isdigit():
            raise SourceError(spec, "expected synthetic or synthetic:SEED (a whole number)")
        return SyntheticSource(resolution, seed=int(seed_text), cancel=cancel, fit=fit)
    if spec.startswith("camera:"):
        index_text = spec.partition(":")[2]
        if not index_text.isdigit():
            raise SourceError(spec, "expected camera:N with N a camera index (0, 1, …)")
        return CameraSource(int(index_text), resolution, fit=fit)
    return VideoFileSource(
        Path(spec), resolution, cancel, budget_bytes, fit, progress, run_s, paced_fps
    )


def loop_note(frames: int, fps: float, run_s: float | None, paced_fps: float | None) -> str:
    """That a clip of ``frames`` at its rate ``fps`` loops within a run of ``run_s`` seconds
    paced at ``paced_fps`` (None: its own rate), or "" when the run is shorter or unknown.

    A run without an end (the app's, ``math.inf``) loops every clip: the note gives its
    length; a run's sessions each start at another frame, but a clip no longer than the
    run repeats frames in every session.
    """
    if run_s is None:
        return ""
    clip_s = frames / fps
    if math.isinf(run_s):
        return f"{clip_s:.1f} s clip: it loops"
    pace = paced_fps or fps
    played_s = frames / pace
    if played_s >= run_s:
        return ""
    times = run_s / played_s
    played = "" if abs(pace - fps) < 0.01 else f", played in {played_s:.1f} s at {pace:g} fps"
    return (
        f"{clip_s:.1f} s clip{played}, shorter than the {run_s:g} s run: it loops "
        f"(each session plays it about {round(times, 1) if times < 10 else round(times):g} times)"
    )


def is_live_or_synthetic(spec: str) -> bool:
    """A camera, a network stream or the synthetic scene: not a file, no share of the file
    cache."""
    return spec == "synthetic" or spec.startswith(("synthetic:", "camera:")) or is_stream(spec)


@dataclass(frozen=True)
class CameraInfo:
    index: int
    name: str


def camera_present(index: int) -> bool:
    """On Linux, whether /dev/videoN exists (asking OpenCV is slow and noisy); elsewhere True."""
    return not sys.platform.startswith("linux") or Path(f"/dev/video{index}").exists()


def camera_name(index: int) -> str | None:
    """The platform's name for a camera, where it gives one (Linux sysfs)."""
    path = Path(f"/sys/class/video4linux/video{index}/name")
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def list_cameras(max_index: int = 8) -> list[CameraInfo]:
    """Cameras the platform reports. On Linux from /dev/video*; elsewhere by probing."""
    if sys.platform.startswith("linux"):
        indexes = sorted(
            int(p.name[5:]) for p in Path("/dev").glob("video*") if p.name[5:].isdigit()
        )
        return [CameraInfo(i, camera_name(i) or f"camera {i}") for i in indexes]
    found = []
    for i in range(max_index):
        cap = cv2.VideoCapture(i)
        if cap.isOpened():
            found.append(CameraInfo(i, f"camera {i}"))
        cap.release()
    return found


def _decode_frames(
    cap: Any,
    resolution: tuple[int, int],
    fit: str,
    limit: int,
    expected: int,
    cancel: threading.Event | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[np.ndarray, int, tuple[int, int], list[float]]:
    """Up to ``limit`` frames of ``cap``, each decoded straight into one array at the model
    resolution (sized for the ``expected`` frames the file announces, grown if it has more):
    (the array, the frames in it, the source's size, each frame's time in ms)."""
    w, h = resolution
    frames = np.empty((min(limit, expected or 64), h, w, 3), np.uint8)
    total = min(limit, expected) if expected else limit
    step = max(1, total // 50)
    n, size = 0, (0, 0)
    stamps: list[float] = []  # each frame's time (ms), to tell a variable rate
    while n < limit:
        _check_cancel(cancel)
        if progress is not None and n % step == 0:
            progress(n, total)
        ok, bgr = cap.read()
        if not ok or bgr is None:
            break
        if n == len(frames):  # the file said fewer frames than it has
            frames = _grown(frames, limit)
        size = (bgr.shape[1], bgr.shape[0])
        frames[n] = to_model(bgr, resolution, fit)
        stamps.append(cap.get(cv2.CAP_PROP_POS_MSEC))
        n += 1
    return frames, n, size, stamps


def _grown(frames: np.ndarray, limit: int) -> np.ndarray:
    bigger = np.empty((min(limit, 2 * len(frames)), *frames.shape[1:]), np.uint8)
    bigger[: len(frames)] = frames
    return bigger


def _container(path: Path) -> str:
    """The video container a file's first bytes announce ("" if none known)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(12)
    except OSError:
        return ""
    if head[4:8] == b"ftyp":
        return "MP4/MOV"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "Matroska/WebM"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "AVI"
    return ""


def fourcc(cap: Any) -> str:
    """The codec a capture reports, as its four characters ("" when it names none)."""
    code = int(cap.get(cv2.CAP_PROP_FOURCC) or 0)
    text = "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4)).strip("\x00 ")
    return text if text.isprintable() else ""


NO_VIDEO = "no video stream (an audio-only file?)"


def _has_video(path: Path, kind: str) -> bool | None:
    """Whether a file OpenCV cannot open declares a video track (None: cannot tell).

    OpenCV opens no file without a video stream, so a valid sound file would otherwise be
    called truncated or corrupt. Reads the MP4/MOV index (moov) or the Matroska tracks.
    """
    try:
        if kind == "MP4/MOV":
            return _mp4_has_video(path)
        if kind == "Matroska/WebM":
            with path.open("rb") as fh:
                return _mkv_has_video(fh.read(4 * 2**20))
    except OSError:
        return None
    return None


def _mp4_has_video(path: Path) -> bool | None:
    """From the handler types in the top-level moov box; None without a whole one."""
    moov = _mp4_moov(path)
    handlers = re.findall(rb"hdlr.{8}(.{4})", moov or b"", re.S)
    return b"vide" in handlers if handlers else None


def _mp4_moov(path: Path) -> bytes | None:
    """The top-level moov box (the MP4/MOV index, with its header); None without a whole one."""
    with path.open("rb") as fh:
        total, pos = os.fstat(fh.fileno()).st_size, 0
        while pos + 8 <= total:
            fh.seek(pos)
            head = fh.read(16)
            size, kind, header = int.from_bytes(head[:4], "big"), head[4:8], 8
            if size == 1:
                size, header = int.from_bytes(head[8:16], "big"), 16
            elif size == 0:
                size = total - pos
            if size < header:
                return None
            if kind == b"moov":
                if pos + size > total or size > 64 * 2**20:
                    return None  # cut short: truncated after all
                fh.seek(pos)
                return fh.read(size)
            pos += size
    return None


def _presented_frames(path: Path, announced: int, fps: float) -> int:
    """The frames a file shows: the ``announced`` count, less what an MP4/MOV edit list
    leaves out. A valid file's edit list may start the picture after the track's first
    frames (pre-roll before time zero: B-frames, a cut made without re-encoding) or end
    it early; the decoder drops those frames, so they are not missing ones."""
    try:
        shown_s = _mp4_edited_s(path) if _container(path) == "MP4/MOV" else None
    except (OSError, struct.error, ZeroDivisionError):  # an index that cannot be read
        shown_s = None
    return announced if shown_s is None else min(announced, round(shown_s * fps))


def _mp4_edited_s(path: Path) -> float | None:
    """Seconds of the video track its edit list (moov/trak/edts/elst) shows; None without."""
    boxes = list(_mp4_boxes((_mp4_moov(path) or b"")[8:]))
    header = dict(boxes).get(b"mvhd")
    movie_scale = _mp4_timescale(header)[0] if header else 0
    for kind, trak in boxes:
        parts = dict(_mp4_boxes(trak)) if kind == b"trak" else {}
        media = dict(_mp4_boxes(parts.get(b"mdia", b"")))
        if media.get(b"hdlr", b"")[8:12] != b"vide":
            continue
        edits = dict(_mp4_boxes(parts.get(b"edts", b""))).get(b"elst")
        if edits is None or b"mdhd" not in media or not movie_scale:
            return None
        media_scale, media_length = _mp4_timescale(media[b"mdhd"])
        wide = edits[0] == 1  # version 1: 64-bit durations and times
        entry = ">QqI" if wide else ">IiI"
        shown = 0.0
        for i in range(struct.unpack_from(">I", edits, 4)[0]):
            length, start, _rate = struct.unpack_from(entry, edits, 8 + i * (20 if wide else 12))
            if start < 0:  # an empty edit: a pause, no frames
                continue
            left = (media_length - start) / media_scale
            shown += min(length / movie_scale, left) if length else left
        return max(0.0, shown)
    return None


def _mp4_boxes(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(type, body) of each MP4 box in ``data``, up to the first that does not fit."""
    pos = 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, pos)
        if size < 8 or pos + size > len(data):
            return
        yield kind, data[pos + 8 : pos + size]
        pos += size


def _mp4_timescale(box: bytes) -> tuple[int, int]:
    """(time units per second, duration in them) of an mvhd or mdhd box's body."""
    if box[0] == 1:  # version 1: 64-bit times
        return struct.unpack_from(">IQ", box, 20)
    return struct.unpack_from(">II", box, 12)


def _mkv_has_video(data: bytes) -> bool | None:
    """From the TrackType of each TrackEntry, once the whole Tracks element was read."""
    inside = {0x18538067, 0x1654AE6B, 0xAE}  # Segment, Tracks, TrackEntry: step into
    pos, tracks_end, types = 0, None, []
    while pos < len(data):
        if tracks_end is not None and pos >= tracks_end:
            return 1 in types
        element = _ebml_element(data, pos)
        if element is None:
            return None
        eid, start, size = element
        if eid == 0x83 and size == 1 and start < len(data):  # TrackType: 1 video, 2 audio
            types.append(data[start])
        if eid == 0x1654AE6B and size >= 0:
            tracks_end = start + size
        if eid in inside:
            pos = start
        elif size < 0:
            return None
        else:
            pos = start + size
    return None


def _ebml_element(data: bytes, pos: int) -> tuple[int, int, int] | None:
    """(id, start of its data, size; -1 if unknown) of the EBML element at ``pos``."""
    if pos >= len(data) or not data[pos]:
        return None
    id_len = 8 - data[pos].bit_length() + 1
    at = pos + id_len
    if id_len > 4 or at >= len(data) or not data[at]:
        return None
    size_len = 8 - data[at].bit_length() + 1
    raw = int.from_bytes(data[at : at + size_len], "big")
    size = raw & ((1 << (7 * size_len)) - 1)
    if size == (1 << (7 * size_len)) - 1:
        size = -1
    return int.from_bytes(data[pos:at], "big"), at + size_len, size


def _uneven_note(stamps: list[float]) -> str:
    """A note when the frames' times are unevenly spaced (a variable frame rate): the cache
    plays every frame for the same time, so the motion speeds up and slows down."""
    gaps = np.diff(np.asarray(stamps, float))
    if len(gaps) < 10 or (gaps <= 0).any():  # too few, or no usable times (not in order)
        return ""
    lo, hi = np.percentile(gaps, [5, 95])
    if hi <= 1.25 * lo:
        return ""
    return (
        f"variable frame rate (frames {lo:.1f} to {hi:.1f} ms apart): played at one "
        "steady rate, so its motion runs faster and slower than recorded"
    )


def _no_frames_reason(width: float, codec: str) -> str:
    if not width:
        return NO_VIDEO
    if codec:
        return f"no frame could be decoded: its codec is {codec}, which this OpenCV build lacks"
    return "no frames could be decoded (empty or corrupt)"


def _check_file(path: Path) -> None:
    spec = str(path)
    if not path.exists():
        raise SourceError(spec, "no such file")
    if path.is_dir():
        raise SourceError(spec, "is a folder, not a video file")
    if not path.is_file():  # a named pipe or a device: reading it may block forever
        raise SourceError(spec, "not a regular file (a pipe or a device); give a video file")
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise SourceError(spec, f"cannot read ({exc.strerror})") from None
    if size == 0:
        raise SourceError(spec, "empty file")


LABEL_COLUMNS = ("Frame", "Visibility", "X", "Y", "l", "theta")


class LabelError(ValueError):
    """A label CSV that cannot score a clip; ``str()`` names the file and the reason."""


def read_labels(path: Path, frames: int, size: tuple[int, int]) -> list[BallTruth]:
    """The BlurBall label CSV beside a clip, one truth per frame ([] when there is none).

    The format: a header ``Frame,Visibility,X,Y,l,theta``, then one row per frame in
    order from 0: visibility 0 or 1, the ball's centre (X, Y) and half streak length
    ``l`` in the clip's pixels, ``theta`` in degrees. Raises :class:`LabelError` for a
    file that is there but cannot be trusted: other columns, a cell that is not a
    number, fewer rows than the ``frames`` decoded, frames out of order, or positions
    outside a ``size`` (width, height) frame (labels made for another resolution).
    """
    if not path.exists():
        return []
    name = path.name
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise LabelError(f"{name}: cannot be read ({type(error).__name__})") from None
    header = tuple(c.strip() for c in lines[0].split(",")) if lines else ()
    if header[:6] != LABEL_COLUMNS:
        raise LabelError(f"{name}: columns are not {','.join(LABEL_COLUMNS)}")
    if len(lines) - 1 < frames:
        raise LabelError(f"{name}: {len(lines) - 1} label rows for {frames} frames")
    width, height = size
    truths = []
    for row, line in enumerate(lines[1 : frames + 1], start=2):
        cells = line.split(",")
        if len(cells) < 6:
            raise LabelError(f"{name}: line {row} has {len(cells)} cells, not 6")
        try:
            frame, visible, x, y, length, theta = (float(c) for c in cells[:6])
        except ValueError:
            raise LabelError(f"{name}: line {row} has a cell that is not a number") from None
        if frame != row - 2:
            raise LabelError(f"{name}: line {row} is frame {frame:g}, expected {row - 2}")
        if visible and not (-0.5 <= x <= width - 0.5 and -0.5 <= y <= height - 0.5):
            raise LabelError(
                f"{name}: frame {row - 2} puts the ball at ({x:g}, {y:g}), outside the "
                f"{width}x{height} clip (labels for another resolution?)"
            )
        truths.append(BallTruth(bool(visible), x, y, length, theta))
    return truths
