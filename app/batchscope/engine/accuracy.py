"""Accuracy and freshness: each delivered result scored against the ball's ground truth.

Two figures, for the sessions whose source knows where the ball is (the synthetic scene,
or a video file with a BlurBall label CSV beside it):

- **accuracy**: the result is scored against the truth of *its own* newest frame, and
  the two kinds of window are counted apart, because they ask different questions. A
  window with the ball in view is a *hit* when a detection lies within
  :data:`HIT_RADIUS_PX` source pixels of it (its *error* is that distance); no detection,
  or one farther away, is a miss: the **hit rate** is over these windows only. A window
  without the ball in view (a *no-ball* window) has no hit to score: a detection there is
  a **false detection**, and the false-detection rate is over the no-ball windows. (A
  model that never answers would otherwise score the no-ball share of a clip as hits.)
  Only detections from trained weights are scored: untrained weights and the emulated
  device give none.
- **freshness**: how far the ball really is from the answer when the answer arrives —
  the distance (source px) between the detected position and the ball's true position in
  the source frame current at delivery (the session's newest frame then). It is latency
  in pixels of ball travel. Where the backend gives no positions (the emulated device,
  untrained weights), the window's own truth stands in for the detection: freshness is
  then how far the ball travelled during the measured latency. Scored only while the
  ball is in view at both instants.

The worker appends each result's :class:`Score` to its item
record (:data:`stats.ITEM_DTYPE`); every figure — per session, per segment, the run — is
:func:`stats.accuracy_summary` of those records.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from batchscope.scene.synthetic import BallTruth

HIT_RADIUS_PX = 5.0
"""A detection within this many source pixels of a visible ball is a hit."""


class Score(NamedTuple):
    """One delivered result against the truth, the fields of its item record."""

    scored: bool
    """Whether it was scored for accuracy (truth known, real detections)."""
    visible: bool
    """Whether the ball was in view in the window's newest frame."""
    detected: bool
    """Whether the result holds a detection (without the ball in view: a false one)."""
    hit: bool
    """Whether the ball was in view and a detection lies within the radius of it."""
    error_px: float
    """Source px from the detection to a visible ball; NaN where there is none."""
    fresh_px: float
    """Source px from the answer to the ball at delivery; NaN where it does not apply."""


UNSCORED = Score(False, False, False, False, math.nan, math.nan)
"""The score of a result without ground truth."""


def score(
    detection: Any,
    truth: BallTruth | None,
    truth_now: BallTruth | None,
    positions: bool,
    radius_px: float = HIT_RADIUS_PX,
) -> Score:
    """The :class:`Score` of one delivered result.

    ``detection`` has ``x``, ``y`` in source pixels (or is None); ``truth`` is the truth of
    the window's newest frame, ``truth_now`` that of the frame current at delivery;
    ``positions``: whether the backend's detections are real (trained weights on a
    real device). NaN marks a figure that does not apply.
    """
    if truth is None:
        return UNSCORED
    error = math.nan
    hit = False
    if positions:
        if truth.visible and detection is not None:
            error = math.hypot(detection.x - truth.x, detection.y - truth.y)
            hit = error <= radius_px
        answer = (detection.x, detection.y) if detection is not None else None
    else:
        answer = (truth.x, truth.y) if truth.visible else None
    fresh = math.nan
    if answer is not None and truth.visible and truth_now is not None and truth_now.visible:
        fresh = math.hypot(answer[0] - truth_now.x, answer[1] - truth_now.y)
    detected = positions and detection is not None
    return Score(positions, truth.visible, detected, hit, error, fresh)
