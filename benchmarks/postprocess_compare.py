"""The two post-processings on the same heatmaps: BatchScope's weighted one and the reference's.

For each model resolution, the demo weights (or ``--checkpoint``) run the newest-frame
heatmap of every 7th window of seeds 0-3 of the synthetic scene's default look (the
training script's held-out windows: 40 per seed), and each heatmap's best blob is measured
both ways (``models/postprocess.py``). Against the scene's ground truth of that frame:
the position error (source px), the blur angle's error (degrees, as lines: 0-90) and the
half length's error (source px), for every window with the ball in view and a blob, and
for the elongated ones (a drawn half streak of at least one heatmap px, where an angle
means something). ``0° rule``: blobs the reference put at exactly 0° while the weighted
angle is not 0 (the reference's rule for a mask with mu20 = mu02).

Usage: python benchmarks/postprocess_compare.py [--checkpoint FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np
import torch

from batchscope.config import POSTPROCESSING
from batchscope.engine.sources import SYNTHETIC_SIZE, to_model
from batchscope.models.blurball import BlurBall
from batchscope.models.normalise import normalisation
from batchscope.models.postprocess import blobs
from batchscope.models.weights import load_checkpoint, resolve_weights
from batchscope.scene.synthetic import SyntheticScene

RESOLUTIONS = ((128, 72), (256, 144), (512, 288))
SEEDS = (0, 1, 2, 3)
WINDOWS_PER_SEED = 40
STRIDE = 7


def line_error(a: float, b: float) -> float:
    """Degrees between two undirected lines, 0-90."""
    d = abs(a - b) % 180.0
    return min(d, 180.0 - d)


def heatmaps(model: torch.nn.Module, resolution: tuple[int, int]):
    """(newest-frame probabilities, its truth) of the held-out windows at ``resolution``."""
    scale, shift = normalisation(torch.float32)
    w, h = resolution
    for seed in SEEDS:
        scene = SyntheticScene(*SYNTHETIC_SIZE, seed=seed)
        for newest in range(2, 2 + WINDOWS_PER_SEED * STRIDE, STRIDE):
            rendered = [scene.render(i) for i in (newest - 2, newest - 1, newest)]
            frames = np.stack([to_model(rgb, resolution, code=None) for rgb, _ in rendered])
            x = torch.from_numpy(frames).permute(0, 3, 1, 2).reshape(1, 9, h, w).float()
            with torch.no_grad():
                prob = model(x * scale + shift)[0, 2].sigmoid().numpy()
            yield prob, rendered[-1][1]


def compare(model: torch.nn.Module, resolution: tuple[int, int]) -> dict:
    s = SYNTHETIC_SIZE[0] / resolution[0]
    rows: dict[str, list[tuple[float, float, float, bool]]] = {m: [] for m in POSTPROCESSING}
    zero_rule = 0
    for prob, truth in heatmaps(model, resolution):
        if not truth.visible:
            continue
        found = {m: blobs(prob, scale=(s, s), method=m) for m in POSTPROCESSING}
        if not found["weighted"]:
            continue
        elongated = truth.length / s >= 1.0
        for method, dets in found.items():
            d = dets[0]
            rows[method].append(
                (
                    math.hypot(d.x - truth.x, d.y - truth.y),
                    line_error(d.blur_angle, truth.theta),
                    abs(d.blur_length - truth.length),
                    elongated,
                )
            )
        if found["reference"][0].blur_angle == 0.0 and found["weighted"][0].blur_angle != 0.0:
            zero_rule += 1
    out: dict = {"resolution": f"{resolution[0]}x{resolution[1]}", "zero_rule": zero_rule}
    for method, r in rows.items():
        a = np.array(r)
        long = a[a[:, 3] == 1.0]
        out[method] = {
            "blobs": len(a),
            "median_position_px": round(float(np.median(a[:, 0])), 2),
            "median_angle_deg": round(float(np.median(a[:, 1])), 2),
            "p95_angle_deg": round(float(np.percentile(a[:, 1], 95)), 1),
            "elongated": len(long),
            "median_angle_elongated_deg": round(float(np.median(long[:, 1])), 2),
            "worst_angle_elongated_deg": round(float(long[:, 1].max()), 1),
            "median_length_px": round(float(np.median(a[:, 2])), 2),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None, help="weights (default: the demo weights)")
    ap.add_argument("--json", action="store_true", help="also each resolution's JSON")
    args = ap.parse_args()
    torch.set_num_threads(2)
    path, label = resolve_weights(args.checkpoint)
    if path is None:
        sys.exit(f"no weights to compare with: {label}")
    model = BlurBall().eval()
    load_checkpoint(model, path)
    print(f"weights: {label}")
    print(
        "resolution  method     blobs  pos px  angle° med  p95  | elongated  med°  worst°"
        "  | length px  | 0° rule"
    )
    for resolution in RESOLUTIONS:
        r = compare(model, resolution)
        for method in POSTPROCESSING:
            m = r[method]
            print(
                f"{r['resolution']:>10}  {method:<9} {m['blobs']:>6} "
                f"{m['median_position_px']:>7.2f} {m['median_angle_deg']:>11.2f} "
                f"{m['p95_angle_deg']:>5.1f}  | "
                f"{m['elongated']:>9} {m['median_angle_elongated_deg']:>5.2f} "
                f"{m['worst_angle_elongated_deg']:>7.1f}  | {m['median_length_px']:>9.2f}  | "
                + (str(r["zero_rule"]) if method == "reference" else ""),
                flush=True,
            )
        if args.json:
            print(json.dumps(r), file=sys.stderr)


if __name__ == "__main__":
    main()
