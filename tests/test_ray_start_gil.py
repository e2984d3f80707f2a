"""Starting Ray leaves the interpreter to our other threads (issue 44, item 6).

The engine switch starts Ray off the window's thread, but Ray's driver runs in our process
and its C++ holds the GIL while it waits: 86228b5's ``ray.init`` waited, so, for the raylet
to answer its registration, which the raylet held back until the workers it prestarts for
a first driver had registered. Every thread stood still (0.7-2.5 s on this two-core
machine, about 30 s on a reporter's). A watchdog thread that sleeps 10 ms at a time
measures its worst lateness while a local Ray, Serve and one replica start, in a child:
Ray is one per process (and this must be a fresh one).

Ray is imported before: importing Ray and Serve is CPU work on the importing thread (about
0.85 s of it here), which a loaded machine stretches (the watchdog's longest pause
0.06-0.97 s at load 12-13 on two cores), not a wait; it happens once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'ray[serve]'")

pytestmark = pytest.mark.slow

#: The worst a 10 ms sleep may oversleep while Ray starts, in s. On this two-core machine
#: 86228b5 overslept 0.72-2.5 s in each of 13 starts (load 2-13: ray.init's first-driver
#: registration, GIL held while the raylet prestarted workers). Now 0.09-0.28 s in 18 of
#: 22; at load 11-13 the CPU work that holds the GIL (forks, Serve's start) stretches, and
#: 4 overslept 0.40-0.97 s: a start over the bound is measured once more (a wait fails
#: both).
WORST_S = 0.7
TRIES = 2
START_S = 180.0  # a cold Ray, Serve and one replica on a busy two-core machine

CHILD = """
import json, threading, time
late, stop = [], threading.Event()

def watchdog():
    while not stop.is_set():
        t = time.monotonic()
        time.sleep(0.01)
        late.append((t, time.monotonic() - t - 0.01))

threading.Thread(target=watchdog, daemon=True).start()
import ray, ray.serve, batchscope.engine.serving.replica  # CPU work: below
from batchscope.config import RunConfig
from batchscope.engine.serving.ray_serve import ray_backend, shutdown_cluster
t_alone = time.monotonic()
time.sleep(2.0)  # the watchdog alone, for scale
t0 = time.monotonic()
config = RunConfig(sources=("synthetic",), resolution=(256, 144), precision="fp16",
                   profile="laptop-8gb", backend="ray")
said = []
try:
    backend = ray_backend(config, lambda line: said.append((time.monotonic(), line)))
    t1 = time.monotonic()
    backend.close()
finally:
    shutdown_cluster()
stop.set()
time.sleep(0.05)
during = [(t, d) for t, d in late if t0 <= t < t1]
t, worst = max(during, key=lambda x: x[1])
print(json.dumps({
    "alone_s": max(d for t, d in late if t_alone <= t < t0),
    "worst_s": worst,
    "start_s": t1 - t0,
    "during": [line for when, line in said if when <= t][-1:],  # the step said before it
    "report": backend.report()["start_s"],
}))
"""


def measured_start() -> dict:
    """One start of a local Ray, Serve and a replica in a child, as the child saw it."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=START_S,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stdout.splitlines() if line.startswith('{"alone_s"')]
    assert said, proc.stdout[-2000:]
    return json.loads(said[-1])  # (Ray may print after it)


def test_starting_ray_never_holds_the_interpreter_for_long():
    tries = []
    while len(tries) < TRIES and not any(seen["worst_s"] < WORST_S for seen in tries):
        tries.append(measured_start())
    assert any(seen["worst_s"] < WORST_S for seen in tries), "; ".join(
        f"a 10 ms sleep overslept {seen['worst_s']:.2f} s while Ray started "
        f"({seen['start_s']:.1f} s in all; {seen['report']}; during {seen['during']}; "
        f"alone {seen['alone_s']:.2f} s at most)"
        for seen in tries
    )
