"""Video files as they are: one clear reason for what cannot play, a note for what plays cut."""

from __future__ import annotations

import os
import sys

import cv2
import numpy as np
import pytest

from batchscope.engine import sources
from batchscope.engine.roster import open_slots
from batchscope.engine.sources import SourceError, VideoFileSource


def write_clip(path, frames: int, size=(320, 180), fourcc="mp4v") -> None:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 30, size)
    if not writer.isOpened():
        pytest.skip(f"OpenCV cannot write {fourcc} here")
    for i in range(frames):
        frame = np.full((size[1], size[0], 3), (i * 3) % 255, np.uint8)
        writer.write(frame)
    writer.release()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_is_refused_at_once(tmp_path):
    pipe = tmp_path / "x.mp4"
    os.mkfifo(pipe)
    with pytest.raises(SourceError, match="not a regular file"):
        VideoFileSource(pipe, (128, 72))  # before: blocked forever reading the pipe


def test_a_long_file_loops_what_fits_and_says_so(tmp_path, monkeypatch):
    clip = tmp_path / "long.mp4"
    write_clip(clip, 40)
    budget = 25 * 128 * 72 * 3  # room for 25 frames at 128x72
    source = VideoFileSource(clip, (128, 72), budget_bytes=budget)
    assert source.n_frames == 25
    assert "looping its first 25 frames" in source.note


def test_the_frame_cache_is_filled_in_place(tmp_path):
    clip = tmp_path / "clip.mp4"
    write_clip(clip, 30)
    source = VideoFileSource(clip, (128, 72))
    assert source.n_frames == 30 and source.note == ""
    assert [int(source.frame(i)[0, 0, 0]) for i in (0, 10, 29)] == pytest.approx([0, 30, 87], abs=3)


def test_files_share_one_cache_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "CACHE_BYTES", 40 * 128 * 72 * 3)
    monkeypatch.setattr(sys.modules["batchscope.engine.roster"], "CACHE_BYTES", 40 * 128 * 72 * 3)
    a, b = tmp_path / "a.mp4", tmp_path / "b.mp4"
    write_clip(a, 30)
    write_clip(b, 30)
    slots = open_slots([str(a), str(b), "synthetic"], (128, 72))
    try:
        assert [s.source.n_frames for s in slots[:2]] == [20, 20]  # 40 frames between two
        assert all("looping its first 20 frames" in s.source.note for s in slots[:2])
    finally:
        for s in slots:
            s.source.close()


def test_a_file_whose_index_is_cut_off_is_called_truncated(tmp_path):
    clip = tmp_path / "cut.mp4"
    write_clip(clip, 60)
    clip.write_bytes(clip.read_bytes()[:5000])  # mp4v keeps its index at the end
    with pytest.raises(SourceError, match="truncated or corrupt MP4/MOV file"):
        VideoFileSource(clip, (128, 72))


class Capture:
    """A file as OpenCV sees it: ``frames`` decodable of ``announced``, its width and codec."""

    def __init__(self, width: float, fourcc: str, frames: int = 0, announced: int = 0) -> None:
        self.width, self.fourcc = width, fourcc
        self.frames, self.announced = frames, announced

    def isOpened(self) -> bool:
        return True

    def read(self):
        if self.frames <= 0:
            return False, None
        self.frames -= 1
        return True, np.zeros((72, 128, 3), np.uint8)

    def get(self, prop: int) -> float:
        if prop == cv2.CAP_PROP_FRAME_WIDTH:
            return self.width
        if prop == cv2.CAP_PROP_FOURCC:
            return float(sum(ord(c) << (8 * i) for i, c in enumerate(self.fourcc)))
        if prop == cv2.CAP_PROP_FRAME_COUNT:
            return float(self.announced)
        return 0.0

    def release(self) -> None:
        pass


def test_a_file_that_decodes_fewer_frames_than_it_announces_says_so(monkeypatch, tmp_path):
    clip = tmp_path / "cut.mp4"
    clip.write_bytes(b"\0" * 100)
    monkeypatch.setattr(sources.cv2, "VideoCapture", lambda path: Capture(128.0, "avc1", 86, 300))
    source = VideoFileSource(clip, (128, 72))
    assert source.n_frames == 86
    assert source.note == "truncated or corrupt: decoded 86 of the 300 frames it announces"


def test_no_video_stream_and_unknown_codec_are_named(monkeypatch, tmp_path):
    clip = tmp_path / "clip.mkv"
    clip.write_bytes(b"\x1a\x45\xdf\xa3" + b"\0" * 100)
    monkeypatch.setattr(sources.cv2, "VideoCapture", lambda path: Capture(1920.0, "AV01"))
    with pytest.raises(SourceError, match="its codec is AV01, which this OpenCV build lacks"):
        VideoFileSource(clip, (128, 72))
    monkeypatch.setattr(sources.cv2, "VideoCapture", lambda path: Capture(0.0, ""))
    with pytest.raises(SourceError, match="no video stream"):
        VideoFileSource(clip, (128, 72))


def test_a_file_paced_at_another_rate_than_its_own_says_so(tmp_path):
    from batchscope.config import RunConfig
    from batchscope.engine.engine import Engine

    clip = tmp_path / "sixty.mp4"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"mp4v"), 60, (320, 180))
    for i in range(30):
        writer.write(np.full((180, 320, 3), i, np.uint8))
    writer.release()
    for fps, note in (
        (30.0, "paced at 30 fps; its own rate is 60 fps (plays 0.50× as fast)"),
        (None, None),
    ):
        e = Engine(RunConfig(sources=(str(clip),), sessions=1, resolution=(256, 144), fps=fps))
        e.open()
        e.start()
        try:
            session = e.report()["sessions"][0]
        finally:
            e.stop()
        assert (session["source_fps"], session.get("pacing")) == (60.0, note)
        assert session["paced_fps"] == (fps or 60.0)


def test_run_says_in_the_terminal_when_a_file_is_cut_short(tmp_path, monkeypatch, capsys):
    from batchscope.cli import main

    clip = tmp_path / "cut.mp4"
    clip.write_bytes(b"\0" * 100)
    monkeypatch.setattr(sources.cv2, "VideoCapture", lambda path: Capture(320.0, "avc1", 86, 300))
    assert (
        main(
            [
                "run",
                str(clip),
                "--sessions",
                "1",
                "--resolution",
                "256x144",
                "--duration",
                "0.5",
                "--warmup",
                "0",
                "--quiet",
            ]
        )
        == 0
    )
    assert (
        f"note: {clip}: truncated or corrupt: decoded 86 of the 300 frames"
        in capsys.readouterr().err
    )


class Closed:
    """A file OpenCV cannot open (it opens none without a video stream)."""

    def isOpened(self) -> bool:
        return False

    def release(self) -> None:
        pass


def box(kind: bytes, payload: bytes) -> bytes:
    return (8 + len(payload)).to_bytes(4, "big") + kind + payload


def mp4(handler: bytes) -> bytes:
    hdlr = box(b"hdlr", b"\0" * 8 + handler + b"\0" * 12)
    return box(b"ftyp", b"isom\0\0\2\0isom") + box(
        b"moov", box(b"trak", box(b"mdia", hdlr)) + box(b"udta", box(b"hdlr", b"\0" * 8 + b"mdir"))
    )


def mkv(track_type: int) -> bytes:
    entry = b"\xae" + bytes([0x80 | 6]) + b"\xd7\x81\x01" + b"\x83\x81" + bytes([track_type])
    tracks = b"\x16\x54\xae\x6b" + bytes([0x80 | len(entry)]) + entry
    segment = b"\x18\x53\x80\x67" + b"\x01" + b"\xff" * 7 + tracks  # size unknown, as live
    return b"\x1a\x45\xdf\xa3\x84\x42\x86\x81\x01" + segment + b"\x1f\x43\xb6\x75\x88" + b"\0" * 8


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("song.m4a", mp4(b"soun"), "no video stream (an audio-only file?)"),
        ("song.webm", mkv(2), "no video stream (an audio-only file?)"),
        ("clip.mp4", mp4(b"vide"), "truncated or corrupt MP4/MOV file (OpenCV cannot open it)"),
        ("clip.webm", mkv(1), "truncated or corrupt Matroska/WebM file (OpenCV cannot open it)"),
        ("cut.mp4", mp4(b"soun")[:40], "truncated or corrupt MP4/MOV file"),
    ],
    ids=["mp4 audio", "webm audio", "mp4 video", "webm video", "mp4 index cut"],
)
def test_a_sound_file_is_not_called_corrupt(monkeypatch, tmp_path, name, data, reason):
    # before: an audio-only MP4 or WebM was "truncated or corrupt" (OpenCV opens neither)
    clip = tmp_path / name
    clip.write_bytes(data)
    monkeypatch.setattr(sources.cv2, "VideoCapture", lambda path: Closed())
    with pytest.raises(SourceError) as error:
        VideoFileSource(clip, (128, 72))
    assert error.value.reason.startswith(reason)


class Timed(Capture):
    """A capture whose frames lie ``gaps_ms`` apart (CAP_PROP_POS_MSEC of the last read)."""

    def __init__(self, gaps_ms: list[float]) -> None:
        super().__init__(128.0, "avc1", len(gaps_ms) + 1, len(gaps_ms) + 1)
        self.times = np.concatenate([[0.0], np.cumsum(gaps_ms)])
        self.read_count = 0

    def read(self):
        ok, frame = super().read()
        self.read_count += ok
        return ok, frame

    def get(self, prop: int) -> float:
        if prop == cv2.CAP_PROP_POS_MSEC:
            return float(self.times[self.read_count - 1])
        return super().get(prop)


def test_a_variable_frame_rate_is_said(monkeypatch, tmp_path):
    # before: 1.5 s at 30 fps then 1.5 s at 60 fps played as one even rate, silently
    clip = tmp_path / "phone.mp4"
    clip.write_bytes(b"\0" * 100)
    gaps = [1000 / 30] * 44 + [1000 / 60] * 90
    monkeypatch.setattr(sources.cv2, "VideoCapture", lambda path: Timed(gaps))
    source = VideoFileSource(clip, (128, 72))
    assert source.n_frames == 135
    assert source.note.startswith("variable frame rate (frames 16.7 to 33.3 ms apart)")
    steady = [1000 / 30] * 60 + [2000 / 30] + [1000 / 30] * 20  # one dropped frame: steady
    monkeypatch.setattr(sources.cv2, "VideoCapture", lambda path: Timed(steady))
    assert VideoFileSource(clip, (128, 72)).note == ""
