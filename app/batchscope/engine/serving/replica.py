"""BatchScope's Ray Serve deployment: the same runner as the in-process worker, batched by Ray.

This module runs inside Ray's replica process (Ray imports it there by name: BatchScope is
installed in the same environment). The replica builds the runner a config asks for
(``make_backend(config.in_replica())``: a profile's curve, or the real model) and serves
one window per request; ``@serve.batch`` gathers the requests waiting in the replica into
batches of at most ``max_batch_size`` after at most ``batch_wait_timeout_s``, one batch at a
time (``max_concurrent_batches=1``: one job on the device, as in the worker). Each result
carries what the client cannot see: the batch it ran in (an id and its size), when the
request reached the replica and the batch's stage times, all on the replica's
``time.perf_counter`` clock, with the clock's identity (the machine's boot id) so the
client knows whether it shares it.

The batching knobs change live through ``@serve.batch``'s setters (``set_batching``), in
the same replica: no redeploy, no new process. A deployment from ``plan --export``'s
``serve_config.yaml`` is built by :func:`app_from_args` and gets its knobs as Ray Serve's
``user_config`` (``reconfigure``), so ``serve deploy`` with new values changes them live too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ray import serve
from ray.serve import Application

from batchscope.config import RunConfig
from batchscope.engine.serving.wire import MAX_BATCH_SIZE, Served, boot_id
from batchscope.engine.session import Window

#: Requests one replica holds at once: every session has at most one in flight.
MAX_ONGOING_REQUESTS = 1024


def keep_on_loopback() -> None:
    """Bind the replica's inter-deployment gRPC server to 127.0.0.1, not every interface.

    Ray Serve 2.60 starts it on ``[::]:0`` unconditionally (``replica.py``'s
    ``_on_initialized``, after the deployment's constructor); on a cluster BatchScope
    started on loopback it is the one listener that would be reachable from the network.
    Called from the constructor, before Ray starts that server; a Ray without the hook
    is left as it is (the loopback test says so).
    """
    with contextlib.suppress(ImportError, AttributeError):
        from ray.serve._private import replica as ray_replica

        bind = ray_replica.add_port_to_grpc_server

        def on_loopback(server: Any, address: str) -> Any:
            return bind(server, address.replace("[::]", "127.0.0.1", 1))

        ray_replica.add_port_to_grpc_server = on_loopback


@serve.deployment(
    max_ongoing_requests=MAX_ONGOING_REQUESTS,
    ray_actor_options={"num_cpus": 0},  # per run: ray_serve.replica_actor_options
    # a stop drains nothing: BatchScope waited for its answers (or gave them up) first
    graceful_shutdown_timeout_s=1.0,
    graceful_shutdown_wait_loop_s=0.1,
)
class BatchScopeReplica:
    def __init__(
        self, config: RunConfig, max_batch_size: int, wait_s: float, loopback: bool
    ) -> None:
        from batchscope.engine.backends import make_backend

        if loopback:
            keep_on_loopback()
        self.backend = make_backend(config.in_replica())
        self.label = self.backend.label
        # the runner's calls block: one thread of their own keeps the replica's event
        # loop free to take requests while a batch runs
        self._device = ThreadPoolExecutor(1, thread_name_prefix="batchscope-replica")
        self._clock = boot_id()
        self._batches = 0
        self.sizes: Counter[int] = Counter()
        self.set_batching(max_batch_size, wait_s)

    def set_batching(self, max_batch_size: int, wait_s: float) -> int:
        """Apply the batching knobs from the next batch on; returns this replica's PID."""
        batcher: Any = self.run_batch  # serve.batch adds the setters to the method
        batcher.set_max_batch_size(max_batch_size)
        batcher.set_batch_wait_timeout_s(wait_s)
        self._knobs = (max_batch_size, wait_s)
        return os.getpid()

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Ray Serve's ``user_config`` (serve_config.yaml): the batching knobs, live."""
        self.set_batching(
            int(user_config["max_batch_size"]), float(user_config["batch_wait_timeout_s"])
        )

    def stats(self) -> dict[str, Any]:
        """The batches this replica formed, by size, its batching knobs, runner and PID."""
        return {
            "batch_sizes": dict(self.sizes),
            "max_batch_size": self._knobs[0],
            "wait_s": self._knobs[1],
            "runner": self.label,
            "pid": os.getpid(),
        }

    async def __call__(self, window: Window) -> Served:
        return await self.run_batch((window, time.perf_counter()))

    @serve.batch(max_batch_size=MAX_BATCH_SIZE, batch_wait_timeout_s=0.0, max_concurrent_batches=1)
    async def run_batch(self, requests: list[tuple[Window, float]]) -> list[Served]:
        windows = [w for w, _ in requests]
        self._batches += 1
        batch_id, n = self._batches, len(windows)
        self.sizes[n] += 1
        start = time.perf_counter()
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._device, self.backend.run, windows)
        pid = os.getpid()
        return [
            Served(
                det,
                batch_id,
                n,
                arrived,
                start,
                result.prep_end,
                result.compute_end,
                result.post_end,
                result.device_late,
                self._clock,
                pid,
            )
            for det, (_, arrived) in zip(result.detections, requests, strict=True)
        ]


def app_from_args(args: dict[str, Any]) -> Application:
    """The application ``serve run serve_config.yaml`` deploys (``serve_config.py``):
    ``args["setting"]`` is the policy.json setting; ``args["device"]`` where the real model
    runs (its runtime the setting's), or None to replay the setting's profile curve;
    ``args["grpc_on_loopback"]`` keeps the replica's gRPC server on 127.0.0.1. The
    batching knobs come after, as the deployment's ``user_config``."""
    from batchscope.setting import setting_from_json

    setting = setting_from_json(args["setting"], "serve_config.yaml: args.setting")
    device = args.get("device")
    if device:
        config = setting.with_changes(backend="torch", device=device, profile=None)
    else:
        config = setting.with_changes(backend="emulated")
    loopback = bool(args.get("grpc_on_loopback", False))
    return BatchScopeReplica.bind(config, MAX_BATCH_SIZE, 0.0, loopback)  # type: ignore[attr-defined]
