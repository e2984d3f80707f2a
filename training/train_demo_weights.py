"""Train BlurBall's demo weights on the synthetic table-tennis scene, on a CPU.

    python training/train_demo_weights.py --precision bf16 --out stage1.pt
                                                               # stage 1 (56 CPU-min)
    python training/train_demo_weights.py --init stage1.pt --no-ball-share 0.4
        --no-ball-jpeg-max 30 --steps 800 --lr 2e-4 --seed 2 --precision bf16
                                                               # stage 2 (23 CPU-min)
    python training/train_demo_weights.py --steps 20          # a quick check that it runs

The shipped weights are stage 2's (docs/DEMO_WEIGHTS.md; the two stages took 79 CPU-min,
44 min of both cores of a 2-core CPU with AVX-512 BF16): stage 2 fine-tunes stage 1's with
windows drawn with no ball in view on purpose, most through heavy JPEG.

What it trains on: windows of three consecutive frames (oldest -> newest) of the procedural
scene (``batchscope.scene.synthetic``) with random rallies (seeds), frame rates from 10 to
60 fps (ball speed per frame and so blur length), camera placements, table and ball colours
(the classic ones and any colour, greys included) and sensor noise. Each window is rendered
at 640x360 like the app's synthetic source, then, the same way on its three frames, maybe
mirrored left <-> right, its brightness and contrast changed and each frame put through JPEG
(as a camera or a video file would), resized (INTER_AREA) to one of the app's model
resolutions (128x72, 256x144 or 512x288) and cropped to a 128x72 patch (the network is
fully convolutional), most often around the ball. The augmentations are those the first
demo weights failed without (issue 29: a dark ball, a light or red table, the scene
mirrored, heavy compression and noise, low frame rates; docs/DEMO_WEIGHTS.md). The targets are the
scene's ground truth in the BlurBall label convention (centre, visibility, half streak
length ``l`` and angle ``theta``), drawn as a filled ellipse along the streak on each frame's
heatmap; a frame without a visible ball has an empty target. The loss is a binary
cross-entropy on the three output heatmaps, positives weighted up (they are a few pixels in
thousands).

Everything random comes from ``--seed``: the same command gives the same samples in the same
order (torch's CPU kernels may still differ in the last bits between machines). The held-out
check at the end scores the newest frame's detection on seeds 0-3 of the default look (the
app's demo is seed 0), which training never sees, as the app scores it: the hit rate over
the windows with the ball in view, the false-detection rate over those without. Output: an
fp16 checkpoint in the reference trainer's layout (``model_state_dict`` plus metadata) and a
log beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch
from torch import nn

from batchscope.engine.accuracy import Score, score
from batchscope.engine.stats import accuracy_summary, item_records
from batchscope.models.blurball import BlurBall
from batchscope.models.normalise import normalisation
from batchscope.models.postprocess import best_detections
from batchscope.models.weights import CheckpointError, load_checkpoint
from batchscope.scene.synthetic import DEFAULT_STYLE, BallTruth, SceneStyle, SyntheticScene

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "assets" / "weights" / "blurball_synthetic_demo.pt"
RENDER_SIZE = (640, 360)  # what the app's synthetic source renders at
RESOLUTIONS = ((128, 72), (256, 144), (512, 288))
CROP = (128, 72)
TARGET_HALF_WIDTH_PX = 1.5  # the target ellipse's half width (heatmap px), at least
POSITIVE_WEIGHT = 8.0
BALL_CROP_SHARE = 0.8  # crops placed so the newest frame's ball is inside (when visible)
FRAME_RATES = (10.0, 15.0, 20.0, 25.0, 30.0, 50.0, 60.0)
MIRROR_SHARE = 0.5
BRIGHTNESS_SHARE = 0.5  # windows whose gain and offset change
GAIN = (0.6, 1.4)
OFFSET = (-25.0, 25.0)  # grey levels
JPEG_SHARE = 0.3  # windows whose frames go through JPEG
JPEG_QUALITY = (12, 90)
VALIDATION_SEEDS = (0, 1, 2, 3)
# --no-ball-share: windows drawn with the ball out of view on purpose (besides the pauses
# uniform draws give, about a tenth), this share of them through JPEG: the weights shown a
# tenth fired on JPEG blocks and sensor grain with no ball in view (issue 29)
NO_BALL_JPEG_SHARE = 0.6


@dataclass(frozen=True)
class Window:
    frames: np.ndarray  # (3, H, W, 3) uint8 RGB, oldest first
    targets: np.ndarray  # (3, H, W) float32 in {0, 1}


def random_style(rng: np.random.Generator) -> SceneStyle:
    """A look: half the tables and balls are the classic colours, the rest any colour."""
    tables = ((22, 74, 150), (30, 100, 60), (20, 40, 90), (40, 70, 120), (70, 35, 30))
    table = tables[rng.integers(len(tables))] if rng.random() < 0.5 else random_rgb(rng)
    kind = rng.random()
    if kind < 0.35:
        ball = (250, 250, 244)
    elif kind < 0.5:
        ball = (255, 150, 40)
    elif kind < 0.75:
        grey = int(rng.integers(40, 256))
        ball = (grey, grey, grey)
    else:
        ball = random_rgb(rng)
    sigma = rng.uniform(0.5, 4.5) if rng.random() < 0.7 else rng.uniform(4.5, 18.0)
    return SceneStyle(
        table_rgb=table,
        ball_rgb=ball,
        camera_distance_m=float(rng.uniform(3.8, 5.8)),
        camera_offset_m=float(rng.uniform(-1.6, 1.6)),
        camera_height_m=float(rng.uniform(1.7, 2.9)),
        horizontal_fov_deg=float(rng.uniform(50.0, 72.0)),
        noise_sigma=float(sigma),
    )


def random_rgb(rng: np.random.Generator) -> tuple[int, int, int]:
    r, g, b = (int(c) for c in rng.integers(0, 256, 3))
    return r, g, b


def to_resolution(truth: BallTruth, size: tuple[int, int]) -> tuple[float, float, float]:
    """Centre and half length of ``truth`` (render px) at ``size``, pixel-centre convention."""
    sx, sy = size[0] / RENDER_SIZE[0], size[1] / RENDER_SIZE[1]
    return (truth.x + 0.5) * sx - 0.5, (truth.y + 0.5) * sy - 0.5, truth.length * sx


def draw_target(size: tuple[int, int], truth: BallTruth) -> np.ndarray:
    """The heatmap target at ``size``: an ellipse along the streak, 1 inside, 0 outside."""
    width, height = size
    target = np.zeros((height, width), np.float32)
    if not truth.visible:
        return target
    x, y, length = to_resolution(truth, size)
    along = max(length, TARGET_HALF_WIDTH_PX)
    across = TARGET_HALF_WIDTH_PX
    theta = math.radians(truth.theta)
    cos, sin = math.cos(theta), math.sin(theta)
    reach = along + 1
    x0, x1 = max(int(x - reach), 0), min(int(x + reach) + 2, width)
    y0, y1 = max(int(y - reach), 0), min(int(y + reach) + 2, height)
    if x0 >= x1 or y0 >= y1:
        return target
    us, vs = np.meshgrid(np.arange(x0, x1) - x, np.arange(y0, y1) - y)
    a = (us * cos + vs * sin) / along
    b = (-us * sin + vs * cos) / across
    target[y0:y1, x0:x1] = (a * a + b * b <= 1.0).astype(np.float32)
    cx, cy = round(x), round(y)
    if 0 <= cx < width and 0 <= cy < height:
        target[cy, cx] = 1.0  # a streak thinner than a pixel still marks its centre
    return target


class Scenes:
    """The training scenes, built lazily; each is a looping clip with its truth."""

    def __init__(self, count: int, seed: int) -> None:
        rng = np.random.default_rng([seed, 0])
        self._specs = [
            (
                10_000 + int(rng.integers(1 << 30)),
                float(rng.choice(FRAME_RATES)),
                random_style(rng),
            )
            for _ in range(count)
        ]
        self._built: dict[int, SyntheticScene] = {}

    def __len__(self) -> int:
        return len(self._specs)

    def get(self, i: int) -> SyntheticScene:
        if i not in self._built:
            scene_seed, fps, style = self._specs[i]
            self._built[i] = SyntheticScene(*RENDER_SIZE, fps=fps, seed=scene_seed, style=style)
        return self._built[i]


@dataclass(frozen=True)
class Look:
    """What one window's frames go through after rendering, the same on all three."""

    mirror: bool = False
    gain: float = 1.0
    offset: float = 0.0  # grey levels
    jpeg_quality: int | None = None


def random_look(rng: np.random.Generator) -> Look:
    bright = rng.random() < BRIGHTNESS_SHARE
    jpeg = rng.random() < JPEG_SHARE
    return Look(
        mirror=bool(rng.random() < MIRROR_SHARE),
        gain=float(rng.uniform(*GAIN)) if bright else 1.0,
        offset=float(rng.uniform(*OFFSET)) if bright else 0.0,
        jpeg_quality=int(rng.integers(JPEG_QUALITY[0], JPEG_QUALITY[1] + 1)) if jpeg else None,
    )


def through_look(rgb: np.ndarray, look: Look) -> np.ndarray:
    """One rendered frame as ``look`` makes it (mirroring is done on the window)."""
    if look.gain != 1.0 or look.offset != 0.0:
        rgb = cv2.convertScaleAbs(rgb, alpha=look.gain, beta=look.offset)
    if look.jpeg_quality is not None:
        bgr = np.ascontiguousarray(rgb[..., ::-1])
        _, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, look.jpeg_quality])
        rgb = cv2.imdecode(data, cv2.IMREAD_COLOR)[..., ::-1]
    return rgb


def render_window(
    scene: SyntheticScene, newest: int, size: tuple[int, int], look: Look = Look()
) -> tuple[np.ndarray, list[BallTruth]]:
    frames, truths = [], []
    for index in (newest - 2, newest - 1, newest):
        rgb, truth = scene.render(index)
        rgb = through_look(rgb, look)
        frames.append(cv2.resize(rgb, size, interpolation=cv2.INTER_AREA))
        truths.append(truth)
    return np.stack(frames), truths


def no_ball_frame(scene: SyntheticScene, start: int) -> int:
    """The first frame from ``start`` on (looping) with no ball in view, or ``start``."""
    for offset in range(scene.period_frames):
        index = 2 + (start - 2 + offset) % (scene.period_frames - 2)
        if not scene.render(index)[1].visible:
            return index
    return start


def sample(
    scenes: Scenes,
    rng: np.random.Generator,
    no_ball_share: float = 0.0,
    no_ball_jpeg_max: int = JPEG_QUALITY[1],
) -> Window:
    scene = scenes.get(int(rng.integers(len(scenes))))
    size = RESOLUTIONS[int(rng.integers(len(RESOLUTIONS)))]
    look = random_look(rng)
    # uniform over the clip, so the pauses between points (about a tenth of the windows,
    # as in the held-out check) teach what is not a ball: the first demo weights, shown a
    # sixth of that, fired on static scene features of an unseen look (issue 29)
    newest = int(rng.integers(2, scene.period_frames))
    if no_ball_share and rng.random() < no_ball_share:  # no draw at 0: the first stage's
        newest = no_ball_frame(scene, newest)
        if rng.random() < NO_BALL_JPEG_SHARE and look.jpeg_quality is None:
            quality = int(rng.integers(JPEG_QUALITY[0], no_ball_jpeg_max + 1))
            look = Look(look.mirror, look.gain, look.offset, quality)
    frames, truths = render_window(scene, newest, size, look)
    targets = np.stack([draw_target(size, t) for t in truths])
    if look.mirror:  # pixel centres at integers: x -> width - 1 - x, the target's too
        frames, targets = frames[:, :, ::-1], targets[:, :, ::-1]
    cw, ch = CROP
    width, height = size
    if truths[-1].visible and rng.random() < BALL_CROP_SHARE:
        bx, by, _ = to_resolution(truths[-1], size)
        if look.mirror:
            bx = width - 1 - bx
        left = int(np.clip(bx - rng.uniform(8, cw - 8), 0, width - cw))
        top = int(np.clip(by - rng.uniform(6, ch - 6), 0, height - ch))
    else:
        left = int(rng.integers(0, width - cw + 1))
        top = int(rng.integers(0, height - ch + 1))
    crop = np.s_[:, top : top + ch, left : left + cw]
    return Window(np.ascontiguousarray(frames[crop]), np.ascontiguousarray(targets[crop]))


def to_input(frames: np.ndarray, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W, 3) uint8 windows -> (B, 9, H, W) normalised, channel = frame * 3 + colour."""
    batch = torch.from_numpy(frames)
    b, n, h, w, c = batch.shape
    batch = batch.permute(0, 1, 4, 2, 3).reshape(b, n * c, h, w).float()
    return batch * scale + shift


def validate(model: nn.Module, scale, shift, frames_per_seed: int = 40) -> dict[str, dict]:
    """The newest frame's detection on held-out seeds, per size, scored as the app scores a
    live result (stats.accuracy_summary): hit rate and median error over the windows with
    the ball in view, false-detection rate over those without."""
    model.eval()
    results = {}
    with torch.no_grad():
        for size in RESOLUTIONS:
            scores = []
            for seed in VALIDATION_SEEDS:
                scene = SyntheticScene(*RENDER_SIZE, fps=30.0, seed=seed, style=DEFAULT_STYLE)
                for newest in range(2, 2 + frames_per_seed * 7, 7):
                    frames, truths = render_window(scene, newest, size)
                    logits = model(to_input(frames[None], scale, shift))
                    sx, sy = RENDER_SIZE[0] / size[0], RENDER_SIZE[1] / size[1]
                    detection = best_detections(logits[:, -1], scale=(sx, sy))[0]
                    scores.append(score(detection, truths[-1], None, positions=True))
            items = item_records(len(scores))
            for field in Score._fields:
                items[field] = [getattr(s, field) for s in scores]
            summary = accuracy_summary(items)
            del summary["median_freshness_px"]  # no delivery: no freshness
            results[f"{size[0]}x{size[1]}"] = summary
    model.train()
    return results


def progress(step: int, steps: int, loss: float, started: float) -> None:
    done = step / steps
    elapsed = time.monotonic() - started
    eta = elapsed / done - elapsed if done else 0.0
    bar = "#" * int(30 * done)
    sys.stderr.write(
        f"\r[{bar:<30}] {step}/{steps} loss {loss:.4f} "
        f"{elapsed / 60:4.1f} min, ~{eta / 60:4.1f} min left"
    )
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=2000, help="optimiser steps (default 2000)")
    p.add_argument("--batch", type=int, default=12, help="windows per step (default 12)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 2e-3)")
    p.add_argument("--scenes", type=int, default=96, help="training scenes (default 96)")
    p.add_argument("--seed", type=int, default=0, help="seed of everything random (default 0)")
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="the forward and backward passes' precision (default fp32; bf16, as the shipped "
        "weights were trained: torch's CPU autocast, measured 2.3x faster a step on "
        "a CPU with AVX-512 BF16, slower without one; the weights and optimiser stay fp32)",
    )
    p.add_argument(
        "--no-ball-share",
        type=float,
        default=0.0,
        help="share of windows drawn with no ball in view on purpose, "
        f"{round(100 * NO_BALL_JPEG_SHARE)}%% of them through JPEG (default 0; stage 2: 0.4)",
    )
    p.add_argument(
        "--no-ball-jpeg-max",
        type=int,
        default=JPEG_QUALITY[1],
        help=f"those windows' JPEG quality is drawn from {JPEG_QUALITY[0]} to this "
        f"(default {JPEG_QUALITY[1]}, as for every window)",
    )
    p.add_argument(
        "--init",
        type=Path,
        help="start from these weights (a checkpoint this script wrote) instead of the "
        "initial ones: the second stage fine-tunes the first's",
    )
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument(
        "--check-frames",
        type=int,
        default=40,
        help="held-out frames per seed and resolution in the final check (default 40)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"checkpoint (default {DEFAULT_OUT.relative_to(ROOT)})",
    )
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng([args.seed, 1])
    scenes = Scenes(args.scenes, args.seed)
    if not 0.0 <= args.no_ball_share <= 1.0:
        p.error(f"--no-ball-share {args.no_ball_share}: give a share from 0 to 1")
    if not JPEG_QUALITY[0] <= args.no_ball_jpeg_max <= JPEG_QUALITY[1]:
        p.error(
            f"--no-ball-jpeg-max {args.no_ball_jpeg_max}: give a quality from "
            f"{JPEG_QUALITY[0]} to {JPEG_QUALITY[1]}"
        )
    model = BlurBall()
    if args.init is not None:
        try:  # the app's loader: fp16 tensors copy into the fp32 model
            load_checkpoint(model, args.init)
        except CheckpointError as exc:
            p.error(f"--init: {exc}")
    model.train()
    scale, shift = normalisation(torch.float32)
    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    warmup = max(args.steps // 20, 1)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return (
            args.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(args.steps - warmup, 1)))
        )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    log_path = args.out.with_suffix(".log")
    log = log_path.open("w")
    log.write(f"# {' '.join(sys.argv)}\n")
    parameters = sum(p.numel() for p in model.parameters())
    log.write(f"# {parameters} parameters, torch {torch.__version__}\n")
    started = time.monotonic()
    cpu_started = time.process_time()  # the script's own cost, whatever else runs
    recent: list[float] = []
    for step in range(args.steps):
        windows = [
            sample(scenes, rng, args.no_ball_share, args.no_ball_jpeg_max)
            for _ in range(args.batch)
        ]
        frames = np.stack([w.frames for w in windows])
        targets = torch.from_numpy(np.stack([w.targets for w in windows]))
        for group in optimiser.param_groups:
            group["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(to_input(frames, scale, shift)).float()
        weights = 1.0 + (POSITIVE_WEIGHT - 1.0) * targets
        loss = nn.functional.binary_cross_entropy_with_logits(logits, targets, weight=weights)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        recent = [*recent, loss.item()][-50:]
        if step % 10 == 0 or step == args.steps - 1:
            progress(step + 1, args.steps, float(np.mean(recent)), started)
            log.write(
                f"step {step + 1} loss {np.mean(recent):.5f} lr {lr_at(step):.2e} "
                f"elapsed_s {time.monotonic() - started:.0f} "
                f"cpu_s {time.process_time() - cpu_started:.0f}\n"
            )
            log.flush()
    train_s = time.monotonic() - started
    train_cpu_s = time.process_time() - cpu_started
    sys.stderr.write("\n")
    final_loss = float(np.mean(recent))
    scores = validate(model, scale, shift, args.check_frames)
    meta = {
        "name": "BlurBall demo weights for the synthetic scene (not the authors' weights)",
        "command": " ".join(["python", *sys.argv]),
        "steps": args.steps,
        "batch": args.batch,
        "samples": args.steps * args.batch,
        "seed": args.seed,
        "init": None if args.init is None else args.init.name,
        "no_ball_share": args.no_ball_share,
        "no_ball_jpeg_max": args.no_ball_jpeg_max,
        "train_minutes": round(train_s / 60, 1),
        "train_cpu_minutes": round(train_cpu_s / 60, 1),  # over all threads
        "final_loss": round(final_loss, 5),
        "validation": json.dumps(scores),
    }
    state = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    torch.save({"model_state_dict": state, **meta}, args.out)
    log.write(json.dumps({k: v for k, v in meta.items() if k != "validation"}) + "\n")
    log.write(f"validation {json.dumps(scores)}\n")
    log.close()
    print(json.dumps({**meta, "validation": scores}, indent=2))
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB) and {log_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
