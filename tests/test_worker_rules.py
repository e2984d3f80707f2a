"""The live worker's rules on the test's clock (tests/clocked.py): exact instants and
exact values, no wall-clock tolerance, as the simulator checks them. Each rule that a test
on a live engine checked within a busy host's tolerances is checked here; the live tests
keep what is the engine's own (threads, segments, live changes, the report's wiring).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine.backends import Backend, DeviceOutOfMemory, EmulatedBackend
from batchscope.engine.metrics import MetricsStore
from batchscope.engine.neighbours import Neighbours
from batchscope.engine.policies import make_policy
from batchscope.engine.report.body import SessionInfo, report_body
from batchscope.engine.report.live_figures import LiveFigures
from batchscope.engine.rules import (
    ALL_WAITING,
    CAP,
    DEADLINE,
    FIXED_SIZE,
    FULL,
    ONE_AT_A_TIME,
    REASONS,
)
from batchscope.engine.session import Window
from batchscope.engine.worker import Worker
from batchscope.profiles.profile import load_profile
from clocked import ClockedBoxes, ClockedDevice, clock_the_sleeps
from contract import wait_for

T0 = 100.0
#: Three sessions' windows, waiting since before T0: by arrival 1, 2, 0; by id 0, 1, 2;
#: published in neither order (2, 0, 1), so a rule that took them as they came shows.
THREE = [(2, T0 - 0.002), (0, T0 - 0.001), (1, T0 - 0.003)]


@pytest.fixture
def now() -> list[float]:
    """The test's clock (s), which the worker, its mailboxes and its device share."""
    return [T0]


def _run(
    now: list[float],
    config: RunConfig,
    device: Backend,
    arrivals: list[tuple[int, float]],
    until,
    slowdown: float = 1.0,
) -> tuple[MetricsStore, Worker]:
    """Publish ``arrivals`` (session, arrival) for a worker of ``config``'s policy and drop
    limit on the test's clock, running ``device`` (``slowdown`` × slower: a slow-device
    fault); start it, arm the clock, and stop once ``until(store)``. Every window is in
    before the worker looks: its first choice sees them all."""
    boxes, store = ClockedBoxes(now), MetricsStore()
    worker = Worker(boxes, store, make_policy(config), lambda kind, msg: None, clock=lambda: now[0])
    if config.drop_after_ms is not None:
        worker.drop_after_s = config.drop_after_ms / 1000.0
    worker.slowdown = slowdown
    w, h = device.resolution
    frame = np.zeros((h, w, 3), np.uint8)
    try:
        worker.swap_backend(device)
        for session, arrival in arrivals:
            boxes.publish(Window(session, 3, 2, (frame,) * 3, arrival))
        worker.start()
        boxes.armed.set()
        assert wait_for(lambda: until(store))
    finally:
        worker.stop()
    return store, worker


def _delivered(n: int):
    return lambda store: store.items.total == n


def _batches(store: MetricsStore) -> list[tuple[float, tuple[int, ...], int, int]]:
    """Each batch as (start, the sessions it ran in order, reason, padding rows)."""
    items = store.items.view()
    return [
        (float(b["start"]), tuple(items["session"][items["start"] == b["start"]].tolist()),
         int(b["reason"]), int(b["padded"]))
        for b in store.batches.view()
    ]  # fmt: skip


def _overall(config: RunConfig, store: MetricsStore, sessions) -> dict:
    """The report's ``overall`` of the store's records, counted as a live run's report
    counts them (LiveFigures' tally, report_body)."""
    figures = LiveFigures(store, T0)
    figures.update(())
    infos = [SessionInfo(s, "test") for s in sessions]
    return report_body("run", config, infos, figures.run, 1.0)["overall"]


# -- the deadline drop and the deadline ---------------------------------------------------


@pytest.mark.parametrize(("limit_ms", "expired"), [(15.0, [1]), (25.0, [])])
def test_a_window_that_waited_past_the_limit_when_the_device_frees_is_dropped(
    now, limit_ms, expired
):
    """Two windows at 100 s, oldest first, 20 ms a batch: when the first batch ends, the
    second has waited 20 ms, past a 15 ms limit (dropped then, at 100.020 s) and within a
    25 ms one (run then)."""
    config = RunConfig(policy="oldest", drop_after_ms=limit_ms)
    arrivals = [(0, T0), (1, T0)]
    until = lambda s: s.items.total + s.expiries.total == 2  # noqa: E731
    store, _ = _run(now, config, ClockedDevice(now, 0.020), arrivals, until)
    drops = store.expiries.view()
    assert drops["session"].tolist() == expired
    assert drops["t"].tolist() == pytest.approx([T0 + 0.020] * len(expired), abs=1e-9)
    items = store.items.view()
    assert sorted(items["session"].tolist()) == sorted({0, 1} - set(expired))
    assert np.all(items["start"] - items["arrival"] <= limit_ms / 1000.0)
    overall = _overall(config, store, [0, 1])
    assert overall["expired"] == len(expired)  # counted apart, as the report counts it


def test_dynamic_runs_a_short_batch_at_its_oldest_windows_deadline(now):
    """dynamic (max 8, 10 ms): three windows, the oldest at 100 s, never fill the batch;
    it starts at 100.010 s, the oldest's arrival + max_delay, with all three."""
    config = RunConfig(policy="dynamic", max_batch=8, max_delay_ms=10.0)
    arrivals = [(0, T0), (1, T0 + 0.002), (2, T0 + 0.004)]
    until = lambda s: s.batches.total == 1  # noqa: E731
    store, _ = _run(now, config, ClockedDevice(now, 0.005), arrivals, until)
    batch = store.batches.view()[0]
    assert batch["size"] == 3
    assert batch["start"] == pytest.approx(T0 + 0.010, abs=1e-9)


# -- each policy's choice and why its batch left ------------------------------------------


@pytest.mark.parametrize(
    ("changes", "batches"),
    [
        # (start after T0 in ms, the sessions in the batch, why it left, padding rows)
        ({"policy": "oldest"}, [(0, (1,), ONE_AT_A_TIME, 0), (5, (2,), ONE_AT_A_TIME, 0),
                                (10, (0,), ONE_AT_A_TIME, 0)]),
        ({"policy": "round-robin"}, [(0, (0,), ONE_AT_A_TIME, 0), (5, (1,), ONE_AT_A_TIME, 0),
                                     (10, (2,), ONE_AT_A_TIME, 0)]),
        ({"policy": "all"}, [(0, (1, 2, 0), ALL_WAITING, 0)]),
        ({"policy": "all", "max_batch": 2}, [(0, (1, 2), CAP, 0), (5, (0,), ALL_WAITING, 0)]),
        # the third window waits from 99.999 s: its deadline is 100.009 s
        ({"policy": "dynamic", "max_batch": 2, "max_delay_ms": 10.0},
         [(0, (1, 2), FULL, 0), (9, (0,), DEADLINE, 0)]),
        # the oldest waits from 99.997 s: all three go at 100.007 s
        ({"policy": "dynamic", "max_batch": 4, "max_delay_ms": 10.0},
         [(7, (1, 2, 0), DEADLINE, 0)]),
        ({"policy": "fixed", "batch": 2, "max_delay_ms": 10.0},
         [(0, (1, 2), FIXED_SIZE, 0), (9, (0,), DEADLINE, 1)]),
        ({"policy": "fixed", "batch": 4, "max_delay_ms": 10.0}, [(7, (1, 2, 0), DEADLINE, 1)]),
        # its cap starts at 1; the batch (8 ms, within 50) grows it to 2: the other two go
        ({"policy": "adaptive", "slo_ms": 50.0}, [(0, (1,), CAP, 0), (5, (2, 0), ALL_WAITING, 0)]),
    ],
    ids=["oldest", "round-robin", "all", "all-max-2", "dynamic-full-then-deadline",
         "dynamic-deadline", "fixed-full-then-padded", "fixed-padded", "adaptive"],
)  # fmt: skip
def test_each_policy_runs_the_windows_it_chose_when_it_chose_and_records_why(now, changes, batches):
    """Three windows (sessions 0, 1, 2 waiting since 99.999, 99.997, 99.998 s), 5 ms a
    batch: each policy's batches, their instants, reasons and padding are exact, on the
    device, in the records and in the report's counts."""
    config = RunConfig(**changes)
    device = ClockedDevice(now, 0.005)
    store, _ = _run(now, config, device, THREE, _delivered(3))
    ran = _batches(store)
    assert [b[1:] for b in ran] == [b[1:] for b in batches]  # sessions, reason, padding
    assert [t for t, *_ in ran] == pytest.approx([T0 + ms / 1000 for ms, *_ in batches], abs=1e-9)
    assert device.runs == [(len(s), pad) for _, s, _, pad in batches]  # the device ran the rows
    overall = _overall(config, store, [0, 1, 2])
    assert overall["batch_reasons"] == dict(Counter(REASONS[why] for _, _, why, _ in batches))
    assert overall["batch_sizes"] == dict(Counter(str(len(s)) for _, s, _, _ in batches))
    padded = sum(pad for *_, pad in batches)
    assert overall.get("padded", {}).get("windows", 0) == padded


@pytest.mark.parametrize(("policy", "pad"), [("fixed", 2), ("dynamic", 0)])
def test_fixed_pads_a_short_batch_to_its_shape_and_the_report_counts_the_padding(now, policy, pad):
    """Batch 4, 10 ms, two windows at 100 s: at 100.010 s both go, and ``fixed`` has the
    device run 4 rows, 2 of them padding, which the report counts apart (half the rows);
    ``dynamic`` runs the 2 and has no padding to report."""
    knob = "batch" if policy == "fixed" else "max_batch"
    config = RunConfig(policy=policy, max_delay_ms=10.0, **{knob: 4})
    device = ClockedDevice(now, 0.005)
    store, _ = _run(now, config, device, [(0, T0), (1, T0)], _delivered(2))
    assert device.runs == [(2, pad)]
    (batch,) = store.batches.view()
    assert (batch["size"], batch["padded"], batch["reason"]) == (2, pad, DEADLINE)
    assert batch["start"] == pytest.approx(T0 + 0.010, abs=1e-9)
    overall = _overall(config, store, [0, 1])
    assert overall["batch_sizes"] == {"2": 1}  # the padding is never a window
    if pad:
        assert overall["padded"] == {"windows": 2, "share": 0.5}
    else:
        assert "padded" not in overall


# -- adaptive's cap ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slo_ms", "sizes", "cap"), [(100.0, [1, 2, 3], 4), (6.0, [1, 2, 1, 1, 1], 1)]
)
def test_adaptive_grows_its_cap_within_the_objective_and_cuts_it_past_it(now, slo_ms, sizes, cap):
    """Six windows at 100 s, 5 ms a batch: the worker feeds back each batch's worst
    end-to-end latency, 5 ms after the first, 10 after the second, and so on. Within a
    100 ms objective the cap grows by one after each batch it limited (1, 2, 3: then 4);
    with 6 ms it grows once (5 ms) and the 10 ms batch cuts it back to 1 (×0.9 each batch
    past the objective, never below 1)."""
    config = RunConfig(policy="adaptive", slo_ms=slo_ms)
    arrivals = [(s, T0) for s in range(6)]
    store, worker = _run(now, config, ClockedDevice(now, 0.005), arrivals, _delivered(6))
    assert store.batches.view()["size"].tolist() == sizes
    assert worker.policy.cap == cap


# -- the device's time: a slow-device fault, busy neighbours -----------------------------


@pytest.mark.parametrize("factor", [1.0, 4.0])
def test_a_slow_device_fault_stretches_each_batchs_compute_by_its_factor(now, monkeypatch, factor):
    """5 ms of compute a batch, one window at a time: a device ×4 slower computes each for
    20 ms, end to end, and the next starts when it ends."""
    clock_the_sleeps(monkeypatch, now)
    config = RunConfig(policy="oldest")
    store, _ = _run(now, config, ClockedDevice(now, 0.005), THREE, _delivered(3), factor)
    batches = store.batches.view()
    compute = 0.005 * factor
    assert batches["compute_s"].tolist() == pytest.approx([compute] * 3, abs=1e-9)
    assert (batches["end"] - batches["start"]).tolist() == pytest.approx([compute] * 3, abs=1e-9)
    starts = [T0 + k * compute for k in range(3)]  # the next when the last one ends
    assert batches["start"].tolist() == pytest.approx(starts, abs=1e-9)


@pytest.mark.parametrize("count", [0, 2])
def test_an_emulated_batch_beside_busy_neighbours_takes_what_the_model_draws(
    now, monkeypatch, count
):
    """The emulated device (laptop-8gb fp16 256x144: 4.69 ms a window alone) beside two
    busy neighbours: each batch computes for the model's stretch of that time, the draws
    of its seed in turn; with none, for the profile's time."""
    clock_the_sleeps(monkeypatch, now)
    profile = load_profile("laptop-8gb")
    device = EmulatedBackend(profile, "fp16", (256, 144), neighbours=Neighbours(count, 1.0, 7))
    store, _ = _run(now, RunConfig(policy="oldest"), device, THREE, _delivered(3))
    alone_ms = profile.curve("fp16", (256, 144)).ms(1)
    model = Neighbours(count, 1.0, 7)
    drawn = [model.stretch(alone_ms) / 1000.0 for _ in range(3)]
    if count:
        assert min(drawn) > 2 * alone_ms / 1000.0  # the model's two neighbours, not noise
    compute = store.batches.view()["compute_s"].tolist()
    assert compute == pytest.approx(drawn if count else [alone_ms / 1000.0] * 3, abs=1e-9)


class _FitsTwo(ClockedDevice):
    """A device that runs out of memory on a batch of more than two rows."""

    def run(self, windows, pad: int = 0):
        if len(windows) + pad > 2:
            raise DeviceOutOfMemory(len(windows) + pad, "the test's device holds 2 rows")
        return super().run(windows, pad)


@pytest.mark.parametrize("n", [4, 5, 6, 7])
def test_an_out_of_memory_batch_runs_every_window_in_smaller_parts(now, n):
    """``all`` takes n windows at once; the device holds 2: the worker halves its cap and
    re-runs the batch in parts, a part that does not fit in parts again, until every
    window ran once (before, a part that ran out of memory again lost the windows after
    it: 6 windows ran 4, 7 ran 5)."""
    arrivals = [(s, T0) for s in range(n)]
    store, worker = _run(now, RunConfig(policy="all"), _FitsTwo(now, 0.005), arrivals,
                         _delivered(n))  # fmt: skip
    assert sorted(store.items.view()["session"].tolist()) == list(range(n))
    assert store.batches.view()["size"].max() <= 2
    assert worker.oom_cap <= 2
