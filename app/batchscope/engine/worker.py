"""The worker: the one thread that owns the device.

Why one thread: Clockwork's lesson — one job on the device at a time keeps
batch times predictable, and it is how the production worker behaves. It
also builds every backend: on CPU, running torch from a second thread after
the first used it cost 1.7× per batch (see docs/BENCHMARKS.md).

The loop runs, between batches and never mid-batch, the calls handed to it
(:meth:`Worker.call`: build a backend, swap it in, retune the policy), then
asks the policy what to run, takes those windows from the mailboxes, runs
them as one batch and records per-item and per-batch timings (a serving engine's
client takes that turn while the backend is one, chosen at the swap:
engine/serving/dispatch.py). Batching
begins at :meth:`Worker.start`; until then only calls run (the engine builds
its first backend that way).

How it stops: :meth:`Worker.stop` sets the terminate flag *before* waking the
loop; the loop checks it between calls and batches, and a backend build
checks it between its warm-up runs (``cancelled``), so the thread ends within
a batch or a warm-up run; a batch whose device time is a wait (the emulated
device, a slow-device fault's stretch) is cut short (:meth:`Backend.interrupt`)
and not recorded, so a stop never waits out seconds of emulated compute.
Failures never kill it silently: device
out-of-memory halves the batch cap and re-runs the batch in halves; any other
exception is reported as an event naming the stage and the sessions, and the
loop goes on.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from batchscope.engine.accuracy import UNSCORED
from batchscope.engine.backends import (
    Backend,
    BatchInterrupted,
    BatchResult,
    DeviceOutOfMemory,
    sleep_until,
)
from batchscope.engine.metrics import Latest, MetricsStore
from batchscope.engine.policies import BatchPolicy
from batchscope.engine.routing import IDLE
from batchscope.engine.session import Mailboxes, Window

#: Longest the worker sleeps without looking at its calls (s).
POLL_S = 0.05


class WorkerStopped(RuntimeError):
    """A call handed to the worker that will not run: the worker stopped first."""

    def __init__(self) -> None:
        super().__init__("the worker stopped")


class Worker:
    def __init__(
        self,
        mailboxes: Mailboxes,
        store: MetricsStore,
        policy: BatchPolicy,
        event: Callable[[str, str], object],
        clock: Callable[[], float] = time.perf_counter,
        device: int = 0,
    ) -> None:
        self._mailboxes = mailboxes
        # its index in the run's devices: it takes the windows the router placed on it
        # (Mailboxes.route; all of them with one device), and its batches say so
        self.device = device
        self._batch_began = IDLE  # when the batch it runs began (IDLE: none runs)
        self._store = store
        self.policy = policy
        self.backend: Backend | None = None
        self._event = event
        self._clock = clock
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        self._go = threading.Event()
        self._terminate = threading.Event()
        self.paused = False
        self.oom_cap: int | None = None  # set after an out-of-memory, cleared by a new backend
        self.slowdown = 1.0  # every batch's compute takes this × longer (a slow-device fault)
        self.drop_after_s: float | None = None  # discard windows older than this (expired)
        # (window, detection, positions) -> the accuracy.Score of each delivered
        # result, against its source's ground truth (engine/accuracy.py)
        self.scorer: Callable[[Window, Any, bool], tuple] | None = None
        # how late the worker woke from its last wait (s), against when it meant to: the
        # policy's deadline, or the publish that woke it; 0 once a batch ran after it
        self._woke_late = 0.0
        # threads closing backends swapped out (a serving engine's server takes seconds to
        # stop: not on this thread, which goes on running batches)
        self._closers: list[threading.Thread] = []
        # one turn of the loop with a backend in, chosen at each swap (:meth:`_swapped`):
        # the batching loop here
        self._turn: Callable[[], None] = self._step
        self._prepare()
        name = "batchscope-worker" + (f"-{device}" if device else "")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _prepare(self) -> None:
        """A subclass's own state, made before the thread starts (none here)."""

    # -- control (any thread) -------------------------------------------------

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn()`` on the worker thread between batches; its Future has the result."""
        future: Future = Future()
        if self._terminate.is_set():
            future.set_exception(WorkerStopped())
            return future
        self._calls.put((fn, future))
        self._mailboxes.wake()
        return future

    def build_backend(self, factory: Callable[[Callable[[], bool]], Backend]) -> Backend:
        """Build a backend on the worker thread (the old one keeps the device until a swap).

        ``factory(cancelled)`` gets a function that says whether the worker is stopping,
        to check between warm-up runs. Raises what building raised, or WorkerStopped.
        """
        return self._result(self.call(lambda: factory(self._terminate.is_set)))

    def swap_backend(self, backend: Backend, policy: BatchPolicy | None = None) -> None:
        """Make ``backend`` the one that runs batches (from the next batch); close the old one.

        ``policy``: use it from the same instant (one call: no batch runs between the two).
        """

        def swap() -> None:
            if policy is not None:
                self.policy = policy
            old, self.backend = self.backend, backend
            self.oom_cap = None
            self._swapped(old)

        self._result(self.call(swap))

    def _swapped(self, old: Backend | None) -> None:
        """Worker thread, at a swap (the new backend is in): ``old``, the backend swapped
        out (None: the first swap), is closed; the loop stays the batching loop."""
        if old is not None:
            old.close()

    def close_aside(self, backend: Backend) -> None:
        """Close ``backend`` on a thread of its own (:meth:`wait_retired` waits for it)."""
        closer = threading.Thread(target=backend.close, name="batchscope-retire", daemon=True)
        self._closers.append(closer)
        closer.start()

    @property
    def retiring(self) -> bool:
        """Whether a backend swapped out is still closing (a serving engine stopping)."""
        return any(c.is_alive() for c in self._closers)

    def wait_retired(self) -> None:
        """Wait until the backends swapped out are closed (each close has its own limits)."""
        for closer in list(self._closers):
            closer.join()
        self._closers = []

    def discard(self, backend: Backend) -> None:
        """Close a built backend that will not be used: on the thread that built it, or
        here at once if the worker has stopped."""
        future = self.call(backend.close)
        if future.done() and future.exception() is not None:  # the worker is gone
            backend.close()

    def set_policy(self, policy: BatchPolicy) -> None:
        """Use ``policy`` from the next batch on."""
        self._result(self.call(lambda: setattr(self, "policy", policy)))

    def retune(self, fn: Callable[[BatchPolicy], None]) -> None:
        """Run ``fn(policy)`` between batches (a knob change); raises what it raised."""
        self.between_batches(lambda: fn(self.policy))

    def between_batches(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the worker thread between two batches and wait for its result."""
        return self._result(self.call(fn))

    def _result(self, future: Future) -> Any:
        """``future.result()``, or WorkerStopped if the thread ended without running it."""
        while True:
            try:
                return future.result(timeout=POLL_S)
            except TimeoutError:
                if not self._thread.is_alive() and not future.running():
                    raise WorkerStopped() from None

    def start(self) -> None:
        """Begin taking batches (once a backend is in)."""
        self._go.set()
        self._mailboxes.wake()

    def stop(self, timeout: float = 2.0) -> None:
        """End the thread; calls not yet run fail with WorkerStopped."""
        self._terminate.set()
        backend = self.backend
        if backend is not None:
            backend.interrupt()
        self._go.set()
        self._mailboxes.wake()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def free_key(self) -> float:
        """The least-loaded router's tie-break (engine/routing.py): IDLE while no batch
        runs, else when the one running began (the first begun is likely free first)."""
        return self._batch_began

    # -- the loop (worker thread) ---------------------------------------------

    def _run(self) -> None:
        while not self._terminate.is_set():
            try:
                self._run_calls()
                if not self._go.is_set() or self.paused or self.backend is None:
                    self._mailboxes.wait(POLL_S)
                    continue
                self._turn()
            except Exception as exc:  # the loop must survive anything
                self._event("error", f"worker: {type(exc).__name__}: {exc}")
                self._terminate.wait(POLL_S)
        self._fail_calls()
        if self.backend is not None:
            self.backend.close()
        self.wait_retired()

    def _run_calls(self) -> None:
        while not self._terminate.is_set():
            try:
                fn, future = self._calls.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller, who reports it
                future.set_exception(exc)

    def _fail_calls(self) -> None:
        while True:
            try:
                _, future = self._calls.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(WorkerStopped())

    def _step(self) -> None:
        now = self._clock()
        if self.drop_after_s is not None:
            drops = self._mailboxes.expire(now, self.drop_after_s, self.device)
            if drops:
                self._store.record_expired(drops)
        waiting = self._mailboxes.waiting(self.device)
        decision = self.policy.select(waiting, now)
        if not decision.take:
            timeout = (
                POLL_S if decision.wait_until is None else min(POLL_S, decision.wait_until - now)
            )
            if timeout > 0:
                self._wait(now, timeout, decision.wait_until)
            return
        take = decision.take[: self.oom_cap] if self.oom_cap else decision.take
        windows = self._fit(self._mailboxes.take(take))
        if windows:
            self._run_batch(windows, decision.reason)

    def _wait(self, now: float, timeout: float, deadline: float | None) -> None:
        """Sleep until a window is published or ``timeout`` s pass, and measure how late
        the host woke the thread: after the publish that ended the wait, or after the
        policy's ``deadline`` when the wait ran out on it (a poll that ran out has no
        plan to be late for)."""
        cue = self._mailboxes.published_at
        self._mailboxes.wait(timeout)
        woke = self._clock()
        published = self._mailboxes.published_at
        if published > cue:  # a window came in: the thread was due at its arrival
            self._woke_late = max(0.0, woke - max(published, now))
        elif deadline is not None and now + timeout >= deadline:
            self._woke_late = max(0.0, woke - deadline)
        else:
            self._woke_late = 0.0

    def _fit(self, windows: list[Window]) -> list[Window]:
        """Drop windows made for another resolution (in flight across a resolution change)."""
        assert self.backend is not None, "the loop steps only with a backend in"
        w, h = self.backend.resolution
        return [win for win in windows if win.frames[0].shape[:2] == (h, w)]

    def _run_batch(self, windows: Sequence[Window], reason: int = 0) -> None:
        assert self.backend is not None, "the loop steps only with a backend in"
        shape = self.policy.shape  # a fixed shape pads a short batch (to the OOM cap, if any)
        pad = 0 if shape is None else max(0, min(shape, self.oom_cap or shape) - len(windows))
        start = self._batch_began = self._clock()
        try:
            result = self.backend.run(windows, pad)
            if self.slowdown != 1.0:
                result = self._slowed(result)
        except BatchInterrupted:  # stopping: the batch has no honest timings to record
            return
        except DeviceOutOfMemory as exc:
            self._on_oom(windows, exc, reason)
            return
        except Exception as exc:
            sessions = ", ".join(str(w.session) for w in windows)
            self._event(
                "error",
                f"batch of {len(windows)} (sessions {sessions}): {type(exc).__name__}: {exc}",
            )
            self._terminate.wait(POLL_S)
            return
        finally:
            self._batch_began = IDLE
        end = result.post_end
        n = len(windows)
        late, self._woke_late = self._woke_late, 0.0
        records = []
        latest: dict[int, Latest] = {}
        worst = 0.0
        positions = self.backend.draws_detections
        for win, det in zip(windows, result.detections, strict=True):
            scored = UNSCORED if self.scorer is None else self.scorer(win, det, positions)
            times = (win.arrival, start, result.prep_end, result.compute_end, end)
            host = min(late, max(0.0, start - win.arrival))  # inside this window's wait
            device = result.device_late  # inside its compute
            records.append(
                (
                    win.session,
                    n,
                    *times,
                    *scored,
                    host,
                    device,
                    win.publish_late + host + device,
                    self.device,
                )
            )
            lat_ms = (end - win.arrival) * 1000.0
            worst = max(worst, lat_ms)
            # a copy: the tiles (and snapshots kept per segment) must not pin the frame
            # cache, which a resolution change gives back
            frame = win.frames[-1].copy()
            latest[win.session] = Latest(frame, det, win.seq, win.frame_index, lat_ms)
        batch = (
            start,
            n,
            result.prep_end - start,
            result.compute_end - result.prep_end,
            end - result.compute_end,
            end,
            reason,
            self.policy.cap or 0,
            pad,
            late,
            result.device_late,
            self.device,
        )
        self._store.record_batch(records, batch, latest)
        self.policy.observe(n, worst)

    def _slowed(self, result: BatchResult) -> BatchResult:
        """The batch as a device ``slowdown`` × slower would run it: compute stretched."""
        extra = (self.slowdown - 1.0) * (result.compute_end - result.prep_end)
        if not sleep_until(result.post_end + extra, self._terminate):
            raise BatchInterrupted()
        return BatchResult(
            result.detections,
            result.prep_end,
            result.compute_end + extra,
            self._clock(),
            result.device_late,
        )

    def _on_oom(self, windows: Sequence[Window], exc: DeviceOutOfMemory, reason: int) -> None:
        n = len(windows)
        self.oom_cap = max(1, n // 2)
        if n == 1:
            self._event(
                "oom",
                f"{exc}; even one window does not fit: dropped (session {windows[0].session})",
            )
            return
        self._event("oom", f"{exc}; batch cap halved to {self.oom_cap}, re-running in halves")
        part = self.oom_cap  # a part that runs out of memory again halves the cap again
        for i in range(0, n, part):
            self._run_batch(windows[i : i + part], reason)
