"""The definitions behind every number BatchScope shows (one place for each).

The UI, the JSON report and the simulator all call these functions, so a
figure means the same wherever it appears. Times are in milliseconds unless
a name says otherwise.

- latency (end-to-end): result ready − arrival; stages: wait (arrival →
  batch start), prep (→ tensor on device), compute (model, synced),
  post (→ result ready).
- fps of a session: results delivered per second (1 s sliding window live;
  delivered / duration in reports).
- throughput: windows processed per second, all sessions.
- fairness: min fps / mean fps, and Jain's index (Σx)² / (n·Σx²).
- which sessions the fps figures cover: the sessions being served (state
  ``running``, or ``stalled``: a client that stopped sending is still one of
  the run's clients, and its 0 fps is shown). A session whose source failed
  is listed with its error and left out of mean/min fps and Jain: its 0 fps
  is its source's failure, not the worker's unfairness, and counting it
  would make one bad file read as a starved session on every figure. Each
  session's entry carries its state and error, so what was left out is on
  the same page.
- busy: fraction of wall time the device spent in compute.
- accuracy and freshness (sessions with ground truth): hit rate and median
  position error of the results scored against their own newest frame;
  freshness is the distance from the answer to the ball's true position when
  the answer arrives (definitions in ``engine/accuracy.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

LIVE_FPS_WINDOW_S = 1.0
#: The stages of a window's latency, in order. ``host`` is what was the machine's: the
#: worker woke later than it meant to (a timer or a notification served late by a busy
#: OS), so the batch started that much later, and an emulated device's timer ended its
#: batch late (see ITEM_DTYPE); ``wait`` and ``compute`` are the rest of theirs.
STAGES = ("wait", "host", "prep", "compute", "post")


#: The latency percentiles every summary gives, by numpy's default rule ("linear": the
#: value at index q·(n−1) of the sorted latencies, interpolated between its neighbours)
PERCENTILES = (50, 95, 99)
_ZERO_LATENCY = {"mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}


def latency_summary(ms: np.ndarray | Sequence[float]) -> dict[str, float]:
    """mean, p50, p95, p99, max of latencies in ms (zeros when there are none)."""
    a = np.asarray(ms, dtype=np.float64)
    return latency_summaries(a, [a.size])[0]


def latency_summaries(ms: np.ndarray, counts: Sequence[int] | np.ndarray) -> list[dict[str, float]]:
    """:func:`latency_summary` of each group of ``ms``, the groups consecutive runs of
    ``counts`` values, in one pass over all of them (the UI summarises every session 15
    times a second). The percentiles are ``np.percentile``'s to the bit (its linear rule:
    ``tests/test_stats_groups.py``); a mean is the group's sum over its count."""
    ms = np.asarray(ms, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.intp)
    full = np.flatnonzero(counts)
    out = [dict(_ZERO_LATENCY) for _ in counts]
    if full.size == 0:
        return out
    n = counts[full]
    ends = np.cumsum(counts)[full]
    starts = ends - n
    mean = np.add.reduceat(ms, starts) / n  # summed in the records' order
    # each group's latencies sorted in place, a sort per group: 6x faster than one
    # two-key lexsort over all of them (64 sessions x 1,024: 2.4 vs 15.4 ms)
    spans = zip(starts.tolist(), ends.tolist(), strict=True)
    ordered = np.concatenate([np.sort(ms[a:b]) for a, b in spans])
    ends = np.cumsum(n)
    starts = ends - n
    figures = {
        "mean": mean,
        **{f"p{q}": _percentile_sorted(ordered, starts, n, q / 100) for q in PERCENTILES},
        "max": ordered[ends - 1],
    }
    rounded = {k: [round(x, 3) for x in v.tolist()] for k, v in figures.items()}
    for j, g in enumerate(full.tolist()):
        out[g] = {k: rounded[k][j] for k in _ZERO_LATENCY}
    return out


def _percentile_sorted(
    ordered: np.ndarray, starts: np.ndarray, n: np.ndarray, q: float
) -> np.ndarray:
    """The ``q`` quantile of each sorted group, by ``np.percentile``'s linear rule and
    its arithmetic: index (n−1)·q, the two values around it, their lerp from the nearer."""
    at = (n - 1) * q
    below = np.floor(at)
    t = at - below
    last = at >= n - 1
    i = starts + np.where(last, n - 1, below.astype(np.intp))
    a = ordered[i]
    b = ordered[np.where(last, i, i + 1)]
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def stage_means(items: np.ndarray) -> dict[str, float]:
    """Mean ms of each stage over item records (see :data:`ITEM_DTYPE`): they add up to
    the mean latency (``wait`` is the time to the batch's start less ``host``)."""
    return stage_means_grouped(items, [items.size])[0]


def stage_means_grouped(
    items: np.ndarray, counts: Sequence[int] | np.ndarray
) -> list[dict[str, float]]:
    """:func:`stage_means` of each group of ``items`` (consecutive runs of ``counts``
    records), in one pass: a mean is the group's sum over its count."""
    counts = np.asarray(counts, dtype=np.intp)
    full = np.flatnonzero(counts)
    out = [dict.fromkeys(STAGES, 0.0) for _ in counts]
    if full.size == 0:
        return out
    n = counts[full]
    starts = np.cumsum(counts)[full] - n
    spans = {
        "wait": items["start"] - items["arrival"] - items["host_wait"],
        "host": items["host_wait"] + items["host_device"],
        "prep": items["prep_end"] - items["start"],
        "compute": items["compute_end"] - items["prep_end"] - items["host_device"],
        "post": items["result"] - items["compute_end"],
    }
    means = {
        stage: [round(x, 3) for x in (np.add.reduceat(spans[stage], starts) / n * 1000.0).tolist()]
        for stage in STAGES
    }
    for j, g in enumerate(full.tolist()):
        out[g] = {stage: means[stage][j] for stage in STAGES}
    return out


def host_late_summary(items: np.ndarray) -> dict[str, float]:
    """p50 and p99 ms of how late the host served each window (:data:`ITEM_DTYPE`'s
    ``host_late``: the feeder's late publish plus the worker's late wake-up)."""
    return host_late_summaries(items, [items.size])[0]


def host_late_summaries(
    items: np.ndarray, counts: Sequence[int] | np.ndarray
) -> list[dict[str, float]]:
    """:func:`host_late_summary` of each group of ``items`` (consecutive runs of ``counts``
    records), in one pass: :func:`latency_summaries`' p50 and p99 of the lateness."""
    summaries = latency_summaries(items["host_late"] * 1000.0, counts)
    return [{"p50": x["p50"], "p99": x["p99"]} for x in summaries]


def latencies_ms(items: np.ndarray) -> np.ndarray:
    return (items["result"] - items["arrival"]) * 1000.0


def accuracy_summary(items: np.ndarray) -> dict[str, float | int | None]:
    """The accuracy block of item records (see ``engine/accuracy.py``): the ball-in-view
    windows and the no-ball windows apart.

    ``scored``: results scored for accuracy; ``visible``: those with the ball in view,
    over which ``hit_rate`` (0-1) and ``median_error_px`` are taken; ``no_ball``: those
    without, over which ``false_detection_rate`` (0-1: the share with a detection) is.
    A rate is None when it has no window (the emulated device and untrained weights
    score none); ``median_error_px`` is None when no visible ball was detected,
    ``median_freshness_px`` when no result had a freshness.
    """
    # field by field: indexing the structured records would copy them whole (the UI
    # takes this per session 15 times a second)
    scored = items["scored"]
    visible = scored & items["visible"]
    no_ball = scored & ~items["visible"]
    n_visible = int(np.count_nonzero(visible))
    n_no_ball = int(np.count_nonzero(no_ball))
    hits = int(np.count_nonzero(items["hit"] & visible))
    false = int(np.count_nonzero(items["detected"] & no_ball))
    errors = items["error_px"][scored]
    errors = errors[~np.isnan(errors)]
    fresh = items["fresh_px"]
    fresh = fresh[~np.isnan(fresh)]
    return {
        "scored": n_visible + n_no_ball,
        "visible": n_visible,
        "hit_rate": round(hits / n_visible, 4) if n_visible else None,
        "median_error_px": round(float(np.median(errors)), 2) if len(errors) else None,
        "no_ball": n_no_ball,
        "false_detection_rate": round(false / n_no_ball, 4) if n_no_ball else None,
        "median_freshness_px": round(float(np.median(fresh)), 2) if len(fresh) else None,
    }


def live_fps(result_times: np.ndarray, now: float, window_s: float = LIVE_FPS_WINDOW_S) -> float:
    """Results delivered in the last ``window_s`` seconds, per second."""
    return float(np.count_nonzero(result_times > now - window_s)) / window_s


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index (Σx)²/(n·Σx²): 1 when all equal, 1/n when one takes all;
    None when nothing was delivered (no session, or every one at 0): an all-stalled run
    is not "perfectly fair", it has no fairness to speak of."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.any(x):
        return None
    return float(x.sum() ** 2 / (x.size * np.square(x).sum()))


RECONNECTING = "reconnecting"  # a network stream's state while it is lost ("reconnecting (2)")


def served(state: str) -> bool:
    """Whether a session in ``state`` counts in the fps figures (see the module doc)."""
    # a stalled client is served: it sends nothing; so is a stream reconnecting, and
    # every session of a paused run (its figures leave the paused time out)
    return state in ("running", "stalled", "paused") or state.startswith(RECONNECTING)


def fps_figures(states_and_fps: Iterable[tuple[str, float]]) -> dict[str, float | None]:
    """mean_fps, min_fps and jain over the sessions being served (:func:`served`).

    ``states_and_fps`` is (session state, fps) per session, fps by whichever
    definition the caller shows (1 s window live, delivered/duration in reports). No
    figure where there is nothing to take it over: mean and min fps are None with no
    session served, Jain's index also when none delivered anything (:func:`jain`).
    """
    fps = [f for state, f in states_and_fps if served(state)]
    fair = jain(fps)
    return {
        "mean_fps": round(float(np.mean(fps)), 3) if fps else None,
        "min_fps": round(float(np.min(fps)), 3) if fps else None,
        "jain": round(fair, 4) if fair is not None else None,
    }


def busy_fraction(compute_s: float, wall_s: float, devices: int = 1) -> float:
    """The share of ``wall_s`` the device spent in ``compute_s``; on several ``devices``
    (``compute_s`` summed over them) their mean share."""
    return 0.0 if wall_s <= 0 else min(1.0, compute_s / (wall_s * devices))


#: One record per processed window; times in seconds on the engine's clock.
ITEM_DTYPE = np.dtype(
    [
        ("session", np.int32),
        ("batch", np.int32),  # size of the batch it ran in
        ("arrival", np.float64),
        ("start", np.float64),
        ("prep_end", np.float64),
        ("compute_end", np.float64),
        ("result", np.float64),
        # scored against ground truth, the fields of engine/accuracy.Score: whether the
        # result was scored for accuracy, whether the ball was in view, whether it held a
        # detection, whether that was a hit, its position error and its freshness
        # (source px; NaN where they do not apply)
        ("scored", np.bool_),
        ("visible", np.bool_),
        ("detected", np.bool_),
        ("hit", np.bool_),
        ("error_px", np.float32),
        ("fresh_px", np.float32),
        # the host's share (s): how late the worker woke for its batch against when it
        # meant to (a deadline, or the publish that woke it), within this window's wait
        ("host_wait", np.float64),
        # and how late the emulated device's timer ended its batch, within its compute
        ("host_device", np.float64),
        # how late the host served it in all (s): the feeder's publish after its due
        # time (before arrival, so not in its latency) plus ``host_wait`` and ``host_device``
        ("host_late", np.float64),
        # which device ran it: its index in the run's devices (0 with one device)
        ("device", np.int16),
    ]
)


def pick(records: np.ndarray, which: np.ndarray) -> np.ndarray:
    """``records[which]`` for a mask or an index array, the same records by
    ``np.compress`` / ``np.take``: numpy's own indexing of structured records is 10-25×
    slower (60 000 items: a mask 4.6 vs 0.4 ms, an order 17.8 vs 0.7 ms), and the UI
    picks from them 15 times a second."""
    if which.dtype == np.bool_:
        return np.compress(which, records)
    return np.take(records, which)


def group_sessions(
    items: np.ndarray,
) -> tuple[np.ndarray, dict[int, tuple[int, int, int]], np.ndarray]:
    """``items`` grouped by session in one sort (a stable one: each session's records keep
    their order): the grouped records, each present session's ``(group, lo, hi)`` (its
    records are ``grouped[lo:hi]``) and the groups' sizes, for the ``*_grouped`` and
    :func:`latency_summaries` functions."""
    grouped = pick(items, np.argsort(items["session"], kind="stable"))
    present, first, count = np.unique(grouped["session"], return_index=True, return_counts=True)
    spans = {
        int(sid): (k, int(a), int(a + c))
        for k, (sid, a, c) in enumerate(zip(present, first, count, strict=True))
    }
    return grouped, spans, count


def item_records(n: int) -> np.ndarray:
    """``n`` zeroed :data:`ITEM_DTYPE` records, not scored (error and freshness NaN)."""
    items = np.zeros(n, ITEM_DTYPE)
    items["error_px"] = np.nan
    items["fresh_px"] = np.nan
    return items


#: One record per batch.
BATCH_DTYPE = np.dtype(
    [
        ("start", np.float64),
        ("size", np.int32),
        ("prep_s", np.float64),
        ("compute_s", np.float64),
        ("post_s", np.float64),
        ("end", np.float64),
        ("reason", np.int8),  # why it left: an index into rules.REASONS (0: not said)
        ("cap", np.int32),  # the policy's cap when it left (0: none), e.g. adaptive's
        # empty rows run after the windows to fill the policy's batch shape (fixed's:
        # batch - size), device time that delivers nothing; 0 for every other policy
        ("padded", np.int32),
        # the host's share, as its windows' records say it (s): how late the worker woke
        # for it (0: it was running), and how late its emulated device time ended
        ("host_wait", np.float64),
        ("host_device", np.float64),
        # which device ran it: its index in the run's devices (0 with one device)
        ("device", np.int16),
    ]
)

#: One record per overwritten window: its session and when it was replaced (s).
OVERWRITE_DTYPE = np.dtype([("session", np.int32), ("t", np.float64)])


#: The report's ``devices`` list, one definition for BatchScope's worker on several devices,
#: the simulator's and a serving engine's replicas as the client recorded them: every item
#: and batch record carries the index of the device that ran it (``device``).


def device_entries(
    items: np.ndarray,
    batches: np.ndarray,
    labels: Sequence[str],
    duration_s: float,
    pinned: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """Per device (``labels[d]`` names device ``d``): ``device``, ``sessions`` (``pinned``:
    the sessions pinned to it; else those it served in the records), ``busy`` (its share
    of ``duration_s`` in compute) and ``batch_sizes`` (its batches by size)."""
    out = []
    for d, label in enumerate(labels):
        mine = pick(batches, batches["device"] == d)
        if pinned is not None:
            sessions = int(pinned[d])
        else:
            sessions = len(np.unique(items["session"][items["device"] == d]))
        out.append(
            {
                "device": label,
                "sessions": sessions,
                "busy": round(busy_fraction(float(mine["compute_s"].sum()), duration_s), 4),
                "batch_sizes": batch_sizes(mine["size"]),
            }
        )
    return out


def batch_sizes(sizes: np.ndarray) -> dict[str, int]:
    """Batches by size, smallest first: ``{"size": batches}`` (the report's ``batch_sizes``)."""
    values, counts = np.unique(sizes, return_counts=True)
    return {str(k): n for k, n in zip(values.tolist(), counts.tolist(), strict=True)}
