"""Transfer and pre/post-processing: ms per batch for each step of the hot path.

Steps, each timed alone (median of 20, device synced):
- stack:       np.stack of each window's 3 uint8 frames into a reused staging buffer
- h2d uint8:   that buffer → device (pinned, non_blocking): whole windows, what the worker
               ships when every frame is new (with no frames skipped its frame pool ships
               one frame per window, a third of this; see engine/assembly.py)
- h2d float32: the same batch as float32 — what shipping floats would cost (4× bytes)
- normalise:   uint8 → precision, ImageNet mean/std, on device
- post device: sigmoid + peak + 65×65 crops on device, one small copy back, blob moments
- post host:   copy the full newest-frame heatmaps to the host, then blobs() on each

Usage: python benchmarks/transfer_prep.py [--device cpu|cuda:0] [--resolution 512x288]
       [--batch 1,4,16]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np
import torch

from batchscope.cli.args import configure_threads
from batchscope.config import parse_resolution
from batchscope.device.checks import check_device
from batchscope.engine.backends.torch_backend import IMAGENET_MEAN, IMAGENET_STD
from batchscope.models.postprocess import best_detections, blobs


def timed(fn, sync, reps: int = 20) -> float:
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--resolution", default="512x288")
    ap.add_argument("--batch", default="1,4,16")
    ap.add_argument("--precision", default=None)
    args = ap.parse_args()
    configure_threads()
    dev = check_device(args.device)
    cuda = dev.type == "cuda"
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[
        args.precision or ("fp16" if cuda else "fp32")
    ]
    w, h = parse_resolution(args.resolution)
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in range(3)]
    scale = torch.tensor([1 / (255 * s) for s in IMAGENET_STD] * 3, device=dev, dtype=dtype)
    shift = torch.tensor(
        [-m / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True)] * 3,
        device=dev,
        dtype=dtype,
    )
    print(
        f"# transfer and pre/post-processing on {args.device}, {w}x{h}, {dtype}, "
        f"{time.strftime('%Y-%m-%d')}"
    )
    print("| batch | stack | h2d uint8 | h2d float32 | normalise | post device | post host |")
    print("|---|---|---|---|---|---|---|")
    for b in (int(v) for v in args.batch.split(",")):
        staging = torch.empty((b, 3, h, w, 3), dtype=torch.uint8, pin_memory=cuda)
        host = staging.numpy()
        as_float = torch.empty((b, 9, h, w), dtype=torch.float32, pin_memory=cuda)

        def stack(host=host, b=b) -> None:
            for i in range(b):
                np.stack(frames, out=host[i])

        on_dev = staging.to(dev)

        def normalise(on_dev=on_dev, b=b) -> torch.Tensor:
            x = on_dev.permute(0, 1, 4, 2, 3).reshape(b, 9, h, w).to(dtype)
            return x * scale.view(1, 9, 1, 1) + shift.view(1, 9, 1, 1)

        logits = torch.full((b, h, w), -8.0, device=dev)
        yy, xx = torch.meshgrid(
            torch.arange(h, device=dev), torch.arange(w, device=dev), indexing="ij"
        )
        blob = 12.0 - ((xx - w / 2) ** 2 + (yy - h / 3) ** 2) / 8.0
        logits = torch.maximum(logits, blob.expand(b, h, w))

        def post_host(logits=logits) -> None:
            probs = torch.sigmoid(logits).float().cpu().numpy()
            for p in probs:
                blobs(p)

        cells = [
            timed(stack, sync),
            timed(lambda s=staging: s.to(dev, non_blocking=True, copy=True), sync),
            timed(lambda f=as_float: f.to(dev, non_blocking=True, copy=True), sync),
            timed(normalise, sync),
            timed(lambda lg=logits: best_detections(lg), sync),
            timed(post_host, sync),
        ]
        print(f"| {b} | " + " | ".join(f"{c:.2f}" for c in cells) + " |", flush=True)
    print("(ms per batch; on CPU the h2d columns are a plain memory copy)")


if __name__ == "__main__":
    main()
