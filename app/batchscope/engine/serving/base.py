"""What a serving engine's backend is to BatchScope's client (:class:`ServingBackend`).

A serving backend sends one window a request (``submit``: a future of its
:class:`~batchscope.engine.serving.wire.Served`), holds the engine's batching knobs
(``batching_of`` a policy; ``set_batching`` applies them live) and counts the batches the
engine formed as the engine counts them (``counts``). :class:`ServingWorker` drives one
(engine/serving/dispatch.py); Ray Serve's is in ``ray_serve.py``, Triton's in
``triton_backend.py``.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from batchscope.engine.backends.base import Backend, BatchResult
from batchscope.engine.policies import BatchPolicy
from batchscope.engine.serving.wire import Served, boot_id
from batchscope.engine.session import Window

#: How much longer a stop waits for a serving engine's backend to close: the answers in
#: flight, then the engine's processes (Ray's shutdown ~3 s, Triton's SIGTERM 2-4 s).
SERVING_STOP_S = 15.0


class ServingBackend(Backend):
    """The client's side of a serving engine (one model deployed on it)."""

    engine: str  # "ray" | "triton": the report's serving.engine
    version: str  # the engine's version
    runner: str  # what runs a batch there (the emulated curve, or the real model)
    #: Whether a Served's ``arrived`` is when the request reached the engine (Ray's replica
    #: sees it), or only its batch's start (Triton does not hand it to the model): then the
    #: way to the engine and its queue are one stage on the client's side.
    knows_arrival = True
    clock = boot_id()

    @abstractmethod
    def submit(self, window: Window) -> Future:
        """Send one window; the Future has its Served (or the request's exception)."""

    @abstractmethod
    def batching_of(self, policy: BatchPolicy) -> tuple[Any, ...]:
        """The policy's knobs as the engine's batcher holds them (compared, then applied)."""

    @abstractmethod
    def set_batching(self, knobs: tuple[Any, ...]) -> Future:
        """Apply ``knobs`` (from :meth:`batching_of`) live; the Future ends when applied,
        with a line that says what it took (an event), or None."""

    @abstractmethod
    def counts(self) -> dict[int, int]:
        """The batches the engine formed so far, by size, as the engine counts them."""

    def reset(self) -> None:
        """The statistics start again from here (the engine's own figures in ``report``)."""

    def report(self) -> dict[str, Any]:
        """The engine's own figures for the report's ``serving`` object."""
        return {}

    def on_client_clock(self, served: Served, sent: float, received: float) -> Served:
        """``served`` with its engine times on this process's perf_counter clock.

        An engine on this machine shares it (the same boot id: CLOCK_MONOTONIC); one on
        another machine is placed by halving the round trip outside the engine.
        """
        if served.clock == self.clock:
            return served
        outside = (received - sent) - (served.post_end - served.arrived)
        shift = sent + max(0.0, outside) / 2.0 - served.arrived
        return replace(
            served,
            arrived=served.arrived + shift,
            start=served.start + shift,
            prep_end=served.prep_end + shift,
            compute_end=served.compute_end + shift,
            post_end=served.post_end + shift,
            clock=self.clock,
        )

    def run(self, windows: Sequence[Window], pad: int = 0) -> BatchResult:
        """All ``windows`` sent at once and awaited (the engine may split them into batches)."""
        sent = time.perf_counter()
        answers = [f.result() for f in [self.submit(w) for w in windows]]
        received = time.perf_counter()
        served = [self.on_client_clock(s, sent, received) for s in answers]
        return BatchResult(
            [s.detection for s in served],
            max(s.prep_end for s in served),
            max(s.compute_end for s in served),
            received,
        )
