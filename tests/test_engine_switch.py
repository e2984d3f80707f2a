"""Switching the engine live: BatchScope's worker <-> a serving engine, as one live change.

A fake serving engine (in this process, answering each request on a thread of its own after
a few ms) stands for Ray Serve and Triton, whose real switches are tested beside them
(test_ray_backend.py, test_triton_backend.py): the worker becomes the engine's client on
the same thread, and back; the old backend is closed; the report's ``serving`` object is
the engine's that serves, with figures since it took over; a failed start leaves the run as
it was; Ray is held while a run serves on it and let go when it switches off it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.contract import SMALL_EMULATED, wait_for

import fake_serving
from batchscope.config import RunConfig
from batchscope.engine.engine import Engine


def _started(**config: Any) -> Engine:
    engine = Engine(RunConfig(**{**SMALL_EMULATED, "sessions": 3, **config}))
    engine.open()
    engine.start()
    return engine


def _delivered(engine: Engine) -> int:
    return sum(s.delivered for s in engine.snapshot().sessions)


def _flows(engine: Engine, more: int = 20) -> bool:
    """Every session delivers again: ``more`` results past now."""
    now = _delivered(engine)
    return wait_for(lambda: _delivered(engine) > now + more, 30.0)


def test_a_run_switches_from_its_worker_to_an_engine_and_back_on_one_thread(fakes):
    built, holds = fakes
    # a delay longer than a frame's interval (33 ms): every batch the worker forms waits
    # for another session's window, whatever the sessions' phases
    engine = _started(policy="dynamic", max_batch=4, max_delay_ms=40.0)
    try:
        thread = engine.worker._thread
        assert _flows(engine)
        assert "serving" not in engine.report()

        # to the engine: it forms the batches, the report says so
        assert engine.apply(engine.config.with_changes(backend="triton")) is None
        fake = built[0]
        assert engine.backend is fake and engine.config.serving == "triton"
        assert engine.worker.client is not None  # its loop chosen at the swap
        assert wait_for(lambda: fake.sent > 30, 30.0)
        assert _flows(engine)
        serving = engine.report()["serving"]
        assert serving["engine"] == "triton"
        assert fake.knobs == [(4,)]  # the policy's knobs handed to it once
        assert sum(serving["batch_sizes"].values()) >= 30
        assert set(serving["batch_sizes"]) == {"1"}  # as the engine counted them
        segments = engine.segments.all()
        assert segments[-1].changes == {"backend": "triton"}
        assert segments[-1].config.serving == "triton"

        # and back to BatchScope's worker: the engine closed, its answers recorded
        assert engine.apply(engine.config.with_changes(backend="emulated")) is None
        assert fake.closed
        assert engine.config.serving is None
        assert engine.backend.label.startswith("emulated")
        assert engine.worker.client is None  # the batching loop again
        assert _flows(engine)
        assert "serving" not in engine.report()
        # the worker batches again (cap 4), in the segment the switch opened
        assert wait_for(lambda: max(engine.snapshot().batch_sizes, default=0) > 1, 30.0)
        assert max(engine.snapshot().batch_sizes) <= 4
        assert engine.worker._thread is thread  # one thread throughout
        assert holds == []  # Triton is not Ray: nothing held
        errors = [e.message for e in engine.events() if e.kind == "error"]
        assert errors == []
    finally:
        assert engine.stop(5.0) == []


def test_a_second_switch_counts_the_new_engine_from_its_start(fakes):
    built, _ = fakes
    engine = _started(backend="triton")
    try:
        assert wait_for(lambda: built[0].sent > 30, 30.0)
        first = sum(engine.report()["serving"]["batch_sizes"].values())
        client = engine.worker.client
        assert engine.apply(engine.config.with_changes(backend="ray")) is None
        assert engine.worker.client is not client  # another engine: a new client
        assert built[0].closed and engine.backend is built[1]
        serving = engine.report()["serving"]
        assert serving["engine"] == "ray"
        # the new engine's batches only: none of Triton's
        assert sum(serving["batch_sizes"].values()) <= built[1].sent < first + built[1].sent
        assert wait_for(lambda: built[1].sent > 20, 30.0)
        counted = sum(engine.report()["serving"]["batch_sizes"].values())
        assert 20 <= counted <= built[1].sent
    finally:
        assert engine.stop(5.0) == []


def test_a_redeploy_on_the_same_engine_carries_its_batch_counts(fakes, monkeypatch):
    built, _ = fakes
    # each request takes longer than a frame, so requests are in flight at the swap
    monkeypatch.setattr(fake_serving, "COMPUTE_S", 0.05)
    engine = _started(backend="triton")
    try:
        assert wait_for(lambda: built[0].sent > 30, 30.0)
        client = engine.worker.client
        assert engine.apply(engine.config.with_changes(profile="server-24gb")) is None
        assert engine.worker.client is client  # the same engine: its client goes on
        assert built[0].closed and engine.backend is built[1]
        counted = sum(engine.report()["serving"]["batch_sizes"].values())
        assert counted >= sum(built[0].counts().values())  # the first deployment's kept
        # every one of them, those its answers in flight at the swap came in too: carried
        # exactly (read before those landed, one or two were missed, and the report's
        # total fell short when the new deployment had formed none yet)
        assert client._counted_before == Counter(built[0].counts())
    finally:
        assert engine.stop(5.0) == []


def test_an_engine_that_does_not_start_leaves_the_run_as_it_was(fakes):
    _, holds = fakes
    engine = _started()
    try:
        before = engine.backend
        error = engine.apply(engine.config.with_changes(backend="ray", profile="missing-profile"))
        assert error is not None and "did not start" in error
        assert engine.backend is before and engine.config.backend == "emulated"
        assert holds == ["acquire", "release"]  # Ray held for the try, let go after
        assert _flows(engine)
        assert len(engine.segments.all()) == 1
    finally:
        assert engine.stop(5.0) == []


def test_ray_is_held_while_the_run_serves_on_it_and_let_go_when_it_switches_off(fakes):
    _, holds = fakes
    engine = _started()
    try:
        assert engine.apply(engine.config.with_changes(backend="ray")) is None
        assert holds == ["acquire"]
        assert engine.apply(engine.config.with_changes(backend="triton")) is None
        assert holds == ["acquire", "release"]  # Ray shut down once off it, not before
        assert engine.apply(engine.config.with_changes(backend="ray")) is None
        assert holds == ["acquire", "release", "acquire"]
    finally:
        assert engine.stop(5.0) == []
    assert holds == ["acquire", "release", "acquire", "release"]
