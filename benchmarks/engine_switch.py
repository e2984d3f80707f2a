"""A live switch of engine: how long it takes, and whether the run keeps delivering meanwhile.

    PYTHONPATH=app python benchmarks/engine_switch.py [--sessions 6] [--rounds 2]
        [--engines triton,ray]

Six synthetic sessions at 30 fps on the emulated laptop GPU (fp16, 256×144, policy
``dynamic``, cap 3, 20 ms) start on BatchScope's worker; each round switches to each engine
and back, as the app's Engine list does (``Engine.apply`` with ``backend`` changed). For
each switch: the apply's seconds (the new engine's start, then the swap), the longest gap
between two delivered results over every session while it ran (what a viewer would see as a
stall; at 6 × 30 fps a result is due every ~6 ms), and the processes BatchScope runs beneath
it after it (Ray's or Triton's, by PID: none after a switch back to the worker).
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.serving.reaper import descendants

SETTLE_S = 3.0  # seconds run on each engine before the next switch


def delivered(engine: Engine) -> int:
    return sum(s.delivered for s in engine.snapshot().sessions)


def switch(engine: Engine, backend: str) -> tuple[float, float, str | None]:
    """Apply ``backend``; (its seconds, the longest gap between deliveries meanwhile, error)."""
    gaps = [0.0]
    done = threading.Event()

    def watch() -> None:
        last_n, last_t = delivered(engine), time.perf_counter()
        while not done.is_set():
            time.sleep(0.005)
            n, t = delivered(engine), time.perf_counter()
            if n != last_n:
                last_n, last_t = n, t
            gaps[0] = max(gaps[0], t - last_t)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    error = engine.apply(engine.config.with_changes(backend=backend))
    seconds = time.perf_counter() - t0
    # the first results from the new engine end the gap
    start = delivered(engine)
    while delivered(engine) < start + 6 and time.perf_counter() - t0 < seconds + 30:
        time.sleep(0.005)
    done.set()
    watcher.join()
    return seconds, gaps[0], error


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=6)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--engines", default="triton,ray")
    args = p.parse_args()
    config = RunConfig(
        sources=("synthetic",),
        sessions=args.sessions,
        resolution=(256, 144),
        precision="fp16",
        profile="laptop-8gb",
        backend="emulated",
        policy="dynamic",
        max_batch=3,
        max_delay_ms=20.0,
    )
    engine = Engine(config)
    engine.open()
    engine.start()
    time.sleep(SETTLE_S)
    print(f"{args.sessions} sessions at 30 fps, emulated laptop-8gb fp16 256x144, dynamic 3/20 ms")
    print("| round | switch | apply s | longest gap in deliveries s | processes after |")
    print("|---|---|---|---|---|")
    try:
        for r in range(1, args.rounds + 1):
            for target in args.engines.split(","):
                for backend, label in (
                    (target, f"worker → {target}"),
                    ("emulated", f"{target} → worker"),
                ):
                    seconds, gap, error = switch(engine, backend)
                    if error:
                        raise SystemExit(f"{label}: {error}")
                    time.sleep(SETTLE_S)
                    left = len(descendants(os.getpid()))
                    print(f"| {r} | {label} | {seconds:.2f} | {gap:.3f} | {left} |", flush=True)
    finally:
        engine.stop(20.0)


if __name__ == "__main__":
    main()
