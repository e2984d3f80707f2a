"""The worker, and the serving engine's client that runs its loop while its backend is one.

BatchScope's sessions stay as they are on the client's side (the feeder, the latest-only
mailboxes); while the backend is a serving engine's (``ServingBackend``), a
:class:`ServingClient` runs the worker's loop in place of the batching loop: a session
whose last request has been answered sends its newest window at once, so at most one
request per session is in flight and a window that waits meanwhile can be overwritten, as
in a real deployment's clients. The engine (Ray Serve) gathers the requests into batches
by its own rule, which the policy is mapped onto (``ray_serve.batching_of``): the knobs
change live through its setters, never a redeploy.

Each answer carries the batch the engine ran it in; the client records a batch once all
its windows are back, with the same item and batch records as the in-process worker, so
reports, segments and the live views read them unchanged. The stages map onto the
worker's: *wait* is arrival → the engine's batch start (the mailbox, the way to the
replica and its queue), *prep* and *compute* are the replica's, *post* is the replica's
post-processing and the way back. The serving stages apart (:attr:`ServingClient.serving`)
go in the report's ``serving`` object.

With any other backend :class:`ServingWorker` is the in-process
:class:`~batchscope.engine.worker.Worker`, on the same thread: the engine switches live (a
backend swap, between two batches), and a model that ran on this thread before runs on it
again (a thread that takes over torch from another runs it 1.7x slower on a CPU:
docs/BENCHMARKS.md). The loop is chosen at the swap, not at every turn. At a swap the old
engine's answers in flight land (the swap waits for them) and are recorded as its own, and
the old engine stops on a thread aside, this one serving the new meanwhile; on a switch to
another engine the serving figures start again with a new client (the report's ``serving``
object is the engine's that serves at the end, since it took over), while a redeploy on
the same engine (a device change) keeps its client, which carries the engine's batch
counts across.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

from batchscope.engine.accuracy import UNSCORED
from batchscope.engine.backends import Backend
from batchscope.engine.metrics import Latest
from batchscope.engine.policies import SESSION
from batchscope.engine.serving.base import ServingBackend
from batchscope.engine.serving.wire import Served
from batchscope.engine.session import Window
from batchscope.engine.worker import POLL_S, Worker

#: How long a swap waits for the answers in flight from the engine swapped out (s).
RETIRE_WAIT_S = 5.0
#: How long a batch whose answers did not all come back waits for them (s) before it is
#: recorded with those that did.
STALE_S = 2.0
#: The serving stages, in order (ms means in the report's ``serving.stages_ms``); an engine
#: that does not say when a request arrived (Triton) has ``to_engine_and_queue`` in place
#: of ``to_replica`` and ``queue``.
SERVING_STAGES = ("client", "to_replica", "queue", "compute", "back")


@dataclass
class ServingStages:
    """Sums of each serving stage (s) over the answers recorded, and their count."""

    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0

    def add(self, spans: dict[str, float]) -> None:
        for k, v in spans.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1

    def means_ms(self) -> dict[str, float]:
        n = max(1, self.count)
        return {k: round(v / n * 1000.0, 3) for k, v in self.sums.items()}


@dataclass
class Answer:
    window: Window
    sent: float
    received: float
    served: Served  # on the client's clock


class ServingWorker(Worker):
    """The worker; its :attr:`client` runs the loop while its backend is a serving
    engine's, the batching loop runs it otherwise."""

    def _prepare(self) -> None:
        # made before the thread starts (Worker.__init__ starts it); set at each swap, on
        # the worker thread: None while the backend is in-process
        self.client: ServingClient | None = None

    def _swapped(self, old: Backend | None) -> None:
        """Worker thread, at a swap: the loop the new backend needs. A serving engine's
        gets a client of its own, unless the same engine served before (a redeploy: a
        device change), whose client goes on; the client of ``old`` records the answers in
        flight from it and closes it aside, an in-process ``old`` closes here."""
        backend, was = self.backend, self.client
        if not isinstance(backend, ServingBackend):
            self.client = None
        elif was is not None and was.engine == backend.engine:
            was.backend = backend
        else:
            self.client = ServingClient(backend, self)
        self._turn = self._step if self.client is None else self.client.step
        if was is not None:
            assert isinstance(old, ServingBackend), "a client's backend is a serving engine's"
            was.retire(old)
        elif old is not None:
            old.close()


class ServingClient:
    """A client per session of one serving engine, as the loop of its worker's thread.

    It keeps the engine's figures while it serves: the serving stages, the batches the
    engine formed (as recorded, and as the engine counts them) and its replicas; another
    engine gets a new client, so they start again.
    """

    def __init__(self, backend: ServingBackend, worker: ServingWorker) -> None:
        self.backend = backend  # the deployment it sends to (a redeploy: the new one)
        self.engine = backend.engine
        self._worker = worker  # its knobs, read live: policy, scorer, drop_after_s
        self._mailboxes = worker._mailboxes
        self._store = worker._store
        self._event = worker._event
        self._clock = worker._clock
        self._terminate = worker._terminate
        self._fit = worker._fit  # the windows made for the backend's resolution
        self._in_flight: dict[int, Future] = {}
        # (window, sent, received, its future, the backend it went to): answers the loop
        # has yet to record
        self._answers: queue.SimpleQueue[tuple[Window, float, float, Future, Backend]] = (
            queue.SimpleQueue()
        )
        self._batches: dict[tuple[int, int], list[Answer]] = {}
        self._applied: tuple[Any, ...] | None = None  # the knobs the engine holds
        self._counted_at_reset: Counter[int] = Counter()  # the engine's counts then
        # batches the engine formed since the reset in deployments swapped out since (a
        # device change redeploys on the same engine)
        self._counted_before: Counter[int] = Counter()
        self._lock = threading.Lock()  # the figures, read by the engine's readers
        self.serving = ServingStages()
        self.formed: Counter[int] = Counter()  # batch sizes the engine formed, as recorded
        # replica PID -> its device index in the records (in order of its first answer)
        self._pids: dict[int, int] = {}

    def reset(self) -> None:
        """Forget the serving figures (statistics reset): the engine's own batch counts
        are read from here on (``counted_since_reset``)."""
        with self._lock:
            self.serving = ServingStages()
            self.formed = Counter()
        self._counted_at_reset = Counter()
        self._counted_before = Counter()
        backend = self.backend
        try:
            self._counted_at_reset = Counter(backend.counts())
            backend.reset()
        except Exception as exc:
            self._event("error", f"{backend.engine}: its batch counts were not read: {exc}")

    def counted_since_reset(self) -> dict[int, int]:
        """The batches the engine formed since the statistics' start (or since it took
        over), as it counts them."""
        now = self._since_reset(self.backend) + self._counted_before
        return {int(k): v for k, v in now.items() if v > 0}

    def _since_reset(self, backend: ServingBackend) -> Counter[int]:
        now = Counter(backend.counts())
        now.subtract(self._counted_at_reset)
        return +now  # the positive counts

    def serving_figures(self) -> tuple[dict[str, float], dict[int, int]]:
        with self._lock:
            return self.serving.means_ms(), dict(self.formed)

    # -- the loop (worker thread) -----------------------------------------------

    def step(self) -> None:
        """One turn of the worker's loop: record the answers back, hand the engine the
        policy's knobs, and send each session with none in flight its newest window."""
        backend = self.backend
        self._collect(backend)
        self._sync_batching(backend)
        now = self._clock()
        drop_after_s = self._worker.drop_after_s
        if drop_after_s is not None:
            drops = self._mailboxes.expire(now, drop_after_s)
            if drops:
                self._store.record_expired(drops)
        idle = [w[SESSION] for w in self._mailboxes.waiting() if w[SESSION] not in self._in_flight]
        windows = self._fit(self._mailboxes.take(idle)) if idle else []
        for win in windows:
            self._send(backend, win)
        if not windows:
            self._mailboxes.wait(POLL_S)  # a publish or an answer wakes it

    def _send(self, backend: ServingBackend, win: Window) -> None:
        sent = self._clock()
        try:
            future = backend.submit(win)
        except Exception as exc:  # the engine refused it: said, and the session goes on
            self._event("error", f"session {win.session}: request failed: {exc}")
            self._terminate.wait(POLL_S)
            return
        self._in_flight[win.session] = future
        future.add_done_callback(lambda f: self._answered(win, sent, f, backend))

    def _answered(self, win: Window, sent: float, future: Future, backend: Backend) -> None:
        """Any thread: an answer came back; the loop records it."""
        self._answers.put((win, sent, self._clock(), future, backend))
        self._mailboxes.wake()

    def _collect(self, backend: ServingBackend) -> None:
        """Record the answers of ``backend`` that came back (those of a backend swapped
        out before are dropped: its own were recorded at the swap)."""
        while True:
            try:
                win, sent, received, future, came_from = self._answers.get_nowait()
            except queue.Empty:
                break
            if came_from is not backend:
                continue
            self._in_flight.pop(win.session, None)
            try:
                served = backend.on_client_clock(future.result(), sent, received)
            except Exception as exc:  # said once per failed request; the session goes on
                self._event("error", f"session {win.session}: {type(exc).__name__}: {exc}")
                continue
            group = self._batches.setdefault((served.pid, served.batch_id), [])
            group.append(Answer(win, sent, received, served))
            if len(group) == served.batch_size:
                self._record(self._batches.pop((served.pid, served.batch_id)), backend)
        # a batch some of whose answers never come (a request failed): recorded as it is
        now = self._clock()
        for key in [k for k, g in self._batches.items() if now - g[0].received > STALE_S]:
            self._record(self._batches.pop(key), backend)

    def retire(self, old: ServingBackend) -> None:
        """Worker thread, at a swap (the new backend is in): ``old``, the deployment this
        client served, goes. The answers in flight from it land and are recorded as its
        own, then it stops aside (Triton's server 2 s, Ray's app 1 s) while the worker
        serves the new one; what it counted carries into the next deployment (a redeploy
        on the same engine, which this client goes on serving), its replicas do not."""
        # the answers in flight land (each within its batch), then its counts are read (the
        # batches those answers came in count too: read before, one was missed), then the
        # engine stops aside
        wait(list(self._in_flight.values()), timeout=RETIRE_WAIT_S)
        try:
            counted = self._since_reset(old)
        except Exception as exc:  # its server is gone: said, not guessed
            counted = Counter()
            self._event("error", f"{old.engine}: its batch counts were not read: {exc}")
        self._worker.close_aside(old)
        self._collect(old)
        for group in self._batches.values():
            self._record(group, old)
        self._batches.clear()
        self._in_flight.clear()
        self._counted_at_reset = Counter()
        self._counted_before += counted
        with self._lock:  # another deployment: other replicas
            self._pids = {}

    def _record(self, answers: list[Answer], backend: ServingBackend) -> None:
        """One batch the engine formed, with the answers of its windows that came back."""
        first = answers[0].served
        n = first.batch_size  # as the engine formed it, whether or not all came back
        end = max(a.received for a in answers)
        records = []
        latest: dict[int, Latest] = {}
        worst = 0.0
        positions = backend.draws_detections
        scorer = self._worker.scorer
        spans: list[dict[str, float]] = []
        on = self._replica_index(first.pid)
        for a in answers:
            win, sv = a.window, a.served
            scored = UNSCORED if scorer is None else scorer(win, sv.detection, positions)
            times = (win.arrival, sv.start, sv.prep_end, sv.compute_end, a.received)
            device = sv.device_late
            records.append(
                (win.session, n, *times, *scored, 0.0, device, win.publish_late + device, on)
            )
            lat_ms = (a.received - win.arrival) * 1000.0
            worst = max(worst, lat_ms)
            frame = win.frames[-1].copy()  # not the frame cache (see Worker._run_batch)
            latest[win.session] = Latest(frame, sv.detection, win.seq, win.frame_index, lat_ms)
            spans.append(_stages(a, backend.knows_arrival))
        batch = (
            first.start,
            n,
            first.prep_end - first.start,
            first.compute_end - first.prep_end,
            end - first.compute_end,
            end,
            0,  # why it left: the engine's rule, not one of the worker's reasons
            self._applied[0] if self._applied else 0,
            0,  # the engine pads nothing
            0.0,
            first.device_late,
            on,
        )
        self._store.record_batch(records, batch, latest)
        with self._lock:
            for sp in spans:
                self.serving.add(sp)
            self.formed[n] += 1
        self._worker.policy.observe(n, worst)

    def _replica_index(self, pid: int) -> int:
        """The device index of the replica ``pid``: in order of its first answer."""
        with self._lock:
            if pid not in self._pids:
                self._pids[pid] = len(self._pids)
            return self._pids[pid]

    def replica_labels(self) -> list[str]:
        """The replicas that answered since the deployment began, by device index (the
        report's ``devices`` names)."""
        with self._lock:
            pids = sorted(self._pids, key=self._pids.__getitem__)
        return [f"{self.engine} replica (pid {pid})" for pid in pids]

    def _sync_batching(self, backend: ServingBackend) -> None:
        """Hand the policy's knobs to the engine when they changed (a live change, or the
        adaptive cap moved): one call to the replica's setters."""
        want = backend.batching_of(self._worker.policy)
        if want == self._applied:
            return
        try:
            applied = backend.set_batching(want)
        except Exception as exc:
            self._event("error", f"{backend.engine}: the batching knobs were not applied: {exc}")
            self._terminate.wait(POLL_S)
            return
        self._applied = want

        def said(future: Future) -> None:
            if future.exception() is not None:
                self._applied = None  # tried again before the next request
                self._event(
                    "error", f"{backend.engine}: batching {want} not applied: {future.exception()}"
                )
            elif future.result():  # what applying it took (Triton: the reload), said
                self._event("config", str(future.result()))

        applied.add_done_callback(said)

    def report(self) -> dict[str, Any]:
        """The report's ``serving`` object: the engine, its version, the batches it formed
        since the statistics' start (as the engine counted them; ``recorded_batch_sizes``:
        those whose answers the client recorded), the serving stages' means (ms) and the
        engine's own figures (``ServingBackend.report``)."""
        backend = self.backend
        stages, formed = self.serving_figures()
        try:
            counted = {str(k): v for k, v in sorted(self.counted_since_reset().items())}
        except Exception as exc:  # the engine is gone (stopped): the client's count, said so
            counted = {str(k): v for k, v in sorted(formed.items())}
            self._event(
                "error", f"{backend.engine}: its batch counts were not read ({exc}): the client's"
            )
        try:
            own = backend.report()
        except Exception as exc:
            own = {}
            self._event("error", f"{backend.engine}: its figures were not read ({exc})")
        return {
            "engine": backend.engine,
            "version": backend.version,
            "runner": backend.runner,
            "batch_sizes": counted,
            "recorded_batch_sizes": {str(k): v for k, v in sorted(formed.items())},
            "stages_ms": stages,
            **own,
        }


def _stages(answer: Answer, knows_arrival: bool) -> dict[str, float]:
    """One answer's serving stages (s), on the client's clock; an engine that does not say
    when a request arrived has one stage from the send to its batch's start."""
    win, sv = answer.window, answer.served
    span = {"client": answer.sent - win.arrival}
    if knows_arrival:
        span["to_replica"] = max(0.0, sv.arrived - answer.sent)
        span["queue"] = sv.start - sv.arrived
    else:
        span["to_engine_and_queue"] = max(0.0, sv.start - answer.sent)
    span["compute"] = sv.post_end - sv.start
    span["back"] = max(0.0, answer.received - sv.post_end)
    return span
