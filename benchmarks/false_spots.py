"""Why the demo weights fire on a fixed spot of a scene variant with no ball in view.

``benchmarks/accuracy.py --variants`` found the first demo weights detecting a ball in every
no-ball window of two variants, each time at one static spot: the red table (the near net
post's top, where the white tape of the net ends) and the mirrored scene (where the green
player's arm ends at his red racket). This script takes one no-ball window of seed 777 at
256x144 (the app's pipeline: INTER_AREA to the model size, the newest frame's heatmap,
models/postprocess.py) and asks what the spot's probability depends on:

- the table colour, from the training set's five (blue ... dark red-brown) to bright ones
  it never had (red, green, yellow): is it the colour?
- in the mirrored scene, the same window unmirrored (the spot's feature at its mirror
  image), and the racket or the arm end painted over with the wall behind them: which
  part of the feature fires?

``p@spot``: the highest probability within 3 heatmap px of the spot; a detection is a blob
above 0.7. A spot at the frame's edge would point at padding; these are not.

Usage: python benchmarks/false_spots.py [--checkpoint FILE]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np
import torch

from batchscope.engine.sources import SYNTHETIC_SIZE, to_model
from batchscope.models.blurball import BlurBall
from batchscope.models.normalise import normalisation
from batchscope.models.postprocess import best_detections
from batchscope.models.weights import load_checkpoint, resolve_weights
from batchscope.scene.synthetic import DEFAULT_STYLE, SceneStyle, SyntheticScene

RESOLUTION = (256, 144)
SCALE = SYNTHETIC_SIZE[0] / RESOLUTION[0]
SEED = 777
RED_SPOT = (291.8, 205.8)  # source px, where the first demo weights fired (red table)
MIRROR_SPOT = (124.3, 163.4)  # the same, mirrored scene
TABLES = {
    "blue (default)": (22, 74, 150),
    "dark red-brown (trained)": (70, 35, 30),
    "red-brown": (110, 40, 40),
    "red (variant)": (150, 30, 30),
    "bright red": (190, 40, 40),
    "green": (30, 150, 30),
    "navy": (30, 30, 150),
    "yellow": (150, 150, 30),
}


class Probe:
    def __init__(self, checkpoint: str | None) -> None:
        path, self.label = resolve_weights(checkpoint)
        if path is None:
            sys.exit(f"no weights to probe: {self.label}")
        self.model = BlurBall().eval()
        load_checkpoint(self.model, path)
        self.scale, self.shift = normalisation(torch.float32)

    def look(self, frames: list[np.ndarray], spot: tuple[float, float]) -> str:
        w, h = RESOLUTION
        x = np.stack([to_model(f, RESOLUTION, code=None) for f in frames])
        batch = torch.from_numpy(x).permute(0, 3, 1, 2).reshape(1, 9, h, w).float()
        with torch.no_grad():
            logits = self.model(batch * self.scale + self.shift)[:, 2]
        (det,) = best_detections(logits, scale=(SCALE, SCALE))
        prob = logits.sigmoid()[0].numpy()
        hx, hy = ((c + 0.5) / SCALE - 0.5 for c in spot)
        near = prob[max(int(hy) - 3, 0) : int(hy) + 4, max(int(hx) - 3, 0) : int(hx) + 4]
        found = "none" if det is None else f"at ({det.x:.0f}, {det.y:.0f}), score {det.score:.2f}"
        return f"p@spot {near.max():.3f}  max {prob.max():.3f}  detection {found}"


def no_ball_window(style: SceneStyle, mirror: bool = False) -> list[np.ndarray]:
    """The first window of seed 777 whose three frames have no ball in view."""
    scene = SyntheticScene(*SYNTHETIC_SIZE, seed=SEED, style=style)
    newest = next(
        i
        for i in range(2, scene.period_frames)
        if not any(scene.render(j)[1].visible for j in (i - 2, i - 1, i))
    )
    frames = [scene.render(j)[0] for j in (newest - 2, newest - 1, newest)]
    return [np.ascontiguousarray(f[:, ::-1]) for f in frames] if mirror else frames


def painted(frames: list[np.ndarray], box: tuple[int, int, int, int]) -> list[np.ndarray]:
    """``frames`` with ``box`` (x0, y0, x1, y1) filled with the colour just above it."""
    x0, y0, x1, y1 = box
    out = []
    for f in frames:
        f = f.copy()
        f[y0:y1, x0:x1] = f[y0 - 4, x0]
        out.append(f)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None, help="weights (default: the demo weights)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    probe = Probe(args.checkpoint)
    print(f"weights: {probe.label}; seed {SEED}, {RESOLUTION[0]}x{RESOLUTION[1]}, no ball")
    print(f"red-table spot {RED_SPOT}, by table colour:")
    for name, rgb in TABLES.items():
        window = no_ball_window(replace(DEFAULT_STYLE, table_rgb=rgb))
        print(f"  {name:<26} {rgb!s:<15} {probe.look(window, RED_SPOT)}")
    print(f"mirrored-scene spot {MIRROR_SPOT}:")
    mirrored = no_ball_window(DEFAULT_STYLE, mirror=True)
    unmirrored = no_ball_window(DEFAULT_STYLE)
    x, y = int(MIRROR_SPOT[0]), int(MIRROR_SPOT[1])
    mirror_image = (SYNTHETIC_SIZE[0] - 1 - MIRROR_SPOT[0], MIRROR_SPOT[1])
    cases = {
        "mirrored": (mirrored, MIRROR_SPOT),
        "unmirrored, the feature's mirror image": (unmirrored, mirror_image),
        "mirrored, racket painted out": (painted(mirrored, (x + 2, y - 9, x + 18, y + 9)), None),
        "mirrored, arm end painted out": (painted(mirrored, (x - 12, y - 10, x + 2, y + 6)), None),
    }
    for name, (window, spot) in cases.items():
        print(f"  {name:<40} {probe.look(window, spot or MIRROR_SPOT)}")


if __name__ == "__main__":
    main()
