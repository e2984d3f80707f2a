"""The model's arithmetic: MACs and memory traffic per window, and what measured times imply.

For each resolution it runs BlurBall once (batch 1, on the CPU) under two
counters (``benchmarks/arithmetic.py``) and prints:

- GMAC per window: multiply-accumulates of every convolution and linear layer;
- MB moved per window: bytes read and written by every tensor operation as
  eager PyTorch runs them, at the precision's element size — what the device
  must move if no two ops are fused and nothing stays in cache;
- intensity: FLOPs per byte moved.

Then, for each batch-curve point of the profiles given (a built-in profile
name or a ``sweep`` output file), the TFLOPS and GB/s the measured time
implies, and, with ``--peak-tflops`` / ``--peak-gbs``, the fraction of the
device's peak.

Usage: python benchmarks/model_cost.py [--resolution 256x144,512x288,1024x576]
       [--profile laptop-8gb,server-24gb] [--peak-tflops fp16=T,fp32=T] [--peak-gbs B]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from arithmetic import ELEMENT_BYTES, elements_moved, macs
from batchscope.config import parse_resolution
from batchscope.profiles.profile import ProfileError, load_profile


def cost(res: tuple[int, int]) -> tuple[float, float]:
    """(MACs, elements moved) for one window at ``res``."""
    return macs(res), elements_moved(res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resolution", default="256x144,512x288,1024x576")
    ap.add_argument("--profile", default="laptop-8gb,server-24gb")
    ap.add_argument(
        "--peak-tflops",
        default="",
        metavar="P=T,...",
        help="the device's peak TFLOPS per precision, e.g. fp16=989,bf16=989,fp32=67",
    )
    ap.add_argument("--peak-gbs", type=float, help="the device's memory bandwidth, GB/s")
    args = ap.parse_args()
    peak_tflops = {
        k: float(v) for k, v in (item.split("=") for item in args.peak_tflops.split(",") if item)
    }
    costs = {}
    print("| resolution | GMAC / window | MB moved / window fp16 (fp32) | FLOP per byte fp16 |")
    print("|---|---|---|---|")
    for text in args.resolution.split(","):
        res = parse_resolution(text)
        macs, elements = cost(res)
        costs[res] = (macs, elements)
        print(
            f"| {res[0]}x{res[1]} | {macs / 1e9:.2f} | {elements * 2 / 1e6:.0f} "
            f"({elements * 4 / 1e6:.0f}) | {2 * macs / (elements * 2):.1f} |",
            flush=True,
        )
    if not args.profile:
        return
    peaks = ""
    if peak_tflops or args.peak_gbs:
        peaks = " | % of peak TFLOPS | % of peak GB/s"
    print()
    print(f"| profile | precision | resolution | batch | ms | TFLOPS | GB/s{peaks} |")
    print("|---|---|---|---|---|---|---|" + ("---|---|" if peaks else ""))
    skipped = []
    for name in args.profile.split(","):
        try:
            profile = load_profile(name)
        except ProfileError as exc:  # e.g. a sweep cut short by its time limit
            skipped.append(str(exc))
            continue
        for curve in profile.curves:
            res = tuple(curve.resolution)
            if res not in costs:
                costs[res] = cost(res)
            macs, elements = costs[res]
            for p in curve.measured:
                s = p.ms / 1000.0
                tflops = 2 * macs * p.batch / s / 1e12
                gbs = elements * ELEMENT_BYTES[curve.precision] * p.batch / s / 1e9
                row = (
                    f"| {profile.name} | {curve.precision} | {res[0]}x{res[1]} | {p.batch} "
                    f"| {p.ms:.2f} | {tflops:.2f} | {gbs:.0f}"
                )
                if peaks:
                    peak = peak_tflops.get(curve.precision)
                    pt = f"{100 * tflops / peak:.1f}" if peak else "-"
                    pb = f"{100 * gbs / args.peak_gbs:.1f}" if args.peak_gbs else "-"
                    row += f" | {pt} | {pb}"
                print(row + " |", flush=True)
    for why in skipped:
        print(f"skipped: {why}")


if __name__ == "__main__":
    main()
