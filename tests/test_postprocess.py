"""Post-processing recovers position, score order and blur of synthetic ball heatmaps, the
weighted way (the default) and the reference's exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from batchscope.config import BACKEND_FIELDS, ConfigError, RunConfig
from batchscope.engine.backends import make_backend
from batchscope.engine.backends.torch_backend import TorchBackend
from batchscope.models.postprocess import THRESHOLD, Detection, best_detections, blobs

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
    """A blur streak whose above-threshold part reaches ``half_length`` px from its centre."""
    peak = 0.95
    sigma_along = half_length / math.sqrt(2 * math.log(peak / THRESHOLD))
    return _gaussian(cx, cy, sigma_along, 1.5, angle_deg, peak)


def _logits(*heatmaps: np.ndarray) -> torch.Tensor:
    return torch.logit(torch.from_numpy(np.stack(heatmaps)).float())


def _as_seen(logits: torch.Tensor) -> np.ndarray:
    """The probabilities best_detections thresholds (float32 sigmoid of the logits)."""
    return logits.float().sigmoid().numpy()


def _assert_same(a: Detection, b: Detection) -> None:
    for field in ("x", "y", "score", "blur_length", "blur_length_heatmap", "blur_angle"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-5, abs=1e-5), field


@pytest.mark.parametrize(("cx", "cy"), [(60.0, 30.0), (60.3, 30.7), (41.25, 20.8)])
def test_round_blob_centroid(cx: float, cy: float) -> None:
    (blob,) = blobs(_gaussian(cx, cy, 3.0))
    assert blob.x == pytest.approx(cx, abs=0.1)
    assert blob.y == pytest.approx(cy, abs=0.1)


def test_elongated_blob_position_angle_and_length() -> None:
    (blob,) = blobs(_elongated(60.0, 30.0, half_length=10.0, angle_deg=30.0))
    assert blob.x == pytest.approx(60.0, abs=0.1)
    assert blob.y == pytest.approx(30.0, abs=0.1)
    assert blob.blur_angle == pytest.approx(30.0, abs=2.0)  # degrees
    assert blob.blur_length == pytest.approx(10.0, rel=0.15)
    assert blob.blur_length_heatmap == blob.blur_length  # scale 1: the same pixels


def test_angle_range_is_half_open() -> None:
    vertical = blobs(_elongated(60.0, 30.0, half_length=10.0, angle_deg=90.0))[0]
    steep = blobs(_elongated(60.0, 30.0, half_length=10.0, angle_deg=-60.0))[0]
    assert vertical.blur_angle == pytest.approx(90.0, abs=1e-9)
    assert steep.blur_angle == pytest.approx(-60.0, abs=2.0)


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
        blobs(np.zeros((HEIGHT, WIDTH)), threshold=1.0)  # strict >: nothing could pass


def test_scale_maps_to_source_pixels() -> None:
    heatmap = _elongated(60.0, 30.0, half_length=6.0, angle_deg=30.0)
    base = blobs(heatmap)[0]
    source = blobs(heatmap, scale=(640 / WIDTH, 360 / HEIGHT))[0]
    assert source.x == pytest.approx((60.0 + 0.5) * 5 - 0.5, abs=0.5)
    assert source.y == pytest.approx((30.0 + 0.5) * 5 - 0.5, abs=0.5)
    assert source.blur_length == pytest.approx(base.blur_length * 5)
    assert source.blur_length_heatmap == pytest.approx(base.blur_length)  # heatmap pixels
    assert source.blur_angle == pytest.approx(base.blur_angle)
    assert source.score == pytest.approx(base.score)


def test_anisotropic_scale_turns_the_axis() -> None:
    heatmap = _elongated(60.0, 30.0, half_length=10.0, angle_deg=45.0)
    base = blobs(heatmap)[0]
    stretched = blobs(heatmap, scale=(2.0, 1.0))[0]
    theta = math.radians(base.blur_angle)
    axis = (2.0 * math.cos(theta), math.sin(theta))
    assert stretched.blur_angle == pytest.approx(math.degrees(math.atan2(axis[1], axis[0])))
    assert stretched.blur_length == pytest.approx(base.blur_length * math.hypot(*axis))


@pytest.mark.parametrize("scale", [(1.0, 1.0), (5.0, 5.0)])
def test_best_detection_equals_best_blob(scale: tuple[float, float]) -> None:
    heatmap = np.maximum(
        _elongated(70.0, 35.0, half_length=9.0, angle_deg=30.0),
        _gaussian(15.0, 15.0, 1.2, peak=0.8),
    )
    logits = _logits(heatmap)
    (best,) = best_detections(logits, scale=scale)
    assert best is not None
    _assert_same(best, blobs(_as_seen(logits)[0], scale=scale)[0])


def test_best_detection_near_the_border() -> None:
    logits = _logits(_gaussian(2.0, 1.0, 2.0))
    (best,) = best_detections(logits)
    assert best is not None
    _assert_same(best, blobs(_as_seen(logits)[0])[0])


def test_batch_with_an_empty_item() -> None:
    ball = _elongated(40.0, 50.0, half_length=7.0, angle_deg=-20.0)
    empty = np.full((HEIGHT, WIDTH), 0.01)
    logits = _logits(empty, ball)
    found = best_detections(logits)
    assert found[0] is None
    assert found[1] is not None
    _assert_same(found[1], blobs(_as_seen(logits)[1])[0])


def test_best_detections_accepts_low_precision_logits() -> None:
    heatmap = _gaussian(60.0, 30.0, 2.0)
    (best,) = best_detections(_logits(heatmap).to(torch.bfloat16))
    assert best is not None
    assert best.x == pytest.approx(60.0, abs=0.1)
    assert best.y == pytest.approx(30.0, abs=0.1)


# -- the reference's rules, with the expected values written out ----------------------------


def _box(heatmap: np.ndarray, rows: slice, cols: slice, value: float) -> np.ndarray:
    heatmap[rows, cols] = value
    return heatmap


def test_the_ball_is_the_blob_with_the_largest_score_not_the_highest_peak() -> None:
    heatmap = np.zeros((HEIGHT, WIDTH))
    _box(heatmap, slice(10, 12), slice(10, 12), 0.99)  # peak 0.99, score 4 x 0.99 = 3.96
    _box(heatmap, slice(40, 44), slice(80, 86), 0.80)  # peak 0.80, score 24 x 0.8 = 19.2
    (best,) = best_detections(_logits(heatmap))
    assert (best.x, best.y) == pytest.approx((82.5, 41.5))
    assert best.score == pytest.approx(19.2)
    assert [round(b.score, 2) for b in blobs(heatmap)] == [19.2, 3.96]


def test_a_pixel_exactly_at_the_threshold_is_not_part_of_a_blob() -> None:
    heatmap = np.zeros((HEIGHT, WIDTH))
    _box(heatmap, slice(30, 33), slice(60, 63), THRESHOLD)
    assert blobs(heatmap) == []
    heatmap[31, 61] = THRESHOLD + 0.01  # one pixel above: a blob of one pixel
    (only,) = blobs(heatmap)
    assert (only.x, only.y, only.score, only.blur_length) == pytest.approx((61, 31, 0.71, 0.0))
    assert THRESHOLD == 0.7


def test_a_blob_at_exactly_45_degrees_keeps_its_angle() -> None:
    heatmap = np.zeros((HEIGHT, WIDTH))
    for i in range(-5, 6):  # a diagonal line: mu20 == mu02, the reference's 0-degree case
        heatmap[30 + i, 60 + i] = 0.9
    (blob,) = blobs(heatmap)
    assert blob.blur_angle == pytest.approx(45.0)
    assert blob.blur_length_heatmap == pytest.approx(5 * math.sqrt(2))
    heatmap = np.fliplr(heatmap).copy()
    assert blobs(heatmap)[0].blur_angle == pytest.approx(-45.0)


def test_length_in_heatmap_and_source_pixels() -> None:
    heatmap = np.zeros((HEIGHT, WIDTH))
    _box(heatmap, slice(30, 31), slice(50, 71), 0.9)  # a horizontal streak 21 px long
    (blob,) = blobs(heatmap, scale=(3.75, 3.75))  # 512x288 heatmap of a 1920x1080 source
    assert blob.blur_length_heatmap == pytest.approx(10.0)  # half of 20 px between the ends
    assert blob.blur_length == pytest.approx(37.5)
    assert blob.blur_angle == pytest.approx(0.0)
    # position: pixel centres, (60 + 0.5) * 3.75 - 0.5 (the reference would say 60 * 3.75)
    assert (blob.x, blob.y) == pytest.approx((226.375, 113.875))


# -- the reference's exact rules (--postprocess reference) -----------------------------------


def _moments_angle_and_pca_half_extent(mask: np.ndarray) -> tuple[float, float]:
    """The binary mask's orientation (degrees) and the half extent of its pixels along their
    principal axis, computed here with numpy alone (no cv2)."""
    rows, cols = np.nonzero(mask)
    dx, dy = cols - cols.mean(), rows - rows.mean()
    mu20, mu02, mu11 = (dx * dx).sum(), (dy * dy).sum(), (dx * dy).sum()
    angle = 0.5 * math.atan2(2 * mu11, mu20 - mu02)
    _, vectors = np.linalg.eigh(np.cov(np.stack([dy, dx])))
    along = np.stack([dy, dx], axis=1) @ vectors[:, -1]
    return math.degrees(angle), float(along.max() - along.min()) / 2


def test_reference_measures_the_binary_mask_and_keeps_its_positions_convention() -> None:
    heatmap = _elongated(60.0, 30.0, half_length=9.0, angle_deg=30.0)
    heatmap[30, 62] = 0.999  # a peak off centre: pulls the weighted moments, not the mask's
    angle, half_extent = _moments_angle_and_pca_half_extent(heatmap > THRESHOLD)
    (blob,) = blobs(heatmap, scale=(2.5, 2.5), method="reference")
    assert blob.blur_angle == pytest.approx(angle, abs=1e-6)
    assert blob.blur_length_heatmap == pytest.approx(half_extent, abs=1e-4)
    assert blob.blur_length == pytest.approx(half_extent * 2.5, abs=1e-4)
    (weighted,) = blobs(heatmap, scale=(2.5, 2.5))
    assert weighted.blur_angle != pytest.approx(blob.blur_angle, abs=1e-3)
    # the same weighted centroid, mapped x * s there and (x + 0.5) * s - 0.5 here
    assert blob.x == pytest.approx(weighted.x - (2.5 - 1) / 2)
    assert blob.y == pytest.approx(weighted.y - (2.5 - 1) / 2)
    assert blob.score == pytest.approx(weighted.score, rel=1e-6)


def test_reference_returns_0_degrees_wherever_mu20_equals_mu02() -> None:
    diagonal = np.zeros((HEIGHT, WIDTH))
    for i in range(-5, 6):
        diagonal[30 + i, 60 + i] = 0.9
    assert blobs(diagonal, method="reference")[0].blur_angle == 0.0
    assert blobs(diagonal)[0].blur_angle == pytest.approx(45.0)
    # a 3x3 square brighter along its diagonal: the mask is symmetric (mu20 = mu02), the
    # weights say 45 degrees
    square = np.zeros((HEIGHT, WIDTH))
    square[20:23, 40:43] = 0.75
    for i in range(3):
        square[20 + i, 40 + i] = 0.99
    assert blobs(square, method="reference")[0].blur_angle == 0.0
    assert blobs(square)[0].blur_angle == pytest.approx(45.0)


def test_reference_and_weighted_agree_where_every_weight_is_the_same() -> None:
    heatmap = np.zeros((HEIGHT, WIDTH))
    streak = _elongated(60.0, 30.0, half_length=9.0, angle_deg=-25.0) > THRESHOLD
    heatmap[streak] = 0.9
    (reference,) = blobs(heatmap, method="reference")
    (weighted,) = blobs(heatmap)
    assert reference.blur_angle == pytest.approx(weighted.blur_angle, abs=1e-9)
    assert reference.blur_length_heatmap == pytest.approx(weighted.blur_length_heatmap, abs=1e-4)
    assert (reference.x, reference.y) == pytest.approx((weighted.x, weighted.y), abs=1e-9)


def test_best_detections_measures_the_reference_way_when_asked() -> None:
    heatmap = _elongated(70.0, 35.0, half_length=9.0, angle_deg=30.0)
    logits = _logits(heatmap)
    (best,) = best_detections(logits, scale=(5.0, 5.0), method="reference")
    _assert_same(best, blobs(_as_seen(logits)[0], scale=(5.0, 5.0), method="reference")[0])
    with pytest.raises(ValueError, match="postprocess must be one of weighted, reference"):
        best_detections(logits, method="binary")


def test_the_choice_is_a_validated_config_field_that_reaches_the_backend() -> None:
    with pytest.raises(ConfigError, match="postprocess = 'pca': choose from weighted, reference"):
        RunConfig(postprocess="pca")
    assert RunConfig().to_json()["postprocess"] == "weighted"  # the report's config says it
    assert "postprocess" in BACKEND_FIELDS  # a change rebuilds the backend
    config = RunConfig(
        backend="torch",
        device="cpu",
        profile=None,
        precision="fp32",
        resolution=(128, 72),
        postprocess="reference",
        runtime="torch",
    )
    backend = make_backend(config)
    try:
        assert backend.postprocess == "reference"
    finally:
        backend.close()
    with pytest.raises(ValueError, match="postprocess must be one of weighted, reference"):
        TorchBackend("cpu", "fp32", (128, 72), postprocess="pca")
