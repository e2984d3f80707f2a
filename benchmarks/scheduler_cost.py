"""Scheduler cost: µs per policy decision and per batch assembly, at 1–64 sessions.

A decision is what the worker does before every batch: read the waiting
windows from the mailboxes and ask the policy. Assembly is taking the chosen
windows out of the mailboxes and copying their uint8 frames into the staging
buffer (the host half of "prep"), measured two ways on realistic data (every
session its own frames, advancing one frame per batch, so nothing is cache-hot):
all three frames of every window (the first version), and only the frames the
device's frame pool lacks (``engine/assembly.py``; one per window here).
Compare both with a 10 ms batch.

Usage: python benchmarks/scheduler_cost.py [--resolution 512x288]
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np

from batchscope.config import POLICIES, RunConfig, parse_resolution
from batchscope.engine.assembly import FramePool, Staging
from batchscope.engine.policies import make_policy
from batchscope.engine.session import Mailboxes, Window

SESSIONS = (1, 4, 16, 64)


def filled(n: int, frame: np.ndarray) -> Mailboxes:
    box = Mailboxes()
    for s in range(n):
        box.publish(Window(s, 3, 3, (frame, frame, frame), 1.0 + s * 1e-4))
    return box


def decision_us(policy_name: str, n: int, frame: np.ndarray) -> float:
    cfg = RunConfig(policy=policy_name, max_batch=8 if policy_name == "dynamic" else None)
    policy = make_policy(cfg)
    box = filled(n, frame)

    def decide() -> None:
        policy.select(box.waiting(), 2.0)

    reps = 2000
    return min(timeit.repeat(decide, number=reps, repeat=5)) / reps * 1e6


def assembly_us(n: int, frame: np.ndarray, new_only: bool, rounds: int = 20) -> float:
    """Median µs to take ``n`` windows and stage their frames (all, or the new ones only)."""
    h, w, _ = frame.shape
    rng = np.random.default_rng(0)
    frames = [  # every session its own frames: rounds + 2 of them
        [rng.integers(0, 255, (h, w, 3), np.uint8) for _ in range(rounds + 2)] for _ in range(n)
    ]
    whole = np.empty((n, 3, h, w, 3), np.uint8)
    staging, pool = Staging((w, h)), FramePool()
    ids = list(range(n))
    times = []
    for r in range(rounds):
        box = Mailboxes()
        for s in ids:
            box.publish(Window(s, r + 3, r + 2, tuple(frames[s][r : r + 3]), 1.0))
        t0 = time.perf_counter()
        windows = box.take(ids)
        if new_only:
            plan = pool.plan(windows)
            staging.put(plan.uploads)
            pool.commit(plan)
        else:
            for i, win in enumerate(windows):
                np.stack(win.frames, out=whole[i])
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:])) * 1e6  # round 0 ships whole windows either way


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resolution", default="512x288")
    args = ap.parse_args()
    w, h = parse_resolution(args.resolution)
    frame = np.zeros((h, w, 3), np.uint8)
    print(f"# scheduler cost, {time.strftime('%Y-%m-%d')}, python {sys.version.split()[0]}")
    print("## µs per decision (mailboxes.waiting() + policy.select())")
    print("| policy | " + " | ".join(f"{n} sessions" for n in SESSIONS) + " |")
    print("|---|" + "---|" * len(SESSIONS))
    for p in POLICIES:
        cells = [f"{decision_us(p, n, frame):.1f}" for n in SESSIONS]
        print(f"| {p} | " + " | ".join(cells) + " |")
    print(f"\n## µs per batch assembly at {w}x{h} (take n windows + stage their uint8 frames)")
    print("| frames staged | " + " | ".join(f"{n} windows" for n in SESSIONS) + " |")
    print("|---|" + "---|" * len(SESSIONS))
    for label, new_only in (("all 3 per window", False), ("new only (frame pool)", True)):
        cells = [f"{assembly_us(n, frame, new_only):.0f}" for n in SESSIONS]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
