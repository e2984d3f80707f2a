"""BatchScope's worker on several devices: the devices past the first.

Why: past one GPU the question is how sessions spread over devices; the simulator
and the planner answer it (sim/devices.py), and this plays it live, on emulated
devices or with the real model on each device (config.device_list, or N instances on
one device), by the same rules: one roster of sessions, one worker thread and one
policy object per device (the config's knobs), and the mailboxes' router
(engine/routing.py) placing each window on a device when its session's mailbox
opens. Each worker batches only the windows placed on it (Worker.device), runs
them on its own backend (its profile, or the real model on its device) and records its batches
with its index, so one metrics store holds them all and the report splits them
(engine/stats.py: device_entries).

Device 0 is the engine's own worker (which is also a serving engine's client); this
holds devices 1…N−1. A change of devices is part of a live change's transaction
(engine/live_change.py): :meth:`OtherDevices.build` makes and warms up every backend the
new config needs (reusing the running workers, making new ones that are not started),
and only when all of them worked does :meth:`OtherDevices.swap` put them in, stop the
workers no longer needed and start the new ones; :meth:`OtherDevices.release` gives back a
build that failed or was not used.

How it stops: a build's workers run from the moment it makes them, so they are kept
(:meth:`OtherDevices.threads`) until a swap takes them or a release stops them, and
:meth:`OtherDevices.stop` ends them with the ones in use (their build cancelled between two
warm-up runs); once the engine stops, no build starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchscope.config import RunConfig
from batchscope.engine.backends import Backend, BuildCancelled, make_backend
from batchscope.engine.metrics import MetricsStore
from batchscope.engine.policies import make_policy
from batchscope.engine.session import Mailboxes
from batchscope.engine.worker import Worker

#: How long stopping a device's worker may take (s): within a batch (worker.py).
DEVICE_STOP_S = 2.0


@dataclass
class OtherDevicesBuilt:
    """What :meth:`OtherDevices.build` made for ``config``: the workers of devices 1…N−1 (the
    running ones first, then new ones not started) and a warmed-up backend for each."""

    config: RunConfig
    workers: list[Worker]
    backends: list[Backend]
    new: list[Worker]  # the workers made for it (stopped if it is released)


def _maker(
    config: RunConfig, worker: Worker, oom_above: int | None
) -> Callable[[Callable[[], bool]], Backend]:
    """What builds ``worker``'s device's backend (its own profile) on its thread."""
    own = config.device_profile(worker.device)
    return lambda cancelled: make_backend(own, oom_above, cancelled)


class OtherDevices:
    """Devices 1…N−1 of BatchScope's worker on several devices (module doc)."""

    def __init__(
        self,
        mailboxes: Mailboxes,
        store: MetricsStore,
        event: Callable[[str, str], object],
        clock: Callable[[], float],
        scorer: Callable[..., tuple],
        stopping: threading.Event,
        slowdown: Callable[[int], float],
    ) -> None:
        self._mailboxes = mailboxes
        self._store = store
        self._event = event
        self._clock = clock
        self._scorer = scorer
        self._slowdown = slowdown  # a device's slow-device faults' product, now
        self.workers: list[Worker] = []  # devices 1…N−1, in use
        # the workers a build made and no swap took yet (building, or built and waiting):
        # their threads run too, and a stop must end them
        self._building: list[Worker] = []
        self._lock = threading.Lock()  # the two lists, against a build and a stop
        self._stopping = stopping  # the engine's: set, no build starts

    @staticmethod
    def wanted(config: RunConfig) -> int:
        """How many devices past the first ``config`` runs in BatchScope's worker (a
        serving engine's replicas are the engine's, not these)."""
        return 0 if config.serving else config.devices - 1

    def build(self, config: RunConfig, oom_above: int | None) -> OtherDevicesBuilt:
        """Workers and warmed-up backends for ``config``'s devices past the first; raises
        what a build raised, with everything it made given back. The running workers
        keep running meanwhile (the new backends wait until :meth:`swap`)."""
        want = self.wanted(config)
        with self._lock:  # a stop from now on reaches the new workers
            if self._stopping.is_set():
                raise BuildCancelled()
            keep = self.workers[:want]
            new = [
                Worker(
                    self._mailboxes,
                    self._store,
                    make_policy(config),
                    self._event,
                    self._clock,
                    device=d + 1,
                )
                for d in range(len(keep), want)
            ]
            self._building.extend(new)
        built = OtherDevicesBuilt(config, [*keep, *new], [], new)
        try:
            for worker in built.workers:  # each device its own profile (config.profiles)
                built.backends.append(worker.build_backend(_maker(config, worker, oom_above)))
        except BaseException:
            self.release(built)
            raise
        return built

    def swap(self, built: OtherDevicesBuilt, new_policy: bool, running: bool, paused: bool) -> None:
        """Put ``built`` in (each backend between two of its worker's batches, with a new
        policy object if ``new_policy``), stop the workers it has no place for, and set
        the new ones going (``running``), ``paused`` as the run is."""
        config = built.config
        for worker, backend in zip(built.workers, built.backends, strict=True):
            worker.swap_backend(backend, make_policy(config) if new_policy else None)
        for worker in self.workers[len(built.workers) :]:
            worker.stop(DEVICE_STOP_S)
        with self._lock:
            self.workers = built.workers
            self._building = [w for w in self._building if w not in built.new]
        for worker in built.new:
            worker.scorer = self._scorer
            self.set_knobs(worker, config)
            worker.slowdown = self._slowdown(worker.device)  # a fault on: as the others
            worker.paused = paused
            if running:
                worker.start()

    def release(self, built: OtherDevicesBuilt) -> None:
        """Give back a build not swapped in: its backends closed, its new workers stopped."""
        for worker, backend in zip(built.workers, built.backends, strict=False):
            worker.discard(backend)
        for worker in built.new:
            worker.stop(DEVICE_STOP_S)
        with self._lock:
            self._building = [w for w in self._building if w not in built.new]

    @staticmethod
    def set_knobs(worker: Worker, config: RunConfig) -> None:
        """The knobs a worker applies to every policy (every device's: Devices.set_knobs)."""
        ms = config.drop_after_ms
        worker.drop_after_s = None if ms is None else ms / 1000.0

    def each(self, fn: Callable[[Worker], Any]) -> None:
        """``fn(worker)`` for each device's worker past the first."""
        for worker in self.workers:
            fn(worker)

    def start(self) -> None:
        self.each(lambda w: w.start())

    def stop(self, timeout: float = DEVICE_STOP_S) -> None:
        """Stop every device's worker, those in use and those a build made (a build under
        way is cancelled), within ``timeout`` s in all: each is told first (it ends within
        a batch or a warm-up run), then each is waited for until one deadline."""
        deadline = time.monotonic() + timeout
        for worker in self.threads():
            worker.stop(0.0)  # told, not waited for
        for worker in self.threads():
            worker.stop(max(0.0, deadline - time.monotonic()))

    def threads(self) -> list[Worker]:
        """Every worker of devices 1…N−1 whose thread this started: in use, and made by a
        build not swapped in yet."""
        with self._lock:
            return [*self.workers, *self._building]
