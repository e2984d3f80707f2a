"""The simulator's loop side by side on one plain run: compiled, and its Python form (the
same code uncompiled, on lists: the tests' oracle, and what plays every run where numba
is not there). Best of 2 each, 30 s of ``oldest`` at 512x288 fp16 on server-24gb
devices, pinned.

Usage: PYTHONPATH=app python benchmarks/fast_loop_forms.py
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from batchscope.config import RunConfig
from batchscope.sim import fast_loop
from batchscope.sim.devices import load_devices, play_devices

DURATION_S = 30.0


def _best_s(play: Callable[[], object], repeat: int = 2) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        play()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    assert fast_loop.compiled(), "numba compiles the loop here"
    for sessions, n_dev in ((16, 1), (256, 4)):
        config = RunConfig(
            backend="emulated", sessions=sessions, policy="oldest", precision="fp16",
            resolution=(512, 288), duration_s=DURATION_S,
        )  # fmt: skip
        curves = [d.curve(config) for d in load_devices(["server-24gb"] * n_dev)]
        play = functools.partial(play_devices, config, curves, "pinned", 1.0)
        row = {}
        for name, form in (("compiled", False), ("Python form", True)):
            row[name] = _best_s(functools.partial(play, python=form))
        cells = ", ".join(
            f"{k} {v * 1000:.0f} ms ({(DURATION_S + 1) * n_dev / v:,.0f}x per device)"
            for k, v in row.items()
        )
        print(f"{n_dev} device(s) x {sessions // n_dev} sessions: {cells}")


if __name__ == "__main__":
    main()
