"""Sources of another aspect: letterboxed into the model frame, detections mapped back
through the same placement, tiles at the true aspect."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from tests.test_ui_video import snapshot

from batchscope.config import ConfigError, RunConfig
from batchscope.engine.backends.torch_device import detect
from batchscope.engine.metrics import Latest
from batchscope.engine.session import Session, Window
from batchscope.engine.snapshot import SessionView
from batchscope.engine.sources import VideoFileSource, placement, to_model
from batchscope.models.postprocess import best_detections
from batchscope.ui.sessions.video_wall import VideoWall
from batchscope.ui.theme import Look


def test_a_portrait_source_is_scaled_by_one_factor_and_centred() -> None:
    where = placement((720, 1280), (256, 144))
    # 144 / 1280 = 0.1125: 720 px wide becomes 81, centred in 256 with 87 px bars
    assert where.size == (81, 144)
    assert where.offset == (87, 0)
    assert where.scale == pytest.approx((720 / 81, 1280 / 144))
    assert placement((1280, 720), (256, 144)).offset == (0, 0)  # same aspect: no bars
    assert placement((720, 1280), (256, 144), "stretch").size == (256, 144)
    assert placement((640, 480), (256, 144)).offset == (32, 0)  # 4:3: 192 x 144


def test_to_model_pads_with_black_bars_around_the_whole_picture() -> None:
    bgr = np.full((1280, 720, 3), (255, 0, 0), np.uint8)  # blue in BGR
    frame = to_model(bgr, (256, 144))
    assert frame.shape == (144, 256, 3)
    assert np.all(frame[:, :87] == 0) and np.all(frame[:, 87 + 81 :] == 0)
    assert np.all(frame[:, 87 : 87 + 81] == (0, 0, 255))  # RGB
    stretched = to_model(bgr, (256, 144), "stretch")
    assert np.all(stretched == (0, 0, 255))


def test_detections_map_back_through_the_bars_to_source_pixels() -> None:
    """A blob at model pixel (87 + 40, 72) of a letterboxed 720x1280 clip is the ball at
    source ((40 + 0.5) * 720/81 - 0.5, (72 + 0.5) * 1280/144 - 0.5) = (359.5, 643.94)."""
    where = placement((720, 1280), (256, 144))
    logits = torch.full((1, 144, 256), -10.0)
    logits[0, 71:74, 126:129] = 10.0  # centred on (127, 72)
    frames = (np.zeros((144, 256, 3), np.uint8),) * 3
    window = Window(0, 3, 2, frames, 0.0, where.scale, where.offset)
    (found,) = detect(best_detections, logits, [window])
    assert found.x == pytest.approx(359.5, abs=1e-6)
    assert found.y == pytest.approx(72.5 * 1280 / 144 - 0.5, abs=1e-6)


def _portrait_clip(path: Path, frames: int = 6) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (72, 128))
    for _ in range(frames):
        writer.write(np.full((128, 72, 3), 200, np.uint8))
    writer.release()
    return path


def test_a_portrait_file_plays_letterboxed_and_its_sessions_map_through_it(tmp_path) -> None:
    source = VideoFileSource(_portrait_clip(tmp_path / "portrait.mp4"), (128, 72))
    where = source.placement
    assert source.source_size == (72, 128)
    assert where.size == (40, 72) and where.offset == (44, 0)
    frame = source.frame(0)
    assert frame[:, :44].max() == 0 and frame[:, 84:].max() == 0
    assert frame[:, 46:82].min() > 150  # the picture itself (codec noise at its edges)
    session = Session(0, source)
    window = [session.next_window(0.0) for _ in range(3)][-1]
    assert window.offset == (44, 0) and window.scale == pytest.approx((72 / 40, 128 / 72))
    stretched = VideoFileSource(tmp_path / "portrait.mp4", (128, 72), fit="stretch")
    assert stretched.placement.offset == (0, 0) and stretched.frame(0)[:, :10].min() > 150


def test_a_tile_shows_a_portrait_clip_at_its_true_aspect(qtbot) -> None:
    wall = VideoWall(Look())
    qtbot.addWidget(wall)
    wall.resize(512, 288)
    snap = snapshot(False, None)
    frame = to_model(np.full((1280, 720, 3), 90, np.uint8), (256, 144))
    latest = Latest(frame, None, seq=7, frame_index=7, latency_ms=10.0)
    view = SessionView(0, "clip.mp4", "running", None, 30.0, 10, 0, {}, {}, latest)
    snap.sessions[0] = view
    wall.update_from(snap, {"clip.mp4": placement((720, 1280), (256, 144))})
    tile = wall._tiles[0]
    assert tile.frame_size == (81, 144)  # the content, not the padded model frame
    assert tile.to_frame == pytest.approx((81 / 720, 144 / 1280))


def test_fit_is_checked() -> None:
    with pytest.raises(ConfigError, match="fit = 'crop': choose from letterbox, stretch"):
        RunConfig(fit="crop")
