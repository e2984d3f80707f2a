"""The video wall: tile layout, and the detection overlay in source-frame coordinates."""

from __future__ import annotations

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine.metrics import Latest
from batchscope.engine.snapshot import SessionView, Snapshot
from batchscope.engine.sources import placement
from batchscope.models.postprocess import Detection
from batchscope.ui.sessions.video_wall import VideoWall, grid_shape
from batchscope.ui.theme import Look


@pytest.mark.parametrize(
    ("n", "w", "h", "expected"),
    [
        (1, 800, 450, (1, 1)),
        (4, 800, 450, (2, 2)),
        (3, 1600, 300, (3, 1)),
        (16, 800, 450, (4, 4)),
        (6, 600, 600, (2, 3)),
    ],
)
def test_grid_shape(n, w, h, expected):
    assert grid_shape(n, w, h, 16 / 9) == expected


def snapshot(draws: bool, detection: Detection | None) -> Snapshot:
    frame = np.zeros((144, 256, 3), np.uint8)
    latest = Latest(frame, detection, seq=5, frame_index=5, latency_ms=10.0)
    view = SessionView(0, "clip.mp4", "running", None, 30.0, 10, 0, {}, {}, latest)
    return Snapshot(
        t=1.0,
        config=RunConfig(),
        running=True,
        paused=False,
        device="d",
        weights="untrained weights: timing only",
        draws_detections=draws,
        policy="all",
        oom_cap=None,
        sessions=[view],
        recent_latency_ms={},
        batch_sizes={},
        throughput_wps=0.0,
        busy=0.0,
        memory={},
        timeline=[],
    )


def test_detection_is_drawn_at_the_ball_in_source_pixels(qtbot):
    wall = VideoWall(Look())
    qtbot.addWidget(wall)
    wall.resize(512, 288)
    # the ball at the centre of a 1280×720 source; the model frame is 256×144
    det = Detection(
        x=640.0, y=360.0, score=3.0, blur_length=40.0, blur_length_heatmap=8.0, blur_angle=45.0
    )
    wall.update_from(snapshot(True, det), {"clip.mp4": placement((1280, 720), (256, 144))})
    image = wall.grab().toImage()
    ring = image.pixelColor(256 + 13, 144)  # on the circle (radius ≈ 2.5% of the width)
    assert (ring.red(), ring.green(), ring.blue()) != (0, 0, 0)
    assert wall._tiles[0].to_frame == (0.2, 0.2)


def test_untrained_weights_show_the_message_instead(qtbot):
    wall = VideoWall(Look())
    qtbot.addWidget(wall)
    wall.resize(512, 288)
    det = Detection(10.0, 10.0, 1.0, 5.0, 1.0, 0.0)
    wall.update_from(snapshot(False, det), {})
    assert wall._tiles[0].detection is None
    assert wall._message == "untrained weights: timing only"
    image = wall.grab().toImage()
    assert (image.width(), image.height()) == (512, 288)
