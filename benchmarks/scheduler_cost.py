"""Scheduler cost: µs per policy decision and per batch assembly, at 1–64 sessions.

A decision is what the worker does before every batch: read the waiting
windows from the mailboxes and ask the policy. Assembly is taking the chosen
windows out of the mailboxes and stacking their uint8 frames into the staging
buffer (the host half of "prep"). Compare both with a 10 ms batch.

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
from batchscope.engine.backends import Staging
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


def assembly_us(n: int, frame: np.ndarray) -> float:
    h, w, _ = frame.shape
    staging = Staging((w, h))
    ids = list(range(n))
    times = []
    for _ in range(20):
        box = filled(n, frame)
        t0 = time.perf_counter()
        staging.stack(box.take(ids))
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


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
    print(
        f"\n## µs per batch assembly at {w}x{h} (take all n windows + stack uint8 into "
        "the staging buffer)"
    )
    print("| " + " | ".join(f"{n} windows" for n in SESSIONS) + " |")
    print("|" + "---|" * len(SESSIONS))
    print("| " + " | ".join(f"{assembly_us(n, frame):.0f}" for n in SESSIONS) + " |")


if __name__ == "__main__":
    main()
