"""Pipeline efficiency: live worker throughput ÷ bare model throughput, per batch size.

Both are measured side by side in one run, same model, precision, resolution
and batch size:

- bare: a loop calling BlurBall on a pre-made input tensor already on the
  device (the best the device can do at that batch size); on the emulated
  device, a loop of the profile's batch waits alone;
- pipeline: the full live path — sessions paced by the feeder, latest-only
  mailboxes, policy ``all`` capped at the batch size, staging, transfer,
  normalisation, model, post-processing, metrics — with enough sessions that
  every batch is full.

Each measurement runs in a fresh process, alternating bare, pipeline, bare, …
(``--rounds`` pipelines between ``--rounds``+1 bares); each round's ratio is its
pipeline ÷ the mean of the bares either side of it, so drift on a shared
machine cancels. Printed: the medians and the median ratio with its range.

By default the pipeline runs 2×batch sessions at 120 fps: every batch is full
and every session skips frames between its windows, so each window ships all
three frames (the worst case for assembly). ``--steady`` runs batch-many
sessions just above what the device can serve (1.1× the larger of the bare
batch-1 and batch-b rates, shared): batches still full, but a session gains
about one new frame per window, as in a well-provisioned deployment, so the
frame pool ships about one frame per window.

``--backend emulated`` measures the worker's own overhead against a device
that does not use the CPU (as a GPU does not): the host work (scheduling,
copying frames, metrics) is real, the model time is the profile's.

Usage: python benchmarks/pipeline_efficiency.py [--backend torch|emulated]
       [--device cpu|cuda:0] [--profile laptop-8gb] [--precision fp32]
       [--resolution 128x72] [--batch 1,2,4,8] [--seconds 8] [--rounds 3] [--steady]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import torch

from batchscope.cli.args import configure_threads
from batchscope.config import RunConfig, parse_resolution
from batchscope.device.checks import BackendError, check_device, check_precision
from batchscope.engine.backends import EmulatedBackend
from batchscope.engine.engine import Engine
from batchscope.models.blurball import BlurBall
from batchscope.profiles.profile import load_profile


def bare_emulated_wps(
    profile: str, precision: str, res: tuple[int, int], batch: int, seconds: float
) -> float:
    backend = EmulatedBackend(load_profile(profile), precision, res)
    for _ in range(10):  # let it learn its wake-up lead, as the live worker's has
        backend.compute(batch, time.perf_counter())
    n, t0 = 0, time.perf_counter()
    end = t0
    while end - t0 < seconds:
        end = backend.compute(batch, end)
        n += 1
    return n * batch / (end - t0)


def bare_wps(
    device: str, precision: str, res: tuple[int, int], batch: int, seconds: float
) -> float:
    dev = check_device(device)
    dtype = check_precision(precision, dev)
    model = BlurBall().eval().to(dev, dtype)
    x = torch.randn(batch, 9, res[1], res[0], device=dev).to(dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        warm_until = time.perf_counter() + min(2.0, seconds * 2 / 3)  # as long as the pipeline's
        while time.perf_counter() < warm_until:
            model(x)
        sync()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            model(x)
            n += 1
        sync()
        return n * batch / (time.perf_counter() - t0)


def pipeline(
    args: argparse.Namespace, res: tuple[int, int], batch: int, seconds: float
) -> tuple[float, dict[str, int]]:
    cfg = RunConfig(
        sources=("synthetic",),
        sessions=args.sessions or max(2, 2 * batch),
        fps=args.fps or 120.0,
        policy="all",
        max_batch=batch,
        backend=args.backend,
        device=args.device,
        profile=args.profile if args.backend == "emulated" else None,
        precision=args.precision,
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
        "--backend",
        args.backend,
        "--profile",
        args.profile,
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
        "--sessions",
        str(args.sessions or 0),
        "--fps",
        str(args.fps or 0),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    wps, sizes = json.loads(out.strip().splitlines()[-1])
    return wps, sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("torch", "emulated"), default="torch")
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--profile", default="laptop-8gb", help="for --backend emulated")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--resolution", default=None)
    ap.add_argument("--batch", default="1,2,4,8")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steady", action="store_true", help="sessions that do not skip frames")
    ap.add_argument("--one", choices=("bare", "pipeline"), help=argparse.SUPPRESS)
    ap.add_argument("--sessions", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--fps", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    gpu_like = args.device.startswith("cuda") or args.backend == "emulated"
    args.precision = args.precision or ("fp16" if gpu_like else "fp32")
    args.resolution = args.resolution or ("512x288" if gpu_like else "128x72")
    res = parse_resolution(args.resolution)
    if args.backend == "torch":
        try:
            check_device(args.device)
        except BackendError as exc:
            sys.exit(f"pipeline_efficiency: {exc}")
    configure_threads()
    if args.one:  # a child process: measure one side, print it as JSON
        b = int(args.batch)
        if args.one == "pipeline":
            result = pipeline(args, res, b, args.seconds)
        elif args.backend == "emulated":
            result = (bare_emulated_wps(args.profile, args.precision, res, b, args.seconds / 2), {})
        else:
            # on its own thread, the only one in this process that runs torch, as the live
            # worker does: on the CPU, torch's OpenMP team differs between the main thread
            # and others, and so does its speed
            out: list[float] = []
            side = threading.Thread(
                target=lambda: out.append(
                    bare_wps(args.device, args.precision, res, b, args.seconds / 2)
                )
            )
            side.start()
            side.join()
            result = (out[0], {})
        print(json.dumps(result))
        return
    if args.backend == "emulated":
        where = f"emulated {args.profile}"
    elif args.device.startswith("cuda"):
        where = f"{args.device} ({torch.cuda.get_device_name(0)})"
    else:
        where = "cpu"
    print(
        f"# pipeline efficiency on {where}, {args.precision}, {res[0]}x{res[1]}, "
        f"{args.rounds} rounds, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}, "
        + (
            "steady: batch-many sessions just above the device's rate"
            if args.steady
            else "overloaded: 2x batch sessions at 120 fps"
        )
    )
    print(
        "| batch | bare windows/s (median, all) | pipeline windows/s (median, all) "
        "| ratio median (min – max) | batch sizes |"
    )
    print("|---|---|---|---|---|")
    batch1 = None
    for b in (int(v) for v in args.batch.split(",")):
        bares = [measure("bare", args, b)[0]]
        if args.steady:
            # each session just faster than the device could serve it at any batch size up
            # to b (else small batches keep up and batches never fill): 1.1 x the larger of
            # the batch-1 and batch-b rates, shared by b sessions
            if batch1 is None:
                batch1 = bares[0] if b == 1 else measure("bare", args, 1)[0]
            args.sessions, args.fps = b, round(1.1 * max(bares[0], batch1) / b, 2)
        lives, ratios = [], []
        for _ in range(args.rounds):
            live, sizes = measure("pipeline", args, b)
            bares.append(measure("bare", args, b)[0])
            lives.append(live)
            ratios.append(live / ((bares[-2] + bares[-1]) / 2))
        print(
            f"| {b} | {statistics.median(bares):.1f} ({_fmt(bares)}) "
            f"| {statistics.median(lives):.1f} ({_fmt(lives)}) "
            f"| {statistics.median(ratios):.3f} ({min(ratios):.3f} – {max(ratios):.3f}) "
            f"| {sizes} |",
            flush=True,
        )


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    main()
