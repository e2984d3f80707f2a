"""From BlurBall heatmaps to ball detections: position, score and motion blur.

Conventions shared by both entry points:

- Heatmap pixel (row r, column c) has its centre at (x=c, y=r).
- ``scale = (sx, sy)`` is source-frame pixels per heatmap pixel. Positions map with the
  pixel-centre convention ``x_src = (x + 0.5) * sx - 0.5`` (same for y with sy), so the
  centre of the heatmap's first pixel lands on the centre of the source block it covers.
- The blur axis is a direction; it is scaled by (sx, sy) before its angle and length are
  taken, so both are correct in the source frame even when sx != sy.

:func:`blobs` is the host reference (all blobs of one heatmap); :func:`best_detections` is
the cheap path for the live worker (one blob per batch item, one small device→host copy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
import torch


@dataclass(frozen=True)
class Detection:
    """One ball blob, in source-frame coordinates."""

    x: float
    """Blob centre (probability-weighted centroid), source-frame pixels, column axis."""
    y: float
    """Blob centre, source-frame pixels, row axis (pointing down)."""
    score: float
    """Sum of the probabilities over the blob (unitless; grows with blob size and strength)."""
    blur_length: float
    """Half the blob's extent along its principal axis, source-frame pixels."""
    blur_angle: float
    """Principal axis angle, radians in (-pi/2, pi/2], from +x towards +y (clockwise on
    screen, since y points down)."""


def blobs(
    prob: np.ndarray, threshold: float = 0.5, scale: tuple[float, float] = (1.0, 1.0)
) -> list[Detection]:
    """Every blob of ``prob`` (an HxW array of probabilities), best score first.

    A blob is an 8-connected component of the pixels with ``prob >= threshold``.
    """
    _check_threshold(threshold)
    prob = np.asarray(prob)
    if prob.ndim != 2:
        raise ValueError(f"prob must be a 2-D heatmap, got shape {prob.shape}")
    mask = (prob >= threshold).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    detections = []
    for label in range(1, count):  # label 0 is the background
        left, top, width, height = stats[label, :4]
        inside = labels[top : top + height, left : left + width] == label
        rows, cols = np.nonzero(inside)
        weights = prob[top : top + height, left : left + width][inside]
        detections.append(_describe(rows + top, cols + left, weights, scale))
    return sorted(detections, key=lambda d: d.score, reverse=True)


def best_detections(
    logits_last: torch.Tensor,
    threshold: float = 0.5,
    scale: tuple[float, float] = (1.0, 1.0),
    crop: int = 32,
) -> list[Detection | None]:
    """The blob holding each item's highest probability, or None when it is below threshold.

    ``logits_last`` is [B, H, W] logits of each window's newest frame, on any device and
    in any dtype. Sigmoid, peak search and a (2*crop+1)² crop around each peak (shifted
    inward at the borders) happen on the device; the peaks and the crops then come back
    in one copy per batch, so the full heatmaps never leave the device. Crops of items
    below threshold travel with that copy but are not examined.

    The blob is measured inside the crop: a blob that fits in it gives exactly what
    :func:`blobs` gives for it. "Best" means highest peak, which is usually, but not
    necessarily, the blob with the highest score.
    """
    _check_threshold(threshold)
    if logits_last.ndim != 3:
        raise ValueError(f"logits_last must be [B, H, W], got shape {tuple(logits_last.shape)}")
    batch, height, width = logits_last.shape
    crop_h, crop_w = min(2 * crop + 1, height), min(2 * crop + 1, width)
    with torch.no_grad():
        prob = logits_last.float().sigmoid()
        peak, flat_index = prob.flatten(1).max(dim=1)
        peak_row, peak_col = flat_index // width, flat_index % width
        top = (peak_row - crop).clamp(0, height - crop_h)
        left = (peak_col - crop).clamp(0, width - crop_w)
        device = prob.device
        rows = top[:, None] + torch.arange(crop_h, device=device)
        cols = left[:, None] + torch.arange(crop_w, device=device)
        items = torch.arange(batch, device=device)
        crops = prob[items[:, None, None], rows[:, :, None], cols[:, None, :]]
        # Indices are exact in float32 (below 2**24), so one float tensor carries everything.
        header = torch.stack([peak, peak_row, peak_col, top, left], dim=1).float()
        packed = torch.cat([header, crops.flatten(1)], dim=1).cpu().numpy()

    detections: list[Detection | None] = []
    for item in packed:
        if item[0] < threshold:
            detections.append(None)
            continue
        row, col, top_i, left_i = (int(v) for v in item[1:5])
        window = item[5:].reshape(crop_h, crop_w)
        _, labels = cv2.connectedComponents((window >= threshold).astype(np.uint8), connectivity=8)
        inside = labels == labels[row - top_i, col - left_i]
        rows, cols = np.nonzero(inside)
        detections.append(_describe(rows + top_i, cols + left_i, window[inside], scale))
    return detections


def _describe(
    rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, scale: tuple[float, float]
) -> Detection:
    """Measure one blob from its heatmap pixel coordinates and probabilities."""
    weights = weights.astype(np.float64)
    score = float(weights.sum())
    cx = float(weights @ cols) / score
    cy = float(weights @ rows) / score
    dx, dy = cols - cx, rows - cy
    mu20 = float(weights @ (dx * dx)) / score
    mu02 = float(weights @ (dy * dy)) / score
    mu11 = float(weights @ (dx * dy)) / score
    theta = 0.5 * math.atan2(2.0 * mu11, mu20 - mu02)
    along = dx * math.cos(theta) + dy * math.sin(theta)
    half_extent = float(along.max() - along.min()) / 2.0
    sx, sy = scale
    axis_x, axis_y = math.cos(theta) * sx, math.sin(theta) * sy
    angle = math.atan2(axis_y, axis_x)
    if angle <= -math.pi / 2:  # a direction: fold into (-pi/2, pi/2]
        angle += math.pi
    return Detection(
        x=(cx + 0.5) * sx - 0.5,
        y=(cy + 0.5) * sy - 0.5,
        score=score,
        blur_length=half_extent * math.hypot(axis_x, axis_y),
        blur_angle=angle,
    )


def _check_threshold(threshold: float) -> None:
    # A threshold of 0 would admit zero-weight pixels and empty centroids.
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
