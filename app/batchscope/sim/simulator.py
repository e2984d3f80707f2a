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
- the **sessions** mirror ``engine/session.py`` and ``engine/feeder.py``:
  each publishes a window from its 3rd frame on, at its own phase inside the
  frame interval (drawn like the feeder: ``random.Random(seed)``, one draw
  per session in id order), into a latest-only mailbox where replacing an
  untaken window counts one *overwritten* frame;
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
from batchscope.engine.policies import Waiting, make_policy
from batchscope.engine.report import SessionInfo, build_report
from batchscope.engine.session import WINDOW
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

    Drawn exactly as the live feeder draws them (``random.Random(seed)``, in
    session order), so a simulated and a live run with the same seed start
    their sessions at the same relative instants.
    """
    rng = random.Random(seed)
    return [rng.random() / fps for _ in range(sessions)]


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

    mailbox: dict[int, Waiting] = {}
    overwritten = dict.fromkeys(range(config.sessions), 0)
    in_flight: tuple[float, list[Waiting]] | None = None  # (start s, windows)
    timer: float | None = None  # the pending wait_until, if any
    items: list[tuple] = []
    batches: list[tuple] = []

    while heap:
        now, kind, sid = heapq.heappop(heap)
        if now > t_end:
            break
        if kind == _FRAME:
            frames[sid] += 1
            heapq.heappush(heap, (phases[sid] + frames[sid] * period, _FRAME, sid))
            if frames[sid] >= WINDOW:  # a session needs 3 frames for its first window
                if now >= t0:
                    overwritten[sid] += sid in mailbox
                prev = mailbox.get(sid)
                mailbox[sid] = Waiting(sid, now, prev.waiting_since if prev else now)
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
        if in_flight is not None or not mailbox or (heap and heap[0][0] == now):
            continue
        decision = policy.select(list(mailbox.values()), now)
        taken = [mailbox.pop(s) for s in decision.take if s in mailbox]
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

    return Trace(
        items=np.array(items, dtype=ITEM_DTYPE),
        batches=np.array(batches, dtype=BATCH_DTYPE),
        overwritten=overwritten,
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
