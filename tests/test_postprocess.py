"""Post-processing recovers position, score order and blur of synthetic ball heatmaps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from batchscope.models.postprocess import Detection, best_detections, blobs

HEIGHT, WIDTH = 72, 128


def _gaussian(
    cx: float,
    cy: float,
    sigma_along: float,
    sigma_across: float = 0.0,
    angle_deg: float = 0.0,
    peak: float = 0.95,
) -> np.ndarray:
    """An (optionally elongated and rotated) Gaussian blob on an empty heatmap."""
    rows, cols = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    theta = math.radians(angle_deg)
    dx, dy = cols - cx, rows - cy
    along = dx * math.cos(theta) + dy * math.sin(theta)
    across = -dx * math.sin(theta) + dy * math.cos(theta)
    sigma_across = sigma_across or sigma_along
    return peak * np.exp(-(along**2 / (2 * sigma_along**2) + across**2 / (2 * sigma_across**2)))


def _elongated(cx: float, cy: float, half_length: float, angle_deg: float) -> np.ndarray:
    """A blur streak whose above-0.5 part reaches ``half_length`` px from its centre."""
    peak = 0.95
    sigma_along = half_length / math.sqrt(2 * math.log(peak / 0.5))
    return _gaussian(cx, cy, sigma_along, 1.5, angle_deg, peak)


def _logits(*heatmaps: np.ndarray) -> torch.Tensor:
    return torch.logit(torch.from_numpy(np.stack(heatmaps)).float())


def _assert_same(a: Detection, b: Detection) -> None:
    for field in ("x", "y", "score", "blur_length", "blur_angle"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-5, abs=1e-5), field


@pytest.mark.parametrize(("cx", "cy"), [(60.0, 30.0), (60.3, 30.7), (41.25, 20.8)])
def test_round_blob_centroid(cx: float, cy: float) -> None:
    (blob,) = blobs(_gaussian(cx, cy, 2.0))
    assert blob.x == pytest.approx(cx, abs=0.1)
    assert blob.y == pytest.approx(cy, abs=0.1)


def test_elongated_blob_position_angle_and_length() -> None:
    (blob,) = blobs(_elongated(60.0, 30.0, half_length=10.0, angle_deg=30.0))
    assert blob.x == pytest.approx(60.0, abs=0.1)
    assert blob.y == pytest.approx(30.0, abs=0.1)
    assert math.degrees(blob.blur_angle) == pytest.approx(30.0, abs=2.0)
    assert blob.blur_length == pytest.approx(10.0, rel=0.15)


def test_angle_range_is_half_open() -> None:
    vertical = blobs(_elongated(60.0, 30.0, half_length=10.0, angle_deg=90.0))[0]
    steep = blobs(_elongated(60.0, 30.0, half_length=10.0, angle_deg=-60.0))[0]
    assert vertical.blur_angle == pytest.approx(math.pi / 2, abs=1e-9)
    assert math.degrees(steep.blur_angle) == pytest.approx(-60.0, abs=2.0)


def test_blobs_sorted_by_score() -> None:
    small = _gaussian(20.0, 20.0, 1.5)
    large = _elongated(90.0, 40.0, half_length=8.0, angle_deg=0.0)
    found = blobs(np.maximum(small, large))
    assert len(found) == 2
    assert found[0].score > found[1].score
    assert found[0].x == pytest.approx(90.0, abs=0.1)
    assert found[1].x == pytest.approx(20.0, abs=0.1)


def test_nothing_above_threshold() -> None:
    faint = _gaussian(60.0, 30.0, 2.0, peak=0.4)
    assert blobs(faint) == []
    assert best_detections(_logits(faint)) == [None]


def test_threshold_out_of_range() -> None:
    with pytest.raises(ValueError, match="threshold"):
        blobs(np.zeros((HEIGHT, WIDTH)), threshold=0.0)


def test_scale_maps_to_source_pixels() -> None:
    heatmap = _elongated(60.0, 30.0, half_length=6.0, angle_deg=30.0)
    base = blobs(heatmap)[0]
    source = blobs(heatmap, scale=(640 / WIDTH, 360 / HEIGHT))[0]
    assert source.x == pytest.approx((60.0 + 0.5) * 5 - 0.5, abs=0.5)
    assert source.y == pytest.approx((30.0 + 0.5) * 5 - 0.5, abs=0.5)
    assert source.blur_length == pytest.approx(base.blur_length * 5)
    assert source.blur_angle == pytest.approx(base.blur_angle)
    assert source.score == pytest.approx(base.score)


def test_anisotropic_scale_turns_the_axis() -> None:
    heatmap = _elongated(60.0, 30.0, half_length=10.0, angle_deg=45.0)
    base = blobs(heatmap)[0]
    stretched = blobs(heatmap, scale=(2.0, 1.0))[0]
    axis = (2.0 * math.cos(base.blur_angle), math.sin(base.blur_angle))
    assert stretched.blur_angle == pytest.approx(math.atan2(axis[1], axis[0]))
    assert stretched.blur_length == pytest.approx(base.blur_length * math.hypot(*axis))


@pytest.mark.parametrize("scale", [(1.0, 1.0), (5.0, 5.0)])
def test_best_detection_equals_best_blob(scale: tuple[float, float]) -> None:
    heatmap = np.maximum(
        _elongated(70.0, 35.0, half_length=9.0, angle_deg=30.0),
        _gaussian(15.0, 15.0, 1.2, peak=0.8),
    )
    (best,) = best_detections(_logits(heatmap), scale=scale)
    assert best is not None
    _assert_same(best, blobs(heatmap, scale=scale)[0])


def test_best_detection_near_the_border() -> None:
    heatmap = _gaussian(2.0, 1.0, 2.0)
    (best,) = best_detections(_logits(heatmap), crop=8)
    assert best is not None
    _assert_same(best, blobs(heatmap)[0])


def test_batch_with_an_empty_item() -> None:
    ball = _elongated(40.0, 50.0, half_length=7.0, angle_deg=-20.0)
    empty = np.full((HEIGHT, WIDTH), 0.01)
    found = best_detections(_logits(empty, ball))
    assert found[0] is None
    assert found[1] is not None
    _assert_same(found[1], blobs(ball)[0])


def test_best_detections_accepts_low_precision_logits() -> None:
    heatmap = _gaussian(60.0, 30.0, 2.0)
    (best,) = best_detections(_logits(heatmap).to(torch.bfloat16))
    assert best is not None
    assert best.x == pytest.approx(60.0, abs=0.1)
    assert best.y == pytest.approx(30.0, abs=0.1)
