"""Runtimes side by side: windows/s of the real-model backends on this machine's CPU.

Each (runtime, resolution) is measured in a fresh process (no warm caches, no
allocator state, no OpenMP team from another runtime), and the processes are
alternated over rounds in a rotated order so that drift on a shared machine cancels.
What is timed is ``Backend.run`` as the worker calls it: the frame pool's upload,
normalisation, the model, and the post-processing of the newest frame's heatmap
(prep + compute + post), on windows that share two frames with the session's last
one, as a live session's do. Per process: ``--warmup`` untimed batches, then
``--repeat`` timed ones per batch size; a round's figure is the median; the table
shows the median over rounds and the spread (min–max over rounds, in % of the median).

Runtimes:
- torch:          TorchBackend, eager
- torch-compile:  TorchBackend, torch.compile(dynamic=True) (its build takes ~100 s
                  here, so by default only at the first resolution)
- onnxruntime:    OnnxBackend (CPU provider; idle threads do not spin; the default)
- ort-spinning:   OnnxBackend with ONNX Runtime's default spin-waiting threads

Every runtime gets the same intra-op threads (``--threads``, default: all cores, what
``configure_threads`` gives the worker); ONNX Runtime's inter-op pool is 1 thread.

Usage: python benchmarks/runtimes.py [--rounds 3] [--resolutions 128x72,256x144]
       [--batches 1,2,4] [--runtimes torch,torch-compile,onnxruntime,ort-spinning]
       [--compile-resolutions 128x72] [--threads N] [--repeat 10] [--warmup 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np

RUNTIMES = ("torch", "torch-compile", "onnxruntime", "ort-spinning")


def child(args: argparse.Namespace) -> None:
    """One process: build one backend, time every batch size, print one JSON line."""
    import torch

    from batchscope.config import parse_resolution
    from batchscope.engine.backends.onnx_backend import OnnxBackend
    from batchscope.engine.backends.torch_backend import TorchBackend
    from batchscope.engine.session import Window

    torch.set_num_threads(args.threads)
    w, h = parse_resolution(args.resolution)
    t0 = time.perf_counter()
    if args.child.startswith("torch"):
        backend = TorchBackend("cpu", "fp32", (w, h), compile_model=args.child == "torch-compile")
    else:
        backend = OnnxBackend(
            "cpu", "fp32", (w, h), threads=args.threads, spinning=args.child == "ort-spinning"
        )
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(16)]
    out: dict = {"build_s": round(build_s, 2), "label": backend.label, "batches": {}}
    for n in args.batch_list:
        step = 0

        def batch(n: int = n) -> list:
            nonlocal step
            step += 1
            return [
                Window(s, step, step, tuple(frames[(step + s * 5 + k) % 16] for k in range(3)), 0)
                for s in range(n)
            ]

        for _ in range(args.warmup):
            backend.run(batch())
        total, stages = [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            r = backend.run(batch())
            total.append(r.post_end - t)
            stages.append((r.prep_end - t, r.compute_end - r.prep_end, r.post_end - r.compute_end))
        out["batches"][n] = {
            "ms": 1000 * statistics.median(total),
            "prep_ms": 1000 * statistics.median(s[0] for s in stages),
            "compute_ms": 1000 * statistics.median(s[1] for s in stages),
            "post_ms": 1000 * statistics.median(s[2] for s in stages),
        }
    print(json.dumps(out))


def parent(args: argparse.Namespace) -> None:
    jobs = [
        (rt, res)
        for res in args.resolutions.split(",")
        for rt in args.runtimes.split(",")
        if rt != "torch-compile" or res in args.compile_resolutions.split(",")
    ]
    results: dict[tuple[str, str], list[dict]] = {job: [] for job in jobs}
    print(
        f"# {len(jobs)} processes per round, {args.rounds} rounds; intra-op threads "
        f"{args.threads} of {os.cpu_count()} cores; warm-up {args.warmup}, repeat "
        f"{args.repeat} per batch size",
        flush=True,
    )
    for r in range(args.rounds):
        order = jobs[r % len(jobs) :] + jobs[: r % len(jobs)]  # rotate: drift cancels
        for rt, res in order:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                rt,
                "--resolution",
                res,
                "--batches",
                args.batches,
                "--threads",
                str(args.threads),
                "--repeat",
                str(args.repeat),
                "--warmup",
                str(args.warmup),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if done.returncode or not lines:
                print(f"round {r + 1} {rt} {res}: FAILED\n{done.stderr[-2000:]}", flush=True)
                continue
            data = json.loads(lines[-1])
            results[(rt, res)].append(data)
            cells = "  ".join(f"b{b} {v['ms']:.1f} ms" for b, v in data["batches"].items())
            print(
                f"round {r + 1} {rt:>13} {res:>8}: build {data['build_s']:.1f} s  {cells}",
                flush=True,
            )
    table(results, args)


def table(results: dict[tuple[str, str], list[dict]], args: argparse.Namespace) -> None:
    batches = [str(b) for b in args.batch_list]
    print()
    print(
        "| resolution | runtime | batch | ms/batch | windows/s | × torch eager | spread "
        "| best round ms | × torch eager (best) | prep / compute / post ms | build s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for res in args.resolutions.split(","):
        base, base_best = {}, {}
        for rt in args.runtimes.split(","):
            runs = results.get((rt, res)) or []
            if not runs:
                continue
            for b in batches:
                ms = [run["batches"][b]["ms"] for run in runs]
                med = statistics.median(ms)
                wps = int(b) * 1000 / med
                best = min(ms)  # contention only ever adds time: the best round is cleanest
                if rt == "torch":
                    base[b], base_best[b] = wps, best
                ratio = f"{wps / base[b]:.2f}" if b in base else "–"
                ratio_best = f"{base_best[b] / best:.2f}" if b in base_best else "–"
                spread = 100 * (max(ms) - min(ms)) / med
                st = [
                    statistics.median(run["batches"][b][k] for run in runs)
                    for k in ("prep_ms", "compute_ms", "post_ms")
                ]
                build = statistics.median(run["build_s"] for run in runs)
                print(
                    f"| {res} | {rt} | {b} | {med:.1f} | {wps:.1f} | {ratio} | {spread:.0f}% "
                    f"| {best:.1f} | {ratio_best} "
                    f"| {st[0]:.1f} / {st[1]:.1f} / {st[2]:.1f} | {build:.1f} |"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", choices=RUNTIMES, help=argparse.SUPPRESS)
    ap.add_argument("--resolution", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--resolutions", default="128x72,256x144")
    ap.add_argument("--compile-resolutions", default="128x72")
    ap.add_argument("--batches", default="1,2,4")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    args.batch_list = [int(b) for b in args.batches.split(",")]
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
