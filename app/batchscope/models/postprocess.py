"""From BlurBall heatmaps to ball detections: position, score and motion blur.

The rules follow the authors' reference post-processing (the public ``blurball`` code),
checked against it:

- a blob is an 8-connected component of the pixels with probability strictly above the
  threshold, 0.7 by default (the reference's recommendation for one-step inference);
- the ball is the blob with the largest *score* (the sum of its probabilities), as the
  reference's tracker keeps it — not the blob holding the highest peak;
- the blur angle is in degrees, in (-90, 90], from +x towards +y (clockwise on screen,
  since y points down); a blob at exactly ±45° (μ20 = μ02) gets its true angle (the
  reference returns 0° there);
- the blur length is half the blob's extent along its axis, given both in heatmap
  pixels (what the reference reports, and what a label file's ``l`` holds at the
  heatmap's size) and in source-frame pixels.

Where BatchScope differs on purpose: positions map to the source with the pixel-centre
convention ``x_src = (x + 0.5) * sx - 0.5`` (same for y), so the centre of the heatmap's
first pixel lands on the centre of the source block it covers; the reference uses
``x * sx`` (0.5·(sx − 1) px to the left: 1.4 px at 1080p from 512×288). ``scale = (sx,
sy)`` is source pixels per heatmap pixel, per axis: a source of another aspect is
stretched, and the blur axis is scaled by (sx, sy) before its source angle and length are
taken, so both are right in the source frame even when sx != sy.

:func:`blobs` gives every blob of one heatmap; :func:`best_detections` is the live
worker's path (one ball per batch item; only items with a blob leave the device).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
import torch

#: Probability a pixel must exceed (strictly) to belong to a blob; the reference's value.
THRESHOLD = 0.7


@dataclass(frozen=True)
class Detection:
    """One ball blob."""

    x: float
    """Blob centre (probability-weighted centroid), source-frame pixels, column axis."""
    y: float
    """Blob centre, source-frame pixels, row axis (pointing down)."""
    score: float
    """Sum of the probabilities over the blob (unitless; grows with blob size and strength)."""
    blur_length: float
    """Half the blob's extent along its principal axis, source-frame pixels."""
    blur_length_heatmap: float
    """The same half extent in heatmap pixels (the reference's unit, and a label's ``l``)."""
    blur_angle: float
    """Principal axis angle in the source frame, degrees in (-90, 90], from +x towards +y
    (clockwise on screen, since y points down)."""


def blobs(
    prob: np.ndarray, threshold: float = THRESHOLD, scale: tuple[float, float] = (1.0, 1.0)
) -> list[Detection]:
    """Every blob of ``prob`` (an HxW array of probabilities), best score first.

    A blob is an 8-connected component of the pixels with ``prob > threshold``.
    """
    _check_threshold(threshold)
    prob = np.asarray(prob)
    if prob.ndim != 2:
        raise ValueError(f"prob must be a 2-D heatmap, got shape {prob.shape}")
    mask = (prob > threshold).astype(np.uint8)
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
    threshold: float = THRESHOLD,
    scale: tuple[float, float] = (1.0, 1.0),
) -> list[Detection | None]:
    """Each item's ball: its blob with the largest score, or None when no pixel is above.

    ``logits_last`` is [B, H, W] logits of each window's newest frame, on any device and
    in any dtype. The sigmoid and each item's peak are computed on the device; only the
    items whose peak is above the threshold come back to the host (in one copy), where
    their blobs are measured exactly as :func:`blobs` measures them.
    """
    _check_threshold(threshold)
    if logits_last.ndim != 3:
        raise ValueError(f"logits_last must be [B, H, W], got shape {tuple(logits_last.shape)}")
    with torch.no_grad():
        prob = logits_last.float().sigmoid()
        found = (prob.flatten(1).amax(dim=1) > threshold).nonzero().flatten()
        maps = prob[found].cpu().numpy() if len(found) else None
    detections: list[Detection | None] = [None] * logits_last.shape[0]
    for item, heatmap in zip(found.tolist(), maps if maps is not None else [], strict=True):
        detections[item] = blobs(heatmap, threshold, scale)[0]
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
        blur_length_heatmap=half_extent,
        blur_angle=math.degrees(angle),
    )


def _check_threshold(threshold: float) -> None:
    # strict >: at 0 every pixel with any weight joins a blob; at 1 none can
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
