"""The synthetic scene: deterministic, randomly accessible, its truth matches its pixels, and
it sits below the engine (importing it loads no ``batchscope.engine`` module)."""

from __future__ import annotations

import csv
import importlib.util
import itertools
import math
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from batchscope.scene.synthetic import (
    EXPOSURE_FRACTION,
    NO_BALL,
    SceneStyle,
    SyntheticScene,
)

MAKE_SAMPLES = Path(__file__).resolve().parents[1] / "sample_videos" / "make_samples.py"


@pytest.fixture(scope="module")
def scene() -> SyntheticScene:
    return SyntheticScene(seed=3)


@pytest.fixture(scope="module")
def truths(scene: SyntheticScene) -> list:
    return [scene.render(i)[1] for i in range(scene.period_frames)]


def test_the_scene_does_not_import_the_engine() -> None:
    # A fresh interpreter: this test session has long imported the engine.
    code = (
        "import sys, batchscope.scene.synthetic, batchscope.scene.rally; "
        "print(*(m for m in sys.modules if m.startswith('batchscope.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.split()
    assert "batchscope.scene.rally" in loaded
    assert [m for m in loaded if not m.startswith("batchscope.scene")] == []


def test_same_seed_gives_identical_frames_and_truth() -> None:
    a, b = SyntheticScene(seed=5), SyntheticScene(seed=5)
    for index in (0, 17, 123, 400):
        frame_a, truth_a = a.render(index)
        frame_b, truth_b = b.render(index)
        assert np.array_equal(frame_a, frame_b)
        assert truth_a == truth_b


def test_different_seeds_differ() -> None:
    a, b = SyntheticScene(seed=5), SyntheticScene(seed=6)
    assert [t for _, t in a.frames(90)] != [t for _, t in b.frames(90)]
    assert not np.array_equal(a.render(45)[0], b.render(45)[0])
    assert a.name == "synthetic:5"


def test_random_access_equals_sequential_and_loops(scene: SyntheticScene) -> None:
    sequential = list(scene.frames(40))
    for index in reversed(range(40)):
        frame, truth = scene.render(index)
        assert np.array_equal(frame, sequential[index][0])
        assert truth == sequential[index][1]
    for index in (0, 33, scene.period_frames - 1):
        frame, truth = scene.render(index + scene.period_frames)
        assert np.array_equal(frame, scene.render(index)[0])
        assert truth == scene.render(index)[1]


def test_frame_shape_and_dtype() -> None:
    frame, _ = SyntheticScene().render(0)
    assert frame.shape == (360, 640, 3)
    assert frame.dtype == np.uint8
    small, _ = SyntheticScene(width=320, height=180).render(10)
    assert small.shape == (180, 320, 3)


def test_visible_most_of_the_time_with_pauses(truths: list) -> None:
    visible = np.array([t.visible for t in truths])
    assert 0.75 < visible.mean() < 0.97
    assert all(t == NO_BALL for t in truths if not t.visible)


def test_truth_values_in_range(scene: SyntheticScene, truths: list) -> None:
    for t in truths:
        if t.visible:
            assert 0 <= t.x <= scene.width - 1
            assert 0 <= t.y <= scene.height - 1
            assert -90.0 < t.theta <= 90.0  # degrees, as in the label files
    # l is half the streak the exposure (EXPOSURE_FRACTION of a frame) draws: a ball in
    # play is never still, and its streak is at most that share of a neighbouring frame's
    # travel (0.05 of slack: a bounce bends the path; seeds 0, 3, 7 reach 0.53)
    for before, t, after in zip(truths, truths[1:], truths[2:], strict=False):
        if before.visible and t.visible and after.visible:
            travel = max(
                math.dist((before.x, before.y), (t.x, t.y)),
                math.dist((t.x, t.y), (after.x, after.y)),
            )
            assert 0 < 2 * t.length <= (EXPOSURE_FRACTION + 0.05) * travel


def test_blur_half_length_follows_speed(scene: SyntheticScene, truths: list) -> None:
    """Frame-to-frame travel is one frame interval; the exposure covers EXPOSURE_FRACTION of it,
    and l is half the streak, so l ~= EXPOSURE_FRACTION / 2 * travel."""
    lengths, travels = [], []
    for before, after in itertools.pairwise(truths):
        if before.visible and after.visible:
            lengths.append(0.5 * (before.length + after.length))
            travels.append(math.hypot(after.x - before.x, after.y - before.y))
    lengths, travels = np.array(lengths), np.array(travels)
    assert lengths.max() > 5.0
    moving = travels > 4.0
    ratio = np.median(lengths[moving] / travels[moving])
    assert ratio == pytest.approx(EXPOSURE_FRACTION / 2, abs=0.03)
    assert np.corrcoef(lengths, travels)[0, 1] > 0.9


def test_ball_is_drawn_where_the_truth_says() -> None:
    """Without noise, a frame minus the empty scene is the ball (brighter) and its shadow
    (darker); the ball's pixels must be centred on the truth and stretched along theta."""
    scene = SyntheticScene(seed=3, style=SceneStyle(noise_sigma=0.0))
    empty, truth = scene.render(0)
    assert not truth.visible
    errors, checked = [], 0
    for index in range(0, 300, 3):
        frame, truth = scene.render(index)
        if not truth.visible:
            assert np.array_equal(frame, empty)
            continue
        if not (12 < truth.x < scene.width - 12 and 12 < truth.y < scene.height - 12):
            continue
        lift = np.clip((frame.astype(int) - empty).sum(axis=2), 0, None)
        ys, xs = np.nonzero(lift > 20)
        assert len(xs) > 0, f"no ball drawn in frame {index}"
        weights = lift[ys, xs]
        errors.append(
            math.hypot(
                np.average(xs, weights=weights) - truth.x, np.average(ys, weights=weights) - truth.y
            )
        )
        theta = math.radians(truth.theta)
        along = (xs - truth.x) * math.cos(theta) + (ys - truth.y) * math.sin(theta)
        across = -(xs - truth.x) * math.sin(theta) + (ys - truth.y) * math.cos(theta)
        ball_width = np.ptp(across) + 1
        assert 4 <= ball_width <= 14, f"frame {index}"
        assert np.ptp(along) + 1 == pytest.approx(2 * truth.length + ball_width, abs=4)
        checked += 1
    assert checked > 40
    assert np.median(errors) < 0.75
    assert max(errors) < 3.0


def _make_samples():
    spec = importlib.util.spec_from_file_location("make_samples", MAKE_SAMPLES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_samples_writes_videos_and_truth(tmp_path: Path) -> None:
    videos = _make_samples().main(tmp_path, seconds=1.0)
    assert [v.name for v in videos] == ["rally_a.mp4", "rally_b.mp4", "rally_c.mp4"]
    for video in videos:
        with video.with_suffix(".csv").open(newline="") as f:
            rows = list(csv.reader(f))
        assert rows[0] == ["Frame", "Visibility", "X", "Y", "l", "theta"]
        assert [int(r[0]) for r in rows[1:]] == list(range(30))
        for row in rows[1:]:
            assert row[1] in ("0", "1")
            assert all(len(v.split(".")[1]) == 2 for v in row[2:5])
            assert len(row[5].split(".")[1]) == 2
            if row[1] == "0":
                assert [float(v) for v in row[2:]] == [0.0] * 4
        capture = cv2.VideoCapture(str(video))
        assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(30.0)
        frames = 0
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            assert frame.shape == (360, 640, 3)
            frames += 1
        capture.release()
        assert abs(frames - 30) <= 1
