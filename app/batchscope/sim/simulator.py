"""A discrete-event simulator of the batching worker over a measured batch curve.

Why it exists: the live worker needs wall-clock time (a 30 s scenario takes
30 s), while the question "which policy, how many sessions, on which GPU"
needs dozens of scenarios. The simulator replays the same scenario in
virtual time and in a fraction of a second, and stays comparable with the
live run because it shares everything except the device:

- the **policies** are the very objects the live worker uses
  (:func:`~batchscope.engine.policies.make_policy`), asked on the same
  occasions (a window arrives, the device frees, a policy's ``wait_until``
  falls due) and fed back the same way (``observe`` after each batch);
- the **sessions** follow ``engine/session.py``: each publishes a window from
  its 3rd frame on, at its own phase inside the frame interval (drawn by
  :func:`~batchscope.engine.session.first_frame_delay`, as the feeder draws it),
  into the live worker's :class:`~batchscope.engine.session.Mailboxes` (frameless
  windows on the virtual clock), where replacing an untaken window counts one
  *overwritten* frame and the counts restart at the end of the warm-up, as
  ``Engine.reset_stats`` restarts them;
- the **records** are :data:`ITEM_DTYPE` / :data:`BATCH_DTYPE` rows and the
  report comes from :func:`~batchscope.engine.report.build_report`, so every
  figure has the definition it has in ``run``.

The device is one batch at a time whose duration is the profile's
``BatchCurve.ms(n)``; prep and post take no time (the emulated backend's prep
is the real copying of the new frames, ≈ 0.1 ms per window at 512×288, which the
simulator leaves out). Like ``run``, statistics cover ``duration_s`` seconds
after a ``warmup_s`` warm-up: the windows and batches delivered in that
interval.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchscope.config import ConfigError, RunConfig
from batchscope.engine.policies import make_policy
from batchscope.engine.report import SessionInfo, build_report
from batchscope.engine.session import WINDOW, Mailboxes, Window, first_frame_delay
from batchscope.engine.stats import BATCH_DTYPE, ITEM_DTYPE
from batchscope.profiles.profile import BatchCurve, DeviceProfile, load_profile

DEFAULT_WARMUP_S = 1.0  # the same default as `batchscope run --warmup`

# Event kinds. Events at the same instant are all applied before the policy is
# asked, so their order only matters for determinism.
_DEVICE_FREE, _FRAME, _TIMER = 0, 1, 2


@dataclass(frozen=True)
class Trace:
    """What a simulated run recorded over its measured interval (times in s, virtual clock)."""

    items: np.ndarray  # ITEM_DTYPE
    batches: np.ndarray  # BATCH_DTYPE
    overwritten: dict[int, int]  # session -> windows replaced while untaken
    start: float  # s, end of the warm-up
    end: float  # s, end of the run


def session_phases(sessions: int, fps: float, seed: int) -> list[float]:
    """First-frame time of each session in s, inside one frame interval.

    Drawn as the live feeder draws them (:func:`first_frame_delay`, one draw per
    session in id order from ``random.Random(seed)``).
    """
    rng = random.Random(seed)
    return [first_frame_delay(rng, fps) for _ in range(sessions)]


def simulate_trace(
    config: RunConfig, curve: BatchCurve, warmup_s: float = DEFAULT_WARMUP_S
) -> Trace:
    """Run ``config``'s scenario in virtual time; the policy comes from ``make_policy``."""
    if config.fps is None:
        raise ConfigError("fps", None, "the simulator needs a frame rate (it has no sources)")
    if not warmup_s >= 0:
        raise ConfigError("warmup", warmup_s, "must be 0 or more seconds")
    policy = make_policy(config)
    period = 1.0 / config.fps
    t0 = warmup_s
    t_end = warmup_s + config.duration_s
    batch_s: dict[int, float] = {}  # batch size -> s, memoised curve lookups

    phases = session_phases(config.sessions, config.fps, config.seed)
    frames = [0] * config.sessions  # frames each session has produced so far
    heap: list[tuple[float, int, int]] = [(p, _FRAME, sid) for sid, p in enumerate(phases)]
    heapq.heapify(heap)

    mailboxes = Mailboxes()
    counting = False  # overwrites are counted from the end of the warm-up
    in_flight: tuple[float, list[Window]] | None = None  # (start s, windows)
    timer: float | None = None  # the pending wait_until, if any
    items: list[tuple] = []
    batches: list[tuple] = []

    while heap:
        now, kind, sid = heapq.heappop(heap)
        if now > t_end:
            break
        if not counting and now >= t0:
            mailboxes.reset_counts()
            counting = True
        if kind == _FRAME:
            frames[sid] += 1
            heapq.heappush(heap, (phases[sid] + frames[sid] * period, _FRAME, sid))
            if frames[sid] >= WINDOW:  # a session needs 3 frames for its first window
                mailboxes.publish(Window(sid, frames[sid], frames[sid] - 1, (), now))
        elif kind == _DEVICE_FREE:
            start, taken = in_flight
            in_flight = None
            n = len(taken)
            if now >= t0:  # delivered in the measured interval
                compute_s = now - start
                batches.append((start, n, 0.0, compute_s, 0.0, now))
                items.extend((w.session, n, w.arrival, start, start, now, now) for w in taken)
            policy.observe(n, (now - min(w.arrival for w in taken)) * 1000.0)
        elif now == timer:
            timer = None
        if in_flight is not None or (heap and heap[0][0] == now):
            continue
        waiting = mailboxes.waiting()
        if not waiting:
            continue
        decision = policy.select(waiting, now)
        taken = mailboxes.take(decision.take)
        if taken:
            n = len(taken)
            if n not in batch_s:
                batch_s[n] = curve.ms(n) / 1000.0
            in_flight = (now, taken)
            heapq.heappush(heap, (now + batch_s[n], _DEVICE_FREE, -1))
        elif (
            decision.wait_until is not None
            and now < decision.wait_until
            and (timer is None or decision.wait_until < timer)
        ):
            timer = decision.wait_until
            heapq.heappush(heap, (timer, _TIMER, -1))

    counted = mailboxes.overwritten() if counting else {}
    return Trace(
        items=np.array(items, dtype=ITEM_DTYPE),
        batches=np.array(batches, dtype=BATCH_DTYPE),
        overwritten={sid: counted.get(sid, 0) for sid in range(config.sessions)},
        start=t0,
        end=t_end,
    )


def simulate(
    config: RunConfig, profile: DeviceProfile | None = None, warmup_s: float = DEFAULT_WARMUP_S
) -> dict[str, Any]:
    """The JSON report (``kind: simulate``) of ``config`` on ``profile``'s batch curve.

    ``profile`` defaults to ``load_profile(config.profile)``; a missing curve
    for the config's precision and resolution raises ProfileError.
    """
    profile = profile or load_profile(config.profile or "")
    curve = profile.curve(config.precision, config.resolution)
    trace = simulate_trace(config, curve, warmup_s)
    sessions = [SessionInfo(sid, "simulated") for sid in range(config.sessions)]
    memory: dict[str, float] = {}
    if profile.memory_total_mb:
        memory["device_total_mb"] = float(profile.memory_total_mb)
    peaks = {p.batch: p.peak_mb for p in curve.points if p.peak_mb is not None}
    used = [int(n) for n in np.unique(trace.batches["size"]) if int(n) in peaks]
    if used:
        memory["profile_peak_mb"] = float(max(peaks[n] for n in used))
    return build_report(
        "simulate",
        config.with_changes(extra={**config.extra, "warmup_s": warmup_s}),
        sessions,
        trace.items,
        trace.batches,
        trace.overwritten,
        trace.end - trace.start,
        memory,
        extra={
            "device_label": f"simulated: {profile.name} ({profile.device})",
            "weights": "simulated device: no model runs",
        },
    )
