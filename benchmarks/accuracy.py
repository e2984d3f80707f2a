"""Accuracy of the demo weights through the app's own pipeline, and freshness by policy.

Part 1 (``--accuracy``): for each resolution and precision (``--precision``, default
fp32,bf16), the engine's own backend on the CPU (the demo weights, normalisation,
post-processing and the letterbox mapping the app uses) in the precision's runtime
(``--runtime``; default each precision's own: int8 in ONNX Runtime, bf16 in torch, fp32 in
the CPU default, ONNX Runtime) runs every ``--stride``-th window of the synthetic scene's
loop for seeds 0..``--seeds``-1 (seed 0 is the demo; training never saw seeds below 10 000,
the int8 calibration uses 5000 and 5001), and each result is scored as the live worker
scores it (``engine/accuracy.py``: a hit is a detection within 5 source px of a visible
ball, or none when the ball is out of view). Windows are run one at a time (the frame
pool holds one window per session), unpaced: accuracy does not depend on timing.

Part 1b (``--variants``): the demo weights off the training look. Each variant changes one
thing of the default scene (ball or table colour, mirroring, JPEG compression, sensor noise,
frame rate) on an unseen seed (``--variant-seed``, 777) at 256x144 FP32, every 4th window at
30 fps (the stride scales with the frame rate, so each variant covers the same clip time),
through the same backend and scoring. It reports the hit rate over the windows with the ball
in view, the misses (no detection) and the detections more than 5 px off, the 95th
percentile error, and the false detections in the no-ball windows with where they sit
(``static``: how many lie within 5 px of their median: a model firing on a scene feature).

Part 2 (``--freshness``): live runs on the emulated laptop-8gb (512x288 FP16, 30 fps) with
the synthetic scene, for each policy and session count; the emulated device gives no
positions, so freshness is the ground-truth distance between the window's frame and the
frame current when its result arrives (the ball's travel during the measured latency).

Usage: python benchmarks/accuracy.py [--accuracy] [--variants] [--freshness] [--seeds 2]
       [--stride 3] [--checkpoint FILE] [--precision fp32,int8,bf16] [--runtime R]
       [--resolution 128x72,256x144]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import cv2
import numpy as np

from batchscope.config import RunConfig, default_runtime, parse_resolution
from batchscope.engine.accuracy import HIT_RADIUS_PX, score
from batchscope.engine.backends.onnx_backend import OnnxBackend
from batchscope.engine.backends.torch_backend import TorchBackend
from batchscope.engine.engine import Engine
from batchscope.engine.session import Session
from batchscope.engine.sources import SYNTHETIC_SIZE, CachedSource, SyntheticSource, to_model
from batchscope.engine.stats import accuracy_summary, item_records
from batchscope.scene.synthetic import DEFAULT_STYLE, BallTruth, SceneStyle, SyntheticScene

RESOLUTIONS = ((128, 72), (256, 144), (512, 288))
PRECISIONS = ("fp32", "bf16")


def records(scores: list) -> np.ndarray:
    """Item records of ``scores`` (accuracy.Score), for stats.accuracy_summary."""
    items = item_records(len(scores))
    for i, s in enumerate(scores):
        for key, value in s._asdict().items():
            items[key][i] = value
    return items


def accuracy(
    resolution,
    precision,
    seeds: int,
    stride: int,
    checkpoint: str | None,
    runtime: str | None = None,
) -> dict:
    runtime = runtime or default_runtime("cpu", precision)
    if runtime == "onnxruntime":
        backend = OnnxBackend("cpu", precision, resolution, checkpoint=checkpoint, said=print_said)
    else:
        backend = TorchBackend("cpu", precision, resolution, checkpoint=checkpoint)
    scores, took = [], []
    false_detections = 0
    for seed in range(seeds):
        source = SyntheticSource(resolution, seed=seed)
        session = Session(0, source)
        windows = [session.next_window(0.0) for _ in range(source.n_frames + 2)][2:]
        for window in windows[::stride]:
            t = time.perf_counter()
            (det,) = backend.run([window]).detections
            took.append(time.perf_counter() - t)
            truth = source.truth(window.frame_index)
            scores.append(score(det, truth, None, True))
            false_detections += det is not None and not truth.visible
    backend.close()
    summary = accuracy_summary(records(scores))
    return {
        "resolution": f"{resolution[0]}x{resolution[1]}",
        "precision": precision,
        "runtime": runtime,
        "weights": backend.weights,
        **{k: summary[k] for k in ("visible", "hit_rate", "median_error_px", "no_ball")},
        "false_detection_rate": summary["false_detection_rate"],
        "false_detections": int(false_detections),
        "ms_per_window": round(1000 * float(np.median(took)), 1),
    }


def print_said(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Variant:
    """One departure from the default look of the scene."""

    name: str
    style: SceneStyle = DEFAULT_STYLE
    fps: float = 30.0
    mirror: bool = False  # the rendered frame flipped left <-> right
    jpeg_quality: int | None = None  # each rendered frame through JPEG at this quality


VARIANTS = (
    Variant("default"),
    Variant("grey ball 90", style=replace(DEFAULT_STYLE, ball_rgb=(90, 90, 90))),
    Variant("dark grey ball 64", style=replace(DEFAULT_STYLE, ball_rgb=(64, 64, 64))),
    Variant("white-grey table", style=replace(DEFAULT_STYLE, table_rgb=(200, 200, 196))),
    Variant("red table", style=replace(DEFAULT_STYLE, table_rgb=(150, 30, 30))),
    Variant("mirrored", mirror=True),
    Variant("JPEG q20", jpeg_quality=20),
    Variant("noise sigma 16", style=replace(DEFAULT_STYLE, noise_sigma=16.0)),
    Variant("15 fps", fps=15.0),
    Variant("10 fps", fps=10.0),
)


class VariantSource(CachedSource):
    """The synthetic scene of one variant, rendered once at the model resolution."""

    def __init__(self, variant: Variant, seed: int, resolution: tuple[int, int]) -> None:
        scene = SyntheticScene(*SYNTHETIC_SIZE, fps=variant.fps, seed=seed, style=variant.style)
        frames, self._truths = [], []
        for i in range(scene.period_frames):
            rgb, truth = scene.render(i)
            if variant.mirror:
                rgb = np.ascontiguousarray(rgb[:, ::-1])
                truth = mirrored(truth, SYNTHETIC_SIZE[0])
            if variant.jpeg_quality is not None:
                rgb = through_jpeg(rgb, variant.jpeg_quality)
            frames.append(to_model(rgb, resolution, code=None))
            self._truths.append(truth)
        super().__init__(variant.name, variant.name, np.stack(frames), variant.fps, SYNTHETIC_SIZE)

    has_truth = True

    def truth(self, index: int) -> BallTruth:
        return self._truths[index % len(self._truths)]


def through_jpeg(rgb: np.ndarray, quality: int) -> np.ndarray:
    """``rgb`` encoded as a JPEG at ``quality`` (1-100) and decoded, as a camera's would be."""
    _, data = cv2.imencode(".jpg", rgb[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    return np.ascontiguousarray(cv2.imdecode(data, cv2.IMREAD_COLOR)[..., ::-1])


def mirrored(truth: BallTruth, width: int) -> BallTruth:
    """``truth`` in the frame flipped left <-> right (pixel centres at integers)."""
    if not truth.visible:
        return truth
    theta = -truth.theta if truth.theta != 90.0 else 90.0
    return replace(truth, x=width - 1 - truth.x, theta=theta)


def variant_accuracy(
    variant: Variant, seed: int, resolution: tuple[int, int], checkpoint: str | None
) -> dict:
    backend = TorchBackend("cpu", "fp32", resolution, checkpoint=checkpoint)
    source = VariantSource(variant, seed, resolution)
    session = Session(0, source)
    windows = [session.next_window(0.0) for _ in range(source.n_frames + 2)][2:]
    stride = max(1, round(4 * variant.fps / 30.0))
    scores, false_at = [], []
    for window in windows[::stride]:
        (det,) = backend.run([window]).detections
        truth = source.truth(window.frame_index)
        scores.append(score(det, truth, None, True))
        if det is not None and not truth.visible:
            false_at.append((det.x, det.y))
    backend.close()
    items = records(scores)
    summary = accuracy_summary(items)
    visible = items["visible"]
    errors = items["error_px"][visible & items["detected"]]
    static = 0
    spot = None
    if false_at:
        at = np.array(false_at)
        centre = np.median(at, axis=0)
        static = int(np.sum(np.hypot(*(at - centre).T) <= HIT_RADIUS_PX))
        spot = [round(float(c), 1) for c in centre]
    return {
        "variant": variant.name,
        "resolution": f"{resolution[0]}x{resolution[1]}",
        "seed": seed,
        "weights": backend.weights,
        **summary,
        "misses": int(np.sum(visible & ~items["detected"])),
        "off": int(np.sum(visible & items["detected"] & ~items["hit"])),
        "p95_error_px": round(float(np.percentile(errors, 95)), 1) if len(errors) else None,
        "false_detections": len(false_at),
        "static": static,
        "false_spot": spot,
    }


def print_variants(seed: int, checkpoint: str | None) -> None:
    print(
        "variant            visible  hit   miss  off  p95 px  no-ball  false  static  spot",
        flush=True,
    )
    for variant in VARIANTS:
        r = variant_accuracy(variant, seed, (256, 144), checkpoint)
        p95 = "–" if r["p95_error_px"] is None else f"{r['p95_error_px']:.1f}"
        spot = "" if r["false_spot"] is None else f"({r['false_spot'][0]}, {r['false_spot'][1]})"
        print(
            f"{r['variant']:<18} {r['visible']:>7} {r['hit_rate']:>5.2f} {r['misses']:>5} "
            f"{r['off']:>4} {p95:>7} {r['no_ball']:>8} {r['false_detections']:>6} "
            f"{r['static']:>7}  {spot}",
            flush=True,
        )
        print(json.dumps(r), file=sys.stderr)


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
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--freshness", action="store_true")
    ap.add_argument("--variant-seed", type=int, default=777)
    ap.add_argument("--checkpoint", default=None, help="weights (default: the demo weights)")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--stride", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--precision", default=",".join(PRECISIONS), help="P[,P…] for --accuracy")
    ap.add_argument("--runtime", default=None, help="default: each precision's own")
    ap.add_argument(
        "--resolution",
        default=",".join(f"{w}x{h}" for w, h in RESOLUTIONS),
        help="WxH[,…] for --accuracy",
    )
    args = ap.parse_args()
    if not (args.accuracy or args.variants or args.freshness):
        args.accuracy = args.variants = args.freshness = True
    if args.accuracy:
        print(
            "resolution precision runtime      visible  hit %  median err px  no-ball  false"
            "  false %  ms/window"
        )
        for resolution in (parse_resolution(r) for r in args.resolution.split(",")):
            for precision in args.precision.split(","):
                r = accuracy(
                    resolution,
                    precision,
                    args.seeds,
                    args.stride,
                    args.checkpoint,
                    args.runtime,
                )
                err = "–" if r["median_error_px"] is None else f"{r['median_error_px']:.2f}"
                false = r["false_detection_rate"]
                print(
                    f"{r['resolution']:>10} {precision:>9} {r['runtime']:<12} {r['visible']:>8} "
                    f"{100 * r['hit_rate']:>6.1f} {err:>14} {r['no_ball']:>8} "
                    f"{r['false_detections']:>6} "
                    f"{'–' if false is None else f'{100 * false:.1f}':>8} "
                    f"{r['ms_per_window']:>10.1f}",
                    flush=True,
                )
                print(json.dumps(r), file=sys.stderr)
    if args.variants:
        print_variants(args.variant_seed, args.checkpoint)
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
