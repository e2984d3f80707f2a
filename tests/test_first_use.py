"""What a first-time user hands BatchScope: each file is named for what it is, not guessed.

A valid MOV with an edit list is not corrupt, a still image is a still image, a clip
shorter than the run says it loops, a URL says what is wrong with it (a stream whose host
does not resolve, a kind that is no stream), an image given as a profile or a checkpoint
is said not to be one; and plain `pytest` collects every test, as `python -m pytest` does.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from batchscope.cli import main
from batchscope.engine import sources
from batchscope.engine.sources import SourceError, VideoFileSource, loop_note, open_source

ROOT = Path(__file__).resolve().parents[1]
SMALL = (128, 72)


def write_clip(path: Path, frames: int, fps: float = 30) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (64, 36))
    if not writer.isOpened():
        pytest.skip("OpenCV cannot write mp4 here")
    for i in range(frames):
        writer.write(np.full((36, 64, 3), (2 * i) % 255, np.uint8))
    writer.release()
    return path


def run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    return code, capsys.readouterr().err


# -- a MOV whose edit list starts before zero -------------------------------------------------


def with_pre_roll(clip: Path, skipped: int, shown: int, fps: float = 30) -> bytes:
    """``clip``'s bytes with its video track's edit list starting ``skipped`` frames in
    (frames before time zero, which the decoder drops) and showing ``shown`` frames.

    OpenCV's MP4 writer puts one edit (the whole track) in moov/trak/edts/elst; its entry
    is rewritten in place: segment duration (movie time units), then media time (the
    track's units).
    """
    data = bytearray(clip.read_bytes())
    moov = data.rfind(b"moov")
    elst, mdhd = data.find(b"elst", moov), data.find(b"mdhd", moov)
    mvhd = data.find(b"mvhd", moov)
    if min(elst, mdhd, mvhd) < 0 or data[elst + 4] != 0:
        pytest.skip("this OpenCV writes no version-0 edit list")
    movie_scale = struct.unpack_from(">I", data, mvhd + 16)[0]
    media_scale = struct.unpack_from(">I", data, mdhd + 16)[0]
    struct.pack_into(">Ii", data, elst + 12, round(shown / fps * movie_scale), 0)
    struct.pack_into(">i", data, elst + 16, round(skipped / fps * media_scale))
    return bytes(data)


def test_a_mov_whose_edit_list_starts_before_zero_is_not_called_corrupt(tmp_path):
    # before: "truncated or corrupt: decoded 105 of the 120 frames it announces" (those
    # 15 are pre-roll frames the edit list puts before time zero)
    mov = tmp_path / "pre_roll.mov"
    mov.write_bytes(with_pre_roll(write_clip(tmp_path / "clip.mp4", 120), 15, 105))
    assert cv2.VideoCapture(str(mov)).get(cv2.CAP_PROP_FRAME_COUNT) == 120  # as announced
    source = VideoFileSource(mov, SMALL)
    assert source.n_frames == 105
    assert source.note == ""


def test_a_mov_cut_short_beyond_its_edit_list_is_still_called_corrupt(tmp_path, monkeypatch):
    mov = tmp_path / "cut.mov"
    mov.write_bytes(with_pre_roll(write_clip(tmp_path / "clip.mp4", 120), 15, 105))
    real = cv2.VideoCapture

    class CutAt40:
        """The file's own capture, whose frames end after 40 (a cut file)."""

        def __init__(self, path: str) -> None:
            self.capture, self.left = real(path), 40

        def read(self):
            self.left -= 1
            return self.capture.read() if self.left >= 0 else (False, None)

        def __getattr__(self, name: str):
            return getattr(self.capture, name)

    monkeypatch.setattr(sources.cv2, "VideoCapture", CutAt40)
    source = VideoFileSource(mov, SMALL)
    assert source.n_frames == 40
    # of the 105 frames the edit list shows, not the 120 the track holds
    assert source.note == "truncated or corrupt: decoded 40 of the 105 frames it announces"


# -- a still image -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["still.png", "still.jpg"])
def test_a_still_image_plays_as_one_frame_with_no_rate_of_its_own(tmp_path, name):
    # before: FFmpeg's 25 fps for an image was "its own rate is 25 fps (plays 1.20× as fast)"
    image = tmp_path / name
    picture = np.zeros((72, 128, 3), np.uint8)
    cv2.circle(picture, (64, 36), 6, (255, 255, 255), -1)
    assert cv2.imwrite(str(image), picture)
    source = VideoFileSource(image, SMALL)
    assert (source.n_frames, source.own_fps, source.fps) == (1, None, 30.0)
    assert source.note == "still image: its one frame repeats at the paced rate"
    assert int(source.frame(7)[36, 64, 0]) > 200  # every index is that frame
    # one frame is shorter than any run, but a still image does not "loop"
    assert VideoFileSource(image, SMALL, run_s=20.0).note == source.note


def test_run_says_a_still_image_is_one_and_paces_it_without_a_rate_of_its_own(tmp_path, capsys):
    image = tmp_path / "still.png"
    assert cv2.imwrite(str(image), np.zeros((72, 128, 3), np.uint8))
    report = tmp_path / "r.json"
    argv = ["run", str(image), "--sessions", "1", "--resolution", "256x144"]
    code, err = run(
        [*argv, "--duration", "0.5", "--warmup", "0", "--quiet", "--json", str(report)], capsys
    )
    assert code == 0
    assert f"note: {image}: still image: its one frame repeats at the paced rate" in err
    session = json.loads(report.read_text())["sessions"][0]
    assert "source_fps" not in session and "pacing" not in session


# -- a clip shorter than the run ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "fps", "run_s", "paced", "note"),
    [
        (60, 30.0, math.inf, 30.0, "2.0 s clip: it loops"),
        (
            30,
            30.0,
            6.0,
            None,
            "1.0 s clip, shorter than the 6 s run: it loops (each session plays it about 6 times)",
        ),
        (
            30,
            30.0,
            6.0,
            60.0,
            "1.0 s clip, played in 0.5 s at 60 fps, shorter than the 6 s run: it loops "
            "(each session plays it about 12 times)",
        ),
        (
            45,
            30.0,
            2.0,
            None,
            "1.5 s clip, shorter than the 2 s run: it loops "
            "(each session plays it about 1.3 times)",
        ),
        (60, 30.0, 2.0, 30.0, ""),  # as long as the run: every frame once
        (300, 30.0, 4.0, 60.0, ""),  # 10 s played in 5 s: longer than the run
        (30, 30.0, None, None, ""),  # not told the run: nothing said
    ],
)
def test_the_loop_note_compares_the_clip_as_paced_with_the_run(frames, fps, run_s, paced, note):
    assert loop_note(frames, fps, run_s, paced) == note


def test_run_says_in_the_terminal_that_a_clip_shorter_than_the_run_loops(tmp_path, capsys):
    # before: a 0.5 s clip in a 1.5 s run looped without a word
    short = write_clip(tmp_path / "short.mp4", 15)
    long = write_clip(tmp_path / "long.mp4", 90)
    argv = ["run", str(short), str(long), "--sessions", "2", "--resolution", "256x144"]
    code, err = run([*argv, "--duration", "1", "--warmup", "0.5", "--quiet"], capsys)
    assert code == 0
    notes = [line for line in err.splitlines() if "note:" in line]
    assert notes == [
        f"batchscope: note: {short}: 0.5 s clip, shorter than the 1.5 s run: it loops "
        "(each session plays it about 3 times)"
    ]


def test_the_app_says_on_the_row_how_long_a_clip_is_and_that_it_loops(dashboard, qtbot):
    # the app runs until stopped: every clip loops; its row (and the engine's info event)
    # give the clip's length, the tiny clip's 60 frames at 30 fps
    from batchscope.ui.sessions.panel import COLUMNS, NOTE_MARK

    table = dashboard.sessions.table
    state = COLUMNS.index("State")
    qtbot.waitUntil(lambda: table.rowCount() == 3 and table.item(0, state) is not None)
    assert table.item(0, state).text() == "running" + NOTE_MARK
    assert table.item(0, state).toolTip() == "running *\n2.0 s clip: it loops"  # state, note
    events = [e.message for e in dashboard.engine.events() if e.kind == "info"]
    assert any(m.endswith("tiny.mp4: 2.0 s clip: it loops") for m in events)


# -- a URL ---------------------------------------------------------------------------------


def test_a_url_of_a_kind_that_is_no_stream_says_which_kinds_are(capsys):
    # before streams: "a URL: network streams (rtsp://, http://) are not supported yet"
    spec = "ftp://host/clip.mp4"
    with pytest.raises(SourceError) as caught:
        open_source(spec, SMALL)
    assert caught.value.reason.startswith("not a stream kind BatchScope reads: use rtsp://")
    code, err = run(["run", spec, "--duration", "1", "--quiet"], capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        f"batchscope: error: {spec}: not a stream kind BatchScope reads: use rtsp://, "
        "rtsps://, http(s)://, udp://, rtp:// or an .m3u8 playlist, or give a video file, "
        "camera:N or synthetic"
    ]


def test_a_stream_whose_host_does_not_resolve_is_one_line(capsys):
    spec = "rtsp://admin:pw@no-such-camera.invalid/stream"
    code, err = run(["run", spec, "--duration", "1", "--quiet"], capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        "batchscope: error: rtsp://admin:***@no-such-camera.invalid/stream: unknown host "
        "'no-such-camera.invalid'"
    ]


def test_a_windows_path_is_not_a_url(tmp_path):
    with pytest.raises(SourceError, match="no such file"):
        open_source("C:\\clips\\rally.mp4", SMALL)


# -- an image as a profile or a checkpoint ---------------------------------------------------


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "image.png"
    assert cv2.imwrite(str(path), np.zeros((8, 8, 3), np.uint8))
    return path


def test_an_image_given_as_a_profile_is_said_not_to_be_one(image, capsys):
    # before: "image.png: cannot read ('utf-8' codec can't decode byte 0x89 …)"
    code, err = run(["run", "synthetic", "--profile", str(image), "--quiet"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"batchscope: error: {image}: not a profile (a binary file, not JSON text)"
    )


def test_an_image_given_as_a_checkpoint_is_said_not_to_be_one(image):
    # before: "not a torch checkpoint, refused by weights_only loading (Unsupported operand 80)"
    import torch

    from batchscope.models.weights import CheckpointError, load_checkpoint

    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(torch.nn.Linear(1, 1), image)
    assert caught.value.reason == (
        "not a torch checkpoint (torch.save writes a zip archive, or a pickle in its legacy "
        "format; this file is neither)"
    )


# -- `pytest` as typed -------------------------------------------------------------------------


def test_pytest_alone_collects_the_tests_that_import_from_tests():
    # before: `pytest` (not `python -m pytest`) stopped on "No module named 'tests'"
    pytest_exe = Path(sys.executable).with_name("pytest")
    if not pytest_exe.exists():
        pytest.skip("no pytest script beside this Python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [
            str(pytest_exe),
            "--collect-only",
            "-q",
            "-o",
            "addopts=",
            "-p",
            "no:cacheprovider",
            "--all",  # test_accuracy.py is in the slow tier
            "tests/test_accuracy.py",
            "tests/test_letterbox.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "No module named 'tests'" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout[-2000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert {line.split("::")[0] for line in collected} == {
        "tests/test_accuracy.py",
        "tests/test_letterbox.py",
    }
