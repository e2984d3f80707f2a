"""The worker: the one thread that owns the device.

Why one thread: Clockwork's lesson — one job on the device at a time keeps
batch times predictable, and it is how the production worker behaves. The
loop asks the policy what to run, takes those windows from the mailboxes,
runs them as one batch on the backend, and records per-item and per-batch
timings. Config changes (policy, backend) are handed in as small messages
and applied between batches, never mid-batch.

Failures never kill the thread silently: device out-of-memory halves the
batch cap and re-runs the batch in halves; any other exception is recorded
as an event naming the stage and the sessions, and the loop goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from batchscope.engine.backends import Backend, DeviceOutOfMemory
from batchscope.engine.metrics import Latest, MetricsStore
from batchscope.engine.policies import BatchPolicy
from batchscope.engine.session import Mailboxes, Window

#: Longest the worker sleeps without looking at its messages (s).
POLL_S = 0.05


class Worker:
    def __init__(
        self,
        mailboxes: Mailboxes,
        store: MetricsStore,
        policy: BatchPolicy,
        factory: Callable[[], Backend],
        event: Callable[[str, str], None],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._mailboxes = mailboxes
        self._store = store
        self.policy = policy
        self._factory = factory
        self.backend: Backend | None = None
        self.open_error: Exception | None = None
        self._built = threading.Event()
        self._go = threading.Event()
        self._event = event
        self._clock = clock
        self._lock = threading.Lock()
        self._pending_policy: BatchPolicy | None = None
        self._pending_backend: (
            tuple[Callable[[], Backend], Callable[[Exception | None], None]] | None
        )
        self._pending_backend = None
        self._terminate = False
        self.paused = False
        self.oom_cap: int | None = None  # set after an out-of-memory, cleared by a new backend
        self.busy_building = False
        self._thread = threading.Thread(target=self._run, name="batchscope-worker", daemon=True)

    # -- control (any thread) -------------------------------------------------

    def open(self, timeout: float = 600.0) -> Backend:
        """Start the thread and let it build the backend; raise what building raised."""
        self._thread.start()
        if not self._built.wait(timeout):
            self.stop()
            raise TimeoutError(f"building the backend took more than {timeout:g} s")
        if self.open_error is not None:
            self._thread.join(1.0)
            raise self.open_error
        return self.backend

    def start(self) -> None:
        """Begin taking batches (after ``open``)."""
        self._go.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._terminate = True
        self._go.set()
        self._mailboxes.wake()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def set_policy(self, policy: BatchPolicy) -> None:
        with self._lock:
            self._pending_policy = policy
        self._mailboxes.wake()

    def set_backend(
        self, factory: Callable[[], Backend], done: Callable[[Exception | None], None]
    ) -> None:
        """Build a new backend on the worker thread between batches; ``done(error)`` after."""
        with self._lock:
            self._pending_backend = (factory, done)
        self._mailboxes.wake()

    # -- the loop (worker thread) ---------------------------------------------

    def _run(self) -> None:
        try:
            self.backend = self._factory()
        except Exception as exc:  # handed to open(), which raises it on the caller's thread
            self.open_error = exc
            self._built.set()
            return
        self._built.set()
        self._go.wait()
        while not self._terminate:
            try:
                self._apply_messages()
                if self.paused:
                    self._mailboxes.wait(POLL_S)
                    continue
                self._step()
            except Exception as exc:  # the loop must survive anything
                self._event("error", f"worker: {type(exc).__name__}: {exc}")
                time.sleep(POLL_S)
        self.backend.close()

    def _apply_messages(self) -> None:
        with self._lock:
            policy, self._pending_policy = self._pending_policy, None
            pending, self._pending_backend = self._pending_backend, None
        if policy is not None:
            self.policy = policy
        if pending is not None:
            factory, done = pending
            self.busy_building = True
            try:
                new = factory()
            except Exception as exc:
                done(exc)
            else:
                self.backend.close()
                self.backend = new
                self.oom_cap = None
                done(None)
            finally:
                self.busy_building = False

    def _step(self) -> None:
        waiting = self._mailboxes.waiting()
        now = self._clock()
        decision = self.policy.select(waiting, now)
        if not decision.take:
            timeout = (
                POLL_S if decision.wait_until is None else min(POLL_S, decision.wait_until - now)
            )
            if timeout > 0:
                self._mailboxes.wait(timeout)
            return
        take = decision.take[: self.oom_cap] if self.oom_cap else decision.take
        windows = self._fit(self._mailboxes.take(take))
        if windows:
            self._run_batch(windows)

    def _fit(self, windows: list[Window]) -> list[Window]:
        """Drop windows made for another resolution (in flight across a resolution change)."""
        w, h = self.backend.resolution
        return [win for win in windows if win.frames[0].shape[:2] == (h, w)]

    def _run_batch(self, windows: Sequence[Window]) -> None:
        start = self._clock()
        try:
            result = self.backend.run(windows)
        except DeviceOutOfMemory as exc:
            self._on_oom(windows, exc)
            return
        except Exception as exc:
            sessions = ", ".join(str(w.session) for w in windows)
            self._event(
                "error",
                f"batch of {len(windows)} (sessions {sessions}): {type(exc).__name__}: {exc}",
            )
            time.sleep(POLL_S)
            return
        end = result.post_end
        n = len(windows)
        records = []
        latest: dict[int, Latest] = {}
        worst = 0.0
        for win, det in zip(windows, result.detections, strict=True):
            records.append(
                (win.session, n, win.arrival, start, result.prep_end, result.compute_end, end)
            )
            lat_ms = (end - win.arrival) * 1000.0
            worst = max(worst, lat_ms)
            latest[win.session] = Latest(win.frames[-1], det, win.seq, win.frame_index, lat_ms)
        batch = (
            start,
            n,
            result.prep_end - start,
            result.compute_end - result.prep_end,
            end - result.compute_end,
            end,
        )
        self._store.record_batch(records, batch, latest)
        self.policy.observe(n, worst)

    def _on_oom(self, windows: Sequence[Window], exc: DeviceOutOfMemory) -> None:
        n = len(windows)
        self.oom_cap = max(1, n // 2)
        if n == 1:
            self._event(
                "oom",
                f"{exc}; even one window does not fit: dropped (session {windows[0].session})",
            )
            return
        self._event("oom", f"{exc}; batch cap halved to {self.oom_cap}, re-running in halves")
        for i in range(0, n, self.oom_cap):
            self._run_batch(windows[i : i + self.oom_cap])

    def describe(self) -> dict[str, Any]:
        return {
            "policy": self.policy.describe(),
            "oom_cap": self.oom_cap,
            "building": self.busy_building,
        }
