"""Pipeline efficiency: live worker throughput ÷ bare model throughput, per batch size.

Both are measured side by side in one run, same model, precision, resolution
and batch size:

- bare: a loop calling BlurBall on a pre-made input tensor already on the
  device (the best the device can do at that batch size);
- pipeline: the full live path — sessions paced by the feeder, latest-only
  mailboxes, policy ``all`` capped at the batch size, staging, transfer,
  normalisation, model, post-processing, metrics — with enough sessions that
  every batch is full.

Usage: python benchmarks/pipeline_efficiency.py [--device cpu|cuda:0] [--precision fp32]
       [--resolution 128x72] [--batch 1,2,4,8] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import torch

from batchscope.cli import configure_threads
from batchscope.config import RunConfig, parse_resolution
from batchscope.engine.backends import check_device, check_precision
from batchscope.engine.engine import Engine
from batchscope.models.blurball import BlurBall


def bare_wps(
    device: str, precision: str, res: tuple[int, int], batch: int, seconds: float
) -> float:
    dev = check_device(device)
    dtype = check_precision(precision, dev)
    model = BlurBall().eval().to(dev, dtype)
    x = torch.randn(batch, 9, res[1], res[0], device=dev).to(dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        sync()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            model(x)
            n += 1
        sync()
        return n * batch / (time.perf_counter() - t0)


def pipeline(
    device: str, precision: str, res: tuple[int, int], batch: int, seconds: float
) -> tuple[float, dict[str, int]]:
    cfg = RunConfig(
        sources=("synthetic",),
        sessions=max(2, 2 * batch),
        fps=120.0,
        policy="all",
        max_batch=batch,
        backend="torch",
        device=device,
        profile=None,
        precision=precision,
        resolution=res,
    )
    engine = Engine(cfg)
    engine.open()
    engine.start()
    try:
        time.sleep(min(2.0, seconds / 3))
        engine.reset_stats(announce=False)
        time.sleep(seconds)
        report = engine.report()
    finally:
        engine.stop()
    return report["overall"]["throughput_wps"], report["overall"]["batch_sizes"]


def measure(kind: str, args: argparse.Namespace, batch: int) -> tuple[float, dict[str, int]]:
    """One measurement in a fresh process.

    Each side runs alone in its own process: with torch on the CPU, a thread that
    runs the model after another thread did is up to 1.7× slower (one OpenMP team
    per calling thread), which would bias whichever side runs second.
    """
    cmd = [
        sys.executable,
        __file__,
        "--one",
        kind,
        "--device",
        args.device,
        "--precision",
        args.precision,
        "--resolution",
        args.resolution,
        "--batch",
        str(batch),
        "--seconds",
        str(args.seconds),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    wps, sizes = json.loads(out.strip().splitlines()[-1])
    return wps, sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--resolution", default=None)
    ap.add_argument("--batch", default="1,2,4,8")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--one", choices=("bare", "pipeline"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    args.precision = args.precision or ("fp16" if cuda else "fp32")
    args.resolution = args.resolution or ("512x288" if cuda else "128x72")
    res = parse_resolution(args.resolution)
    configure_threads()
    if args.one:  # a child process: measure one side, print it as JSON
        b = int(args.batch)
        if args.one == "bare":
            result = (bare_wps(args.device, args.precision, res, b, args.seconds / 2), {})
        else:
            result = pipeline(args.device, args.precision, res, b, args.seconds)
        print(json.dumps(result))
        return
    name = torch.cuda.get_device_name(0) if cuda else "CPU"
    print(
        f"# pipeline efficiency on {args.device} ({name}), {args.precision}, "
        f"{res[0]}x{res[1]}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}"
    )
    print("| batch | bare windows/s (before / after) | pipeline windows/s | ratio | batch sizes |")
    print("|---|---|---|---|---|")
    for b in (int(v) for v in args.batch.split(",")):
        # bare before and after the pipeline, so drift on a shared machine shows up
        before, _ = measure("bare", args, b)
        live, sizes = measure("pipeline", args, b)
        after, _ = measure("bare", args, b)
        bare = (before + after) / 2
        print(
            f"| {b} | {before:.1f} / {after:.1f} | {live:.1f} | {live / bare:.3f} | {sizes} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
