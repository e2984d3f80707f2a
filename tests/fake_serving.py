"""A serving engine in this process, for the tests of a live switch of engine (the real
ones are tested beside Ray and Triton): ``fakes`` makes every serving backend an engine
builds a :class:`FakeServing`, and counts Ray's holds instead of starting Ray (the fixture
is in conftest.py)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from batchscope.config import RunConfig
from batchscope.device.checks import BackendError
from batchscope.engine import run_devices
from batchscope.engine.serving.base import ServingBackend
from batchscope.engine.serving.wire import Served, boot_id

COMPUTE_S = 0.004


class FakeServing(ServingBackend):
    """A serving engine in this process: every request a batch of one, answered after
    COMPUTE_S on a pool thread."""

    version = "0-fake"
    runner = "emulated"
    weights = "emulated device: no model runs"

    def __init__(self, config: RunConfig, engine: str) -> None:
        self.engine = engine
        self.label = f"{engine}: fake"
        self.resolution = config.resolution
        self.closed = False
        self.sent = 0
        self.knobs: list[tuple[Any, ...]] = []
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._counts: Counter[int] = Counter()
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="fake-engine")

    def submit(self, window: Any) -> Future:
        if self.closed:
            raise BackendError("closed")
        self.sent += 1
        return self._pool.submit(self._serve)

    def _serve(self) -> Served:
        arrived = time.perf_counter()
        time.sleep(COMPUTE_S)
        end = time.perf_counter()
        with self._lock:
            self._counts[1] += 1
        return Served(
            None,
            next(self._ids),
            1,
            arrived,
            arrived,
            arrived,
            end,
            end,
            0.0,
            boot_id(),
            os.getpid(),
        )

    def batching_of(self, policy: Any) -> tuple[Any, ...]:
        return (policy.cap or 0,)

    def set_batching(self, knobs: tuple[Any, ...]) -> Future:
        self.knobs.append(knobs)
        done: Future = Future()
        done.set_result(None)
        return done

    def counts(self) -> dict[int, int]:
        with self._lock:
            return dict(self._counts)

    def close(self) -> None:
        self.closed = True
        self._pool.shutdown(wait=True)  # the answers in flight land first


def install_fakes(monkeypatch: Any) -> tuple[list[FakeServing], list[str]]:
    """Every serving backend an engine builds is a FakeServing (listed); Ray's holds
    counted instead of a Ray started."""
    built: list[FakeServing] = []
    holds: list[str] = []

    def build(config: RunConfig, progress: Any) -> FakeServing:
        progress(f"starting {config.serving}…")
        if config.profile == "missing-profile":
            raise BackendError("the engine did not start: no such profile")
        built.append(FakeServing(config, config.serving or ""))
        return built[-1]

    monkeypatch.setattr(run_devices, "serving_backend", build)
    monkeypatch.setattr(run_devices, "acquire_serving", lambda: holds.append("acquire"))
    monkeypatch.setattr(run_devices, "release_serving", lambda: holds.append("release"))
    return built, holds
