"""The host's share: when a segment's figures are the machine's rather than the policy's.

Why: on a busy machine (a video call beside the talk, a shared CI box) the threads that
publish frames and start batches wake late, and the tail grows with no change of policy.
Every window records how late the host served it (``ITEM_DTYPE``'s ``late``: the
feeder's late publish plus the worker's late wake-up, ``host``); a segment's
``host_late_ms`` is its p50 and p99. This module says, in one line, when that matters:

- the host **explains** a segment's tail when the segment was predicted, its live p99 is
  over the prediction by more than :data:`OVER_PREDICTION` and that excess is within
  :data:`EXPLAINS` × the host's p99 lateness ("the tail is the machine's");
- it is **worth saying** without a prediction when its p99 lateness is at least
  :data:`MATTERS_MS` and :data:`MATTERS_SHARE` of the segment's p99 latency.

The figures are measured, not modelled: the simulator's windows are never late (its
``host_late_ms`` is 0), so live ÷ predicted on a busy machine compares the machine's
delays with none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MATTERS_MS = 2.0  # a p99 lateness below this is timer noise on any machine
MATTERS_SHARE = 0.10  # ... and below a tenth of the p99 latency, it is not the story
OVER_PREDICTION = 1.10  # live p99 over predicted p99 by more than this: a gap to explain
EXPLAINS = 1.5  # the host explains a gap up to this × its p99 lateness (they add loosely)
#: What the host check says of a machine, from its timers' p99 lateness (ms): under
#: BUSY_MS quiet, else busy. Measured here: a quiet machine's timers p99 0.1–0.6 ms late
#: headless, 2.6 ms with the app drawing in the same process; beside two CPU hogs on 2
#: cores 3.6–9.7 ms.
BUSY_MS = 5.0


def host_word(p99_ms: float) -> str:
    """``quiet`` or ``busy`` for timers late by ``p99_ms`` at the 99th percentile."""
    return "busy" if p99_ms >= BUSY_MS else "quiet"


def explained_by_host(segment: Mapping[str, Any]) -> bool:
    """Whether the segment's p99 over its prediction is within what the host delayed."""
    overall, predicted = segment.get("overall"), segment.get("predicted")
    if not overall or not predicted or "host_late_ms" not in overall:
        return False
    live = overall["latency_ms"]["p99"]
    planned = predicted["latency_ms"]["p99"]
    late = overall["host_late_ms"]["p99"]
    if planned <= 0 or live <= OVER_PREDICTION * planned or late < MATTERS_MS:
        return False
    return live - planned <= EXPLAINS * late


def host_verdict(segment: Mapping[str, Any]) -> str | None:
    """One line on the host's share of a segment (or a run's ``overall``), or None when
    it does not matter."""
    overall = segment.get("overall") if "overall" in segment else None
    figures = overall if overall is not None else segment
    if not figures or "host_late_ms" not in figures:
        return None
    late = figures["host_late_ms"]["p99"]
    p99 = figures["latency_ms"]["p99"]
    said = f"the host was late by p99 {late:.1f} ms"
    if explained_by_host(segment):
        over = p99 - segment["predicted"]["latency_ms"]["p99"]
        return (
            f"{said}: this tail (+{over:.1f} ms over the prediction) is the machine's, "
            "not the policy's"
        )
    if (
        segment.get("predicted")
        and late >= MATTERS_MS
        and p99 > OVER_PREDICTION * segment["predicted"]["latency_ms"]["p99"]
    ):
        return f"{said}, less than the tail over the prediction: not the machine alone"
    if not segment.get("predicted") and late >= MATTERS_MS and late >= MATTERS_SHARE * p99:
        return f"{said} (its threads woke late): part of this tail is the machine's"
    return None
