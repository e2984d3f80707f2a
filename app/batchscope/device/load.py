"""Real noisy neighbours: N child processes keeping the same device busy.

Why: on a real device the neighbours must be real — another process's
kernels time-sliced with ours (CUDA without MPS/MIG), or another process's
threads competing for the cores (CPU). Each neighbour is a child process
(``python -m batchscope.device.load DEVICE DUTY``) that loops matrix
multiplies on the device for ``duty`` of every ``PERIOD_S`` and sleeps the
rest.

Children never outlive the app: each checks every period (0.1 s) that its
parent is still the process that started it, and ends when it is not — the
parent was killed, even with SIGKILL. (Not ``prctl(PR_SET_PDEATHSIG)``: it
fires when the parent *thread* ends, and the thread that applies a setting —
an experiment player's, say — may end long before the app.) ``stop()``
terminates them and waits, then kills what is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from batchscope.config import RunConfig

PERIOD_S = 0.1  # one busy-then-idle cycle of a neighbour
STOP_TIMEOUT_S = 2.0


class NeighbourLoad:
    """``count`` child processes loading ``device`` at ``duty`` (0–1) of the time."""

    def __init__(self, device: str, count: int, duty: float) -> None:
        self.device = device
        self.count = count
        self.duty = duty
        self._children: list[subprocess.Popen] = []

    def start(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        for _ in range(self.count):
            self._children.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "batchscope.device.load",
                        self.device,
                        str(self.duty),
                        str(os.getpid()),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                )
            )

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self._children]

    def alive(self) -> int:
        return sum(c.poll() is None for c in self._children)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        for child in self._children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + timeout
        for child in self._children:
            try:
                child.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(1.0)
        self._children = []


def neighbour_load(have: NeighbourLoad | None, config: RunConfig) -> NeighbourLoad | None:
    """The neighbour processes ``config`` asks for (real ones only beside the torch
    backend, with a duty above 0): ``have`` if it is that already, else ``have`` stopped
    and a new load started (None for none)."""
    want = config.neighbours if config.backend == "torch" and config.neighbour_duty > 0 else 0
    if have is not None and (have.device, have.count, have.duty) == (
        config.device,
        want,
        config.neighbour_duty,
    ):
        return have
    if have is not None:
        have.stop()
    if not want:
        return None
    load = NeighbourLoad(config.device, want, config.neighbour_duty)
    load.start()
    return load


def _load(device: str, duty: float, parent: int) -> None:
    """The child: busy ``duty`` of every period on ``device`` until its parent is gone."""
    import torch

    torch.set_num_threads(1)
    size = 1024 if device.startswith("cuda") else 256
    x = torch.randn(size, size, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    while os.getppid() == parent:
        start = time.perf_counter()
        while time.perf_counter() - start < duty * PERIOD_S:
            x = (x @ x).clamp_(-1.0, 1.0)
            sync()
        time.sleep(max(0.0, (1.0 - duty) * PERIOD_S))


if __name__ == "__main__":
    _load(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]))
