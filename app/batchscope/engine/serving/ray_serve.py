"""A real Ray Serve deployment as BatchScope's backend: Ray forms the batches.

:class:`RayCluster` starts a local Ray on loopback (or connects to ``--ray-address``) and
Serve without its HTTP proxy (BatchScope calls the deployment through a handle);
:class:`RayBackend` deploys :class:`~batchscope.engine.serving.replica.BatchScopeReplica`
with the run's config and is the client's side of it: ``submit(window)`` sends one window
and returns a future of its :class:`~batchscope.engine.serving.replica.Served`.

Loopback: Ray binds its node's address, which is the machine's interface unless Ray takes
the node for a single-machine one (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, as on a Mac:
then every Ray server binds 127.0.0.1); the replica's own gRPC server is kept there too
(``replica.keep_on_loopback``). Usage statistics are off. Starting Ray never holds the
GIL for long: no workers are prestarted for our driver, whose registration waited for them
inside C++ (:data:`LOCAL_RAY_ENV`). ``close()`` shuts Ray down; Ray
ties its GCS server and raylet to us, and a reaper child (``reaper.py``) kills, by PID,
what is left of the processes it started when we close or die, even by SIGKILL
(tests/test_ray_backend.py checks both).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from batchscope.config import RunConfig
from batchscope.device.checks import BackendError
from batchscope.engine.policies import BatchPolicy, make_policy
from batchscope.engine.serving.base import ServingBackend
from batchscope.engine.serving.reaper import Reaper, descendants
from batchscope.engine.serving.wire import MAX_BATCH_SIZE
from batchscope.engine.session import Window

APP_PREFIX = "batchscope"
WAITERS = 256  # threads waiting for answers: at most one request in flight per session
CLOSE_WAIT_S = 5.0  # a closing backend waits this long for the answers in flight
#: Calls per replica a broadcast may take before it says which replicas it did not reach
REACH_TRIES = 50
#: Set for every process a local Ray starts (they inherit our environment).
LOCAL_RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",  # no traffic off the machine
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # a single-machine node: binds 127.0.0.1
    # The raylet answers its first driver's registration only once the workers it then
    # prestarts (one per CPU) have registered, and ray.init waits for that answer inside
    # C++ holding the GIL: every thread of ours (the window's too) stood still 0.7-2.5 s
    # on two busy cores, about 30 s on a reporter's. Workers start when Serve needs them.
    "RAY_prestart_worker_first_driver": "0",
}
#: Set whenever Ray is used: a Ray call after its shutdown (a stray thread's) raises rather
#: than starting a new local Ray, unseen, on the interface address.
RAY_ENV = {
    "RAY_ENABLE_AUTO_CONNECT": "0",
    # Serve's clients long-poll its controller; Ray's shutdown of this process waited for
    # the poll in flight (30-60 s by default): a short poll lets a stop end in seconds
    "LISTEN_FOR_CHANGE_REQUEST_TIMEOUT_S_LOWER_BOUND": "1",
    "LISTEN_FOR_CHANGE_REQUEST_TIMEOUT_S_UPPER_BOUND": "2",
}


RAY_MISSING = "Ray Serve is not installed: pip install 'ray[serve]'"
#: How long ``--ray-address`` may take to answer a TCP connect, in s: Ray's own wait for a
#: GCS (``gcs_rpc_server_connect_timeout_s``). Past it Ray itself retries without end.
CONNECT_S = 5.0
#: Ray Client's port when a ``ray://`` address names none
RAY_CLIENT_PORT = 10001
#: The level of Ray's (and Serve's) loggers in this process: their WARNING and INFO lines
#: (the SIGTERM handler, token auth, "Started Serve", "Application ... is ready") are Ray's
#: bookkeeping, said around BatchScope's own lines and report; its errors still show.
RAY_LOG_LEVEL = logging.ERROR


def ray_available() -> str | None:
    """None when Ray Serve can be imported, else why not (one line)."""
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as exc:
        return f"{RAY_MISSING} ({exc.name})"
    return None


def batching_of(policy: BatchPolicy) -> tuple[int, float]:
    """The policy as Ray's batcher can hold it: (max_batch_size, batch_wait_timeout_s).

    Its cap (``policy.cap``) and, for ``dynamic`` and ``fixed``, its delay: ``oldest`` and
    ``round-robin`` take one window at a time (batch 1); ``all`` gets its cap (none: more
    than the sessions, each with one request in flight) and no wait — but Ray forms a batch
    from what has arrived, then queues it for the device, so under load its batches stay
    near 1 (docs/FINDINGS.md "The serving tax"); ``dynamic`` is Ray's own rule (go at the
    cap or after the wait); ``fixed`` waits for its batch or the delay as Ray's batcher
    does, but Ray never pads a short batch (BatchScope's worker does); ``adaptive``'s cap
    moves live (the client observes the batch latencies, the AIMD rule sets the cap in the
    replica).
    """
    wait_ms = getattr(policy, "max_delay_ms", 0.0)  # the policies that wait have the knob
    return policy.cap or MAX_BATCH_SIZE, wait_ms / 1000.0


def _single_machine_node() -> None:
    """Make this process's Ray take its node for a single-machine one (node address
    127.0.0.1) even when Ray was imported before LOCAL_RAY_ENV was set: Ray reads the
    variable once, at import, into ``ray_constants.ENABLE_RAY_CLUSTER``. Its children read
    the variable itself (tests/test_ray_backend.py checks every listener)."""
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False


def _ray_env_read_late() -> None:
    """RAY_ENV for a Ray imported before it was set (it reads it once, at import)."""
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private import auto_init_hook

        auto_init_hook.enable_auto_connect = False
    with contextlib.suppress(ImportError, AttributeError):
        from ray.serve._private import long_poll

        long_poll.LISTEN_FOR_CHANGE_REQUEST_TIMEOUT_S = (
            float(RAY_ENV["LISTEN_FOR_CHANGE_REQUEST_TIMEOUT_S_LOWER_BOUND"]),
            float(RAY_ENV["LISTEN_FOR_CHANGE_REQUEST_TIMEOUT_S_UPPER_BOUND"]),
        )


def _quiet_ray() -> None:
    """Keep Ray's own lines off the terminal: Serve's logger (configured at its import, at
    INFO, with its own handler) to :data:`RAY_LOG_LEVEL`, and the driver's printing of the
    errors the cluster publishes (``(raylet) Task ServeController.listen_for_change
    failed ...`` when Serve shuts down under its own long poll): Ray prints those through
    the switch its debugger uses to silence worker output. What fails for BatchScope still
    raises where it is called, and is said in one line."""
    logging.getLogger("ray.serve").setLevel(RAY_LOG_LEVEL)
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private import worker

        worker._worker_logs_enabled = False


def _one_line(exc: Exception) -> str:
    """What Ray raised, in one line: its first (Ray's own can be a page: the last lines of
    its logs, a traceback; they stay in /tmp/ray/session_latest/logs)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _dialled(address: str) -> tuple[str, int]:
    """The (host, port) that Ray dials for ``address``: a ``ray://`` address's own (Ray
    Client), else the GCS address as Ray resolves it (``auto`` found on this machine, and
    127.0.0.1 or localhost swapped for the machine's interface address, as Ray does unless
    it runs a single-machine node). Raises what Ray raises for an address it cannot
    read."""
    if address.startswith("ray://"):
        hostport = address.removeprefix("ray://").split("/", 1)[0]
        if ":" not in hostport or hostport.endswith("]"):  # no port: Ray Client's
            return hostport.strip("[]"), RAY_CLIENT_PORT
        host, _, port = hostport.rpartition(":")
    else:
        from ray._private.services import canonicalize_bootstrap_address_or_die

        host, _, port = canonicalize_bootstrap_address_or_die(address).rpartition(":")
    return host.strip("[]"), int(port)


def check_answers(address: str, timeout: float = CONNECT_S) -> None:
    """Refuse ``--ray-address`` when nothing answers there: a TCP connect to the port Ray
    would dial, within ``timeout`` s. Ray's own connect retries a dead address without end
    (its warnings every few seconds); this says so in one line. It checks that something
    listens, not that it is Ray: a port that answers is left to Ray's connect."""
    try:
        host, port = _dialled(address)
    except Exception as exc:
        raise BackendError(f"--ray-address {address}: {type(exc).__name__}: {exc}") from None
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return
    except TimeoutError:
        why = f"no answer within {timeout:g} s"
    except OSError as exc:
        why = (exc.strerror or type(exc).__name__).lower()
    dialled = f"{host}:{port}"
    if dialled != address.removeprefix("ray://").split("/", 1)[0]:
        why = f"Ray dials {dialled}: {why}"  # the address Ray swapped in, or found
    raise BackendError(f"--ray-address {address}: nothing answers there ({why})")


def _ray_processes() -> set[int]:
    """The processes this process's Ray started (its GCS server, raylet, monitors: Ray's
    own list of them) and everything below them (agents, workers, replicas)."""
    roots: set[int] = set()
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private import worker

        node = worker._global_node
        assert node is not None, "called with Ray running"
        for infos in node.all_processes.values():
            roots.update(info.process.pid for info in infos if info.process is not None)
    return roots | descendants(*roots)


#: ``--device cuda`` (no index) on Ray: each replica asks Ray for one GPU of its own and
#: runs on the one Ray gives it (Ray sets the replica's CUDA_VISIBLE_DEVICES, so ``cuda``
#: is that GPU); ``cuda:N`` names one device that every replica shares
OWN_GPU = "cuda"


def replica_actor_options(config: RunConfig) -> dict[str, float]:
    """The Ray resources each replica asks for: no CPU (the emulated curve sleeps; a
    replica must fit beside others on a small machine), and one GPU each when the real
    model runs on ``cuda`` (:data:`OWN_GPU`)."""
    options: dict[str, float] = {"num_cpus": 0}
    if config.runner == "torch" and config.device == OWN_GPU:
        options["num_gpus"] = 1
    return options


def check_gpus(config: RunConfig, gpus: float) -> None:
    """Refuse before deploying what the cluster cannot place: Ray would wait for GPUs
    that are not there (``gpus``: the cluster's)."""
    want = replica_actor_options(config).get("num_gpus", 0) * config.devices
    if want <= gpus:
        return
    asks = f"--device {OWN_GPU} asks one GPU for each of the {config.devices} replica(s)"
    if gpus < 1:
        raise BackendError(
            f"the Ray cluster has no GPU: {asks}; serve on a cluster with GPUs "
            "(--ray-address) or run the model on --device cpu"
        )
    raise BackendError(
        f"the Ray cluster has {gpus:g} GPUs: {asks}; give --devices {int(gpus)} or fewer, "
        "a cluster with more (--ray-address), or --device cuda:N for replicas sharing one"
    )


def _deploy_error(app: str, exc: Exception) -> str:
    """Why a deployment failed, in one line: the replica's own error where Serve has it
    (the last line of its traceback), else the exception."""
    with contextlib.suppress(Exception):
        from ray import serve

        for status in serve.status().applications[app].deployments.values():
            lines = [line for line in (status.message or "").splitlines() if line.strip()]
            if lines:
                return lines[-1].strip()
    return f"{type(exc).__name__}: {exc}"


class RayCluster:
    """A Ray runtime and Serve: started here on loopback, or an existing cluster's."""

    def __init__(self, address: str | None, progress: Callable[[str], None]) -> None:
        self.address = address
        self.started_here = address is None
        self.closed = False
        self.reaper: Reaper | None = None
        self._lock = threading.Lock()
        self._apps = 0
        # Ray ties the processes it starts to the *thread* that started them (the kernel's
        # parent-death signal): started from the worker thread that builds backends, its
        # raylet and GCS were killed when a stop ended that thread, mid-shutdown. One
        # thread of its own starts Ray, lives as long as it, and shuts it down.
        self._close = threading.Event()
        self._closed = threading.Event()
        started: Future = Future()
        self._owner = threading.Thread(
            target=self._own, args=(started, progress), name="batchscope-ray", daemon=True
        )
        self._owner.start()
        started.result()  # what starting raised (BackendError), here

    def _own(self, started: Future, progress: Callable[[str], None]) -> None:
        try:
            self._start(progress)
        except BaseException as exc:
            started.set_exception(exc)
            self._closed.set()
            return
        started.set_result(None)
        self._close.wait()
        try:
            self._shutdown()
        finally:
            self._closed.set()

    def _start(self, progress: Callable[[str], None]) -> None:
        os.environ.update(RAY_ENV)  # before Ray reads them at its import, for its children too
        if self.started_here:
            os.environ.update(LOCAL_RAY_ENV)
        why = ray_available()
        if why:
            raise BackendError(why)
        import ray
        from ray import serve

        self.version = ray.__version__
        _ray_env_read_late()
        t0 = time.monotonic()
        if self.started_here:
            _single_machine_node()
            progress("starting a local Ray on loopback…")
            try:
                ray.init(
                    num_cpus=os.cpu_count() or 1,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=RAY_LOG_LEVEL,
                )
            except Exception as exc:
                raise BackendError(f"Ray did not start: {_one_line(exc)}") from None
        else:
            progress(f"connecting to the Ray cluster at {self.address}…")
            assert self.address is not None
            check_answers(self.address)
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=RAY_LOG_LEVEL)
            except Exception as exc:
                raise BackendError(
                    f"--ray-address {self.address}: cannot connect ({_one_line(exc)})"
                ) from None
        self.ray_s = time.monotonic() - t0
        _quiet_ray()
        self.reaper = Reaper() if self.started_here else None
        self.watch()
        progress("starting Ray Serve…")
        t0 = time.monotonic()
        serve.start(proxy_location="Disabled")
        self.serve_s = time.monotonic() - t0
        self.watch()

    def watch(self) -> None:
        """Hand the processes our Ray runs now to the reaper (a local Ray only)."""
        if self.reaper is not None:
            self.reaper.watch(_ray_processes())

    def next_app(self) -> str:
        with self._lock:
            self._apps += 1
            return f"{APP_PREFIX}-{os.getpid()}-{self._apps}"

    def close(self, timeout: float = 30.0) -> None:
        """Shut down the Ray we started (Serve with it), or leave the cluster we joined; on
        the thread that started it. Returns when done, or after ``timeout`` s."""
        self.closed = True
        self._close.set()
        self._closed.wait(timeout)

    def _shutdown(self) -> None:
        import ray

        if self.started_here:
            from ray import serve

            t0 = time.monotonic()
            serve.shutdown()
            ray.shutdown()
            self.shutdown_s = time.monotonic() - t0
            if self.reaper is not None:
                self.reaper.close()  # what did not end with Ray's shutdown
        else:
            ray.shutdown()  # disconnect; the cluster and other users' apps stay


_cluster: RayCluster | None = None
_cluster_lock = threading.Lock()


def cluster_for(address: str | None, progress: Callable[[str], None]) -> RayCluster:
    """The process's Ray (Ray is one per process): the one running if it is at
    ``address``, else a new one (the other shut down first)."""
    global _cluster
    with _cluster_lock:
        if _cluster is not None and _cluster.address != address:
            _cluster.close()
            _cluster = None
        if _cluster is None:
            _cluster = RayCluster(address, progress)
            atexit.register(shutdown_cluster)  # a caller that never released it
        return _cluster


def shutdown_cluster() -> None:
    """Stop the Ray this process started (or leave the cluster it joined); idempotent."""
    global _cluster
    with _cluster_lock:
        if _cluster is not None:
            _cluster.close()
            _cluster = None


_users = 0  # engines that serve on the process's Ray


def acquire_serving() -> None:
    """An engine will serve on the process's Ray: it stays up until the last one releases."""
    global _users
    with _cluster_lock:
        _users += 1


def release_serving() -> None:
    """An engine is done with the process's Ray; the last one out shuts it down (once
    down, any call into Ray would make Ray end this process: nothing may use it after)."""
    global _users
    with _cluster_lock:
        _users = max(0, _users - 1)
        last = _users == 0
    if last:
        shutdown_cluster()


class RayBackend(ServingBackend):
    """The client's side of one BatchScope deployment on Ray Serve."""

    engine = "ray"
    draws_detections = False

    def __init__(
        self, config: RunConfig, cluster: RayCluster, progress: Callable[[str], None]
    ) -> None:
        from ray import serve

        from batchscope.engine.serving.replica import BatchScopeReplica

        self.cluster = cluster
        self.config = config
        self.resolution = config.resolution
        self.weights = "emulated" if config.runner == "emulated" else "model"
        self.max_batch_size, self.wait_s = batching_of(make_policy(config))
        self.app = cluster.next_app()
        progress("deploying BatchScope's replica on Ray Serve…")
        t0 = time.monotonic()
        import ray

        check_gpus(config, float(ray.cluster_resources().get("GPU", 0)))
        try:
            deployment = BatchScopeReplica.options(  # type: ignore[attr-defined]
                num_replicas=config.devices, ray_actor_options=replica_actor_options(config)
            )
            self._handle = serve.run(
                deployment.bind(config, self.max_batch_size, self.wait_s, cluster.started_here),
                name=self.app,
                route_prefix=None,
            )
            stats = self._handle.stats.remote().result()
            self.replica_pids = self._every_replica(self._handle.stats, config.devices)
        except Exception as exc:
            why = _deploy_error(self.app, exc)
            with contextlib.suppress(Exception):
                serve.delete(self.app, _blocking=False)
            raise BackendError(f"the Ray Serve deployment failed: {why}") from None
        self.deploy_s = time.monotonic() - t0
        cluster.watch()  # the replica's process too
        self.runner = str(stats["runner"])
        self.replica_pid = int(stats["pid"])
        self.label = f"Ray Serve {cluster.version}: {self.runner}"
        self.version = cluster.version
        self.draws_detections = config.runner == "torch"
        self._waiters = ThreadPoolExecutor(WAITERS, thread_name_prefix="batchscope-ray-request")
        self._flight_lock = threading.Lock()
        self._in_flight: set[Future] = set()
        self._closing = False

    # -- the serving side ------------------------------------------------------

    def submit(self, window: Window) -> Future:
        """Send one window; the Future has its Served (or the request's exception).

        A thread of a pool waits for each answer (at most one per session is in flight).
        """
        with self._flight_lock:
            if self._closing:
                raise BackendError("the Ray Serve deployment is closing")
            response = self._handle.remote(window)
            future = self._waiters.submit(response.result)
            self._in_flight.add(future)
        future.add_done_callback(self._landed)
        return future

    def _landed(self, future: Future) -> None:
        with self._flight_lock:
            self._in_flight.discard(future)

    def batching_of(self, policy: BatchPolicy) -> tuple[int, float]:
        return batching_of(policy)

    def _every_replica(self, method: Any, replicas: int, *args: Any) -> dict[int, Any]:
        """Call a replica method until each of the ``replicas`` replicas answered: PID ->
        its answer (the PID is the answer's, or its ``pid``).

        Ray Serve routes each call to one replica (two drawn at random, the less busy one
        taken) and a handle has no call to all of them (a ``user_config`` change would, but
        from Python it redeploys every replica), so the calls are repeated until every
        replica has been reached; at most :data:`REACH_TRIES` calls a replica."""
        answers: dict[int, Any] = {}
        for _ in range(REACH_TRIES * replicas):
            answer = method.remote(*args).result()
            pid = answer if isinstance(answer, int) else int(answer["pid"])
            answers[pid] = answer
            if len(answers) == replicas:
                return answers
        raise BackendError(
            f"only {len(answers)} of {replicas} Ray Serve replicas answered in "
            f"{REACH_TRIES * replicas} calls"
        )

    def set_batching(self, knobs: tuple[Any, ...]) -> Future:
        """Ray's batcher knobs ``(max_batch_size, wait_s)``, live in every replica from its
        next batch (its setters: the same replicas, no redeploy; nothing to say)."""
        max_batch_size, wait_s = knobs
        self.max_batch_size, self.wait_s = max_batch_size, wait_s
        replicas = len(self.replica_pids)

        def applied() -> None:  # raises what a replica raised
            self._every_replica(self._handle.set_batching, replicas, max_batch_size, wait_s)

        return self._waiters.submit(applied)

    def stats(self) -> dict[str, Any]:
        """The replicas' own counts of the batches they formed, summed (and the runner, the
        first replica's PID, each replica's counts by PID)."""
        each = self._every_replica(self._handle.stats, len(self.replica_pids))
        total: Counter[int] = Counter()
        for answer in each.values():
            total.update({int(k): int(v) for k, v in answer["batch_sizes"].items()})
        first = next(iter(each.values()))
        return {
            **first,
            "batch_sizes": dict(total),
            "replicas": {pid: a["batch_sizes"] for pid, a in each.items()},
        }

    def counts(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in self.stats()["batch_sizes"].items()}

    def report(self) -> dict[str, Any]:
        return {
            "replicas": len(self.replica_pids),
            "replica_pids": sorted(self.replica_pids),
            "replica_pid": self.replica_pid,
            "start_s": {
                "ray": round(self.cluster.ray_s, 2),
                "serve": round(self.cluster.serve_s, 2),
                "deploy": round(self.deploy_s, 2),
            },
            "cluster": self.cluster.address or "local (loopback)",
        }

    def close(self) -> None:
        """Let the requests in flight end (each within its batch), stop the handle's router,
        then remove the application and wait for its replica to stop.

        In this order: a request still in flight when its replica goes is retried by the
        router without end, and a router left running past Ray's shutdown finds no GCS, on
        which Ray ends the whole process.
        """
        from ray import serve

        with self._flight_lock:
            self._closing = True
            pending = list(self._in_flight)
        _, not_done = wait(pending, timeout=CLOSE_WAIT_S)
        for future in not_done:
            future.cancel()
        self._waiters.shutdown(wait=False, cancel_futures=True)
        if self.cluster.closed:  # its app went with it (and Ray is not to be called now)
            return
        with contextlib.suppress(Exception):
            self._handle.shutdown()
        with contextlib.suppress(Exception):  # the cluster may be gone already (stopping)
            serve.delete(self.app, _blocking=True)


def ray_backend(config: RunConfig, progress: Callable[[str], None]) -> RayBackend:
    """A deployment of ``config`` on the process's Ray (``--backend ray``)."""
    return RayBackend(config, cluster_for(config.ray_address, progress), progress)
