"""The devices a run batches on, as one part of the engine: what a live change builds and
swaps on them, and what the engine opens, stops and reads.

Device 0 is the engine's own worker (:class:`~batchscope.engine.serving.dispatch.ServingWorker`:
a serving engine's client while its backend is one); devices 1…N−1 are BatchScope's
worker on several devices (:class:`~batchscope.engine.other_devices.OtherDevices`), with
the mailboxes' router over them all. The process's Ray is held here while a config serves
on it. The engine (open, stop, its readers) and the live-change transaction
(engine/live_change.py) both act on this part directly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from batchscope.config import RunConfig
from batchscope.engine.backends import Backend, BuildCancelled, make_backend
from batchscope.engine.metrics import MetricsStore
from batchscope.engine.other_devices import OtherDevices, OtherDevicesBuilt
from batchscope.engine.policies import make_policy
from batchscope.engine.routing import Router
from batchscope.engine.serving.base import SERVING_STOP_S
from batchscope.engine.serving.dispatch import ServingClient, ServingWorker
from batchscope.engine.serving.engines import serving_backend
from batchscope.engine.serving.ray_serve import acquire_serving, release_serving
from batchscope.engine.session import Mailboxes
from batchscope.engine.worker import Worker, WorkerStopped


class EngineStopped(RuntimeError):
    """The engine was stopped while this was being done (e.g. the window closed)."""

    def __init__(self) -> None:
        super().__init__("the engine was stopped")


class Devices:
    """Device 0's worker, devices 1…N−1, the router over them, and Ray's hold (module doc)."""

    def __init__(
        self,
        mailboxes: Mailboxes,
        store: MetricsStore,
        event: Callable[[str, str], object],
        said: Callable[[str], None],
        clock: Callable[[], float],
        scorer: Callable[..., tuple],
        stopping: threading.Event,
        slowdown: Callable[[int], float],
        sessions: Callable[[], Iterable[int]],
        oom_above: int | None,
    ) -> None:
        self._mailboxes = mailboxes
        self._store = store
        self._event = event
        self._said = said  # what a slow build is doing (a serving engine's start)
        self._clock = clock
        self._scorer = scorer
        self._sessions = sessions  # the ids of the sessions that play now (for the router)
        self._oom_above = oom_above
        self._worker: ServingWorker | None = None  # device 0 (and a serving engine's client)
        # BatchScope's worker on several devices: devices 1…N−1, and the router
        self.others = OtherDevices(mailboxes, store, event, clock, scorer, stopping, slowdown)
        self.router: Router | None = None
        self._holds_ray = False  # holds the process's Ray (released by stop, or a switch)

    def open(self, config: RunConfig) -> ServingWorker:
        """Make device 0's worker for ``config`` (no backend yet), holding Ray if it serves
        on it: the worker, or a serving engine's client while its backend is one, since
        the engine can switch live (engine/serving/dispatch.py)."""
        self.hold_ray(config)
        self._worker = ServingWorker(
            self._mailboxes, self._store, make_policy(config), self._event, self._clock
        )
        self.set_knobs(config)
        self._worker.scorer = self._scorer
        return self._worker

    @property
    def opened(self) -> bool:
        """Whether :meth:`open` made device 0's worker."""
        return self._worker is not None

    @property
    def worker(self) -> ServingWorker:
        """Device 0's worker; :meth:`open` makes it first, before anything that uses it."""
        assert self._worker is not None, "the engine is not open"
        return self._worker

    @property
    def backend(self) -> Backend:
        backend = self.worker.backend
        assert backend is not None, "open() swaps the first backend in"
        return backend

    @property
    def client(self) -> ServingClient | None:
        """The serving engine's client while the backend is one (engine/serving/dispatch.py)."""
        return self._worker.client if self._worker is not None else None

    @property
    def paused(self) -> bool:
        return bool(self._worker and self._worker.paused)

    def workers(self) -> list[Worker]:
        """Every device's worker, device 0 first (one unless several devices run in
        BatchScope's worker)."""
        return [self.worker, *self.others.workers]

    # -- what a live change builds, then swaps in ---------------------------------------

    def build_backend(self, config: RunConfig) -> Backend:
        """Device 0's backend of ``config``, built while the one in use keeps running.

        An in-process backend is built on the worker thread (its model runs there); a
        serving engine's on this thread: its work is the engine's processes' (seconds:
        Ray's start, Triton's), and the engine in use keeps serving meanwhile.
        """
        oom_above = self._oom_above
        if config.serving:
            return serving_backend(config, self._said)
        try:
            return self.worker.build_backend(
                lambda cancelled: make_backend(config, oom_above, cancelled, self._said)
            )
        except BuildCancelled:
            raise EngineStopped() from None

    def swap_in(self, backend: Backend) -> None:
        """Make ``backend`` the one in use (between two batches); a stop that came first
        closes it instead (a serving engine's processes with it) and raises WorkerStopped."""
        try:
            self.worker.swap_backend(backend)
        except WorkerStopped:
            backend.close()
            raise

    def build_others(self, config: RunConfig) -> OtherDevicesBuilt:
        """The workers and backends of ``config``'s devices past the first
        (engine/other_devices.py), built while the run goes on."""
        try:
            return self.others.build(config, self._oom_above)
        except BuildCancelled:
            raise EngineStopped() from None

    def swap_others(
        self, built: OtherDevicesBuilt, config: RunConfig, new_policy: bool, running: bool
    ) -> None:
        """Put ``built`` in (after device 0's backend), new workers going if ``running`` and
        paused as the run is, and route the windows over the devices of ``config`` (no
        router with one device)."""
        self.others.swap(built, new_policy, running, self.paused)
        self.route(config)

    def set_knobs(self, config: RunConfig) -> None:
        """Worker thread: the knobs every device's worker applies to every policy, and the
        router on several devices."""
        OtherDevices.set_knobs(self.worker, config)
        self.others.each(lambda w: OtherDevices.set_knobs(w, config))
        if self.router is not None and self.router.kind != config.router:
            self.route(config)

    def route(self, config: RunConfig) -> None:
        """The mailboxes' router for ``config``'s devices in BatchScope's worker."""
        n = 1 + len(self.others.workers)
        if n == 1:
            self.router = None
        else:
            workers = self.workers()
            self.router = Router(config.router, n, config.seed, lambda d: workers[d].free_key())
            self.router.repin(self._sessions())
        self._mailboxes.route(self.router)

    def repin(self) -> None:
        """The sessions changed: pinned deals them again (no router: nothing to deal)."""
        if self.router is not None:
            self.router.repin(self._sessions())

    def hold_ray(self, config: RunConfig, *more: RunConfig) -> None:
        """Hold the process's Ray while ``config`` (or one of ``more``) serves on it, else
        let it go (:meth:`release_ray`)."""
        if any(c.serving == "ray" for c in (config, *more)):
            if not self._holds_ray:
                acquire_serving()
                self._holds_ray = True
        else:
            self.release_ray()

    def release_ray(self) -> None:
        """Let the process's Ray go, if this engine holds it: the last holder's release
        shuts Ray down (its processes, a gigabyte), so a run switched off Ray does not
        share the machine with it."""
        if self._holds_ray:
            self._holds_ray = False
            release_serving()

    # -- stopping ------------------------------------------------------------------------

    def stop(self, left: Callable[[], float]) -> None:
        """Stop every device's worker, those a build made included (their build is
        cancelled), each told first, within what ``left()`` says of the engine's one
        deadline; a serving engine's processes get SERVING_STOP_S more."""
        self.others.stop(0.0)  # told: a build under way is cancelled
        if self._worker is not None:
            # a serving engine's backend closes on the worker's thread (one swapped out,
            # on a thread aside the worker waits for): its processes stop
            serving = self.client is not None or self._worker.retiring
            self._worker.stop(left() + (SERVING_STOP_S if serving else 0.0))
        self.others.stop(left())

    def threads_alive(self) -> list[str]:
        """The devices' worker threads still alive, by name."""
        out = ["worker"] if self._worker is not None and self._worker.alive else []
        out.extend(f"worker of device {w.device}" for w in self.others.threads() if w.alive)
        return out
