"""What BlurBall's int8 arrangement buys in ONNX Runtime, and where an ONNX model's time goes.

Builds, at one resolution, the fp32 export (what ``--precision fp32`` runs), the int8
model quantized from the plain graph (before) and the one quantized from
``BlurBall(for_int8=True)`` (what ``--precision int8`` runs: ``models/onnx_quantize.py``),
with the same calibration, then times a batch of each in one process, rounds interleaved
so that load that comes and goes falls on all three alike (median and best of
``--rounds``), and prints each model's time by ONNX Runtime operator (its profiler: node
times summed over the profiled runs). Sessions are made as the app makes them for the CPU
(intra-op threads = cores, one inter-op thread, sequential, no spinning).

Usage: PYTHONPATH=app python benchmarks/int8_arrangement.py [--resolution 256x144]
       [--batch 4] [--rounds 7] [--checkpoint assets/weights/blurball_synthetic_demo.pt]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

import numpy as np
import onnxruntime as ort

from batchscope.config import parse_resolution
from batchscope.models.onnx_export import INPUT, export_model, exportable
from batchscope.models.onnx_quantize import quantize

DEMO = Path(__file__).resolve().parents[1] / "assets" / "weights" / "blurball_synthetic_demo.pt"


def _session(model: bytes, profile: str | None = None) -> ort.InferenceSession:
    """A session as the app makes one for the CPU; ``profile``: the profiler's file prefix."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _by_operator(model: bytes, x: np.ndarray, runs: int = 5) -> list[tuple[str, float]]:
    """ms per run by operator, most first (the profiler's file in a folder of its own)."""
    with tempfile.TemporaryDirectory(prefix="batchscope-ort-profile-") as folder:
        session = _session(model, profile=str(Path(folder) / "profile"))
        for _ in range(runs):
            session.run(None, {INPUT: x})
        events = json.loads(Path(session.end_profiling()).read_text())
    totals: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            totals[event["args"]["op_name"]] += event["dur"]
    return [(op, us / runs / 1000.0) for op, us in totals.most_common()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resolution", type=parse_resolution, default=(256, 144))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--checkpoint", default=str(DEMO))
    args = parser.parse_args()
    w, h = args.resolution
    say = lambda line: print(line, file=sys.stderr)  # noqa: E731
    say("exporting the plain and the arranged graphs")
    # what --precision fp32 exports, and the graph --precision int8 quantizes
    plain, arranged = (
        export_model(exportable(p, args.checkpoint, lean=True), args.resolution)
        for p in ("fp32", "int8")
    )
    models = {
        "fp32 (plain graph)": plain,
        "int8 from the plain graph (before)": quantize(plain, args.resolution, say),
        "int8 from BlurBall(for_int8=True)": quantize(arranged, args.resolution, say),
    }
    x = np.random.default_rng(0).integers(0, 256, (args.batch, 9, h, w), dtype=np.uint8)
    sessions = {name: _session(m) for name, m in models.items()}
    for session in sessions.values():  # warm-up
        session.run(None, {INPUT: x})
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(args.rounds):
        for name, session in sessions.items():
            start = time.perf_counter()
            session.run(None, {INPUT: x})
            times[name].append((time.perf_counter() - start) * 1000.0)
    fp32 = statistics.median(times["fp32 (plain graph)"])
    load = os.getloadavg()[0]
    print(f"{w}x{h} batch {args.batch}, {args.rounds} interleaved rounds, load {load:.1f}")
    print("| model | median ms | best ms | fp32 ÷ it |\n|---|---|---|---|")
    for name, ms in times.items():
        median = statistics.median(ms)
        print(f"| {name} | {median:.1f} | {min(ms):.1f} | {fp32 / median:.2f}× |")
    for name, model in models.items():
        ops = _by_operator(model, x)
        print(f"\n{name}: " + ", ".join(f"{op} {ms:.1f}" for op, ms in ops[:8]) + " (ms a run)")


if __name__ == "__main__":
    main()
