"""Accuracy of the demo weights through the app's own pipeline, and freshness by policy.

Part 1 (``--accuracy``): for each resolution and precision, the torch backend on the CPU
(the engine's TorchBackend: the demo weights, normalisation, post-processing and the
letterbox mapping the app uses) runs every ``--stride``-th window of the synthetic scene's
loop for seeds 0..``--seeds``-1 (seed 0 is the demo; training never saw seeds below 10 000),
and each result is scored as the live worker scores it (``engine/accuracy.py``: a hit is a
detection within 5 source px of a visible ball, or none when the ball is out of view).
Windows are run one at a time, unpaced: accuracy does not depend on timing.

Part 2 (``--freshness``): live runs on the emulated laptop-8gb (512x288 FP16, 30 fps) with
the synthetic scene, for each policy and session count; the emulated device gives no
positions, so freshness is the ground-truth distance between the window's frame and the
frame current when its result arrives (the ball's travel during the measured latency).

Usage: python benchmarks/accuracy.py [--accuracy] [--freshness] [--seeds 2] [--stride 3]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine.accuracy import score
from batchscope.engine.backends.torch_backend import TorchBackend
from batchscope.engine.engine import Engine
from batchscope.engine.session import Session
from batchscope.engine.sources import SyntheticSource

RESOLUTIONS = ((128, 72), (256, 144), (512, 288))
PRECISIONS = ("fp32", "bf16")


def accuracy(resolution, precision, seeds: int, stride: int) -> dict:
    backend = TorchBackend("cpu", precision, resolution)
    hits, scored, errors, took = 0, 0, [], []
    for seed in range(seeds):
        source = SyntheticSource(resolution, seed=seed)
        session = Session(0, source)
        windows = [session.next_window(0.0) for _ in range(source.n_frames + 2)][2:]
        for window in windows[::stride]:
            t = time.perf_counter()
            (det,) = backend.run([window]).detections
            took.append(time.perf_counter() - t)
            _, hit, error, _ = score(det, source.truth(window.frame_index), None, True)
            scored += 1
            hits += hit
            if not math.isnan(error):
                errors.append(error)
    backend.close()
    return {
        "resolution": f"{resolution[0]}x{resolution[1]}",
        "precision": precision,
        "weights": backend.weights,
        "scored": scored,
        "hit_rate": round(hits / scored, 3),
        "median_error_px": round(float(np.median(errors)), 2) if errors else None,
        "ms_per_window": round(1000 * float(np.median(took)), 1),
    }


def freshness(policy: str, sessions: int, seconds: float) -> dict:
    config = RunConfig(
        sources=("synthetic",),
        sessions=sessions,
        policy=policy,
        backend="emulated",
        profile="laptop-8gb",
        precision="fp16",
        resolution=(512, 288),
    )
    engine = Engine(config)
    engine.open()
    engine.start()
    time.sleep(1.0)
    engine.reset_stats(announce=False)
    time.sleep(seconds)
    report = engine.report()
    engine.stop()
    o = report["overall"]
    return {
        "policy": policy,
        "sessions": sessions,
        "p50_ms": o["latency_ms"]["p50"],
        "p99_ms": o["latency_ms"]["p99"],
        "min_fps": o["min_fps"],
        "median_freshness_px": o["accuracy"]["median_freshness_px"],
        "worst_session_freshness_px": max(
            s["accuracy"]["median_freshness_px"] or 0.0 for s in report["sessions"]
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--freshness", action="store_true")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--stride", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    if not (args.accuracy or args.freshness):
        args.accuracy = args.freshness = True
    if args.accuracy:
        print("resolution precision  scored  hit %  median err px  ms/window")
        for resolution in RESOLUTIONS:
            for precision in PRECISIONS:
                r = accuracy(resolution, precision, args.seeds, args.stride)
                err = "–" if r["median_error_px"] is None else f"{r['median_error_px']:.2f}"
                print(
                    f"{r['resolution']:>10} {precision:>9} {r['scored']:>7} "
                    f"{100 * r['hit_rate']:>6.1f} {err:>14} {r['ms_per_window']:>10.1f}",
                    flush=True,
                )
                print(json.dumps(r), file=sys.stderr)
    if args.freshness:
        print("policy   sessions  p50 ms  p99 ms  min fps  freshness px (median, worst session)")
        for sessions in (4, 6):
            for policy in ("oldest", "all"):
                r = freshness(policy, sessions, args.seconds)
                print(
                    f"{policy:<8} {sessions:>8} {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} "
                    f"{r['min_fps']:>8.1f}  {r['median_freshness_px']:>6.1f}, "
                    f"{r['worst_session_freshness_px']:.1f}",
                    flush=True,
                )
                print(json.dumps(r), file=sys.stderr)


if __name__ == "__main__":
    main()
