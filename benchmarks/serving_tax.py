"""The serving tax: the same sessions, setting and curve served by BatchScope's own worker,
by a real Ray Serve and by a real Triton server, side by side in one run.

    PYTHONPATH=app python benchmarks/serving_tax.py [--seconds 8] [--rounds 2]
        [--sessions 1,4,8] [--resolutions 256x144,512x288] [--engines inprocess,ray,triton]

Every run is the synthetic scene at 30 fps on the emulated laptop GPU (fp16), policy
``all`` (what waits, when the device is free: Ray's batcher with no wait), measured for
``--seconds`` after a 2 s warm-up. One local Ray (on loopback) serves every Ray run; its
start, each deployment's and the stop are timed, and the memory of its processes (RSS)
summed while it serves. Each Triton run starts its own server (.venv-triton; on loopback).
Prints, per resolution, session count, engine and round: throughput, mean and slowest fps,
p50 and p99, the mean batch, and for a serving engine where the time goes (the serving
stages: Ray's client, to the replica, queue, compute, back; Triton's client, to the server
and its queue, compute, back, then the server's own queue mean).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from batchscope.config import RunConfig, parse_resolution
from batchscope.engine.engine import Engine
from batchscope.engine.serving import ray_serve
from batchscope.engine.serving.reaper import descendants

WARMUP_S = 2.0


def rss_mb(pids: set[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024.0


def run(config: RunConfig, seconds: float) -> tuple[dict, float, float]:
    """(report, open s, memory of the engine's processes in MB while serving)."""
    engine = Engine(config)
    t0 = time.monotonic()
    engine.open()
    engine.start()
    opened = time.monotonic() - t0
    try:
        time.sleep(WARMUP_S)
        engine.reset_stats(announce=False)
        time.sleep(seconds)
        # Triton: its server and model processes; Ray: every child (Ray's processes)
        backend = engine.backend
        server = getattr(backend, "server", None)
        memory = rss_mb(server.processes() if server else descendants(os.getpid()))
        report = engine.report()
    finally:
        engine.stop(10.0)
    return report, opened, memory


def mean_batch(sizes: dict[str, int]) -> float:
    n = sum(sizes.values())
    return sum(int(k) * v for k, v in sizes.items()) / n if n else 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sessions", default="1,4,8")
    p.add_argument("--resolutions", default="256x144,512x288")
    p.add_argument("--engines", default="inprocess,ray,triton")
    args = p.parse_args()
    engines = args.engines.split(",")
    counts = [int(x) for x in args.sessions.split(",")]
    sizes = [parse_resolution(x) for x in args.resolutions.split(",")]
    ray_serve.acquire_serving()  # one Ray for every Ray run (released at the end)
    print(
        f"{'res':>8} {'sess':>4} {'engine':>9} {'rnd':>3} {'w/s':>6} {'fps':>5} {'min':>5} "
        f"{'p50':>6} {'p99':>6} {'batch':>5}  serving stages ms"
    )
    for w, h in sizes:
        for n in counts:
            for rnd in range(args.rounds):
                for engine in engines:
                    backend = "emulated" if engine == "inprocess" else engine
                    config = RunConfig(
                        sources=("synthetic",),
                        sessions=n,
                        policy="all",
                        backend=backend,
                        profile="laptop-8gb",
                        precision="fp16",
                        resolution=(w, h),
                    )
                    report, opened, memory = run(config, args.seconds)
                    o = report["overall"]
                    stages = ""
                    if backend != "emulated":
                        serving = report["serving"]
                        s = serving["stages_ms"]
                        stages = "/".join(f"{k} {s[k]:.1f}" for k in s)
                        if "server_ms" in serving:
                            stages += f" (server queue {serving['server_ms']['queue'] or 0:.1f})"
                        stages += f"  (open {opened:.1f} s, children {memory:.0f} MB)"
                    print(
                        f"{w}x{h:<4} {n:>4} {engine:>9} "
                        f"{rnd:>3} {o['throughput_wps']:>6.1f} {o['mean_fps']:>5.1f} "
                        f"{o['min_fps']:>5.1f} {o['latency_ms']['p50']:>6.1f} "
                        f"{o['latency_ms']['p99']:>6.1f} {mean_batch(o['batch_sizes']):>5.2f}  "
                        f"{stages}",
                        flush=True,
                    )
    cluster = ray_serve._cluster
    t0 = time.monotonic()
    ray_serve.release_serving()
    if cluster is not None:
        print(
            f"Ray {cluster.version}: started in {cluster.ray_s:.1f} s, Serve in "
            f"{cluster.serve_s:.1f} s; stopped in {time.monotonic() - t0:.1f} s"
        )


if __name__ == "__main__":
    main()
