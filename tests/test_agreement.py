"""The simulator and the live worker tell the same story about the same scenario.

The live side is the real engine (feeder, mailboxes, worker threads) on the emulated
backend, fed by the synthetic source; the simulated side is the discrete-event
simulator on the same profile with the same seed, hence the same session phases, and
the same policy objects. Why they still differ:

- **sleep overshoot**: the emulated device sleeps each batch's profile time and wakes a
  little late (≈ 0.1–0.3 ms per batch here), so the live run serves slightly fewer
  windows per second (mean fps ≈ 0.97× the simulated one under `oldest`);
- **thread wake-up**: the feeder publishes and the worker notices a window a fraction
  of a millisecond late, which now and then changes which window is the oldest;
- **phases and windows**: the live run measures 4 s after a 1 s warm-up, so a
  session's fps carries a counting error of ±1 frame / 4 s.

Starvation under `oldest` amplifies all three: which session loses, and by how much,
hinges on sub-millisecond timing (in the simulator alone, +0.3 ms per batch takes this
scenario's slowest session from 13.1 to 11.8 fps). Over nine identical 4-s live runs
its slowest session ranged from 10.2 to 16.3 fps against the simulator's 13.0, so for
`oldest` the test asks for the same story (a starved session, within 35%) rather than
the 15% that holds for the fair policy and for mean fps.
"""

from __future__ import annotations

import pytest
from benchmarks.agreement import live_and_simulated

from batchscope.config import RunConfig

WARMUP_S = 1.0
LIVE_S = 4.0
POLICIES = ("oldest", "all")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pairs() -> dict[str, tuple[dict, dict]]:
    """policy -> (live report, simulated report) for laptop-8gb fp16 512x288, 4 sessions."""
    base = RunConfig(
        sources=("synthetic",),
        sessions=4,
        policy=POLICIES[0],
        backend="emulated",
        profile="laptop-8gb",
        precision="fp16",
        resolution=(512, 288),
        duration_s=LIVE_S,
        seed=0,
    )
    return live_and_simulated(base, POLICIES, WARMUP_S, LIVE_S)


@pytest.mark.parametrize("policy", POLICIES)
def test_mean_fps_agrees_within_15_percent(pairs, policy: str) -> None:
    live, sim = pairs[policy]
    assert live["overall"]["mean_fps"] == pytest.approx(sim["overall"]["mean_fps"], rel=0.15)


def test_slowest_session_fps_agrees_within_15_percent_under_batch_all(pairs) -> None:
    live, sim = pairs["all"]
    assert live["overall"]["min_fps"] == pytest.approx(sim["overall"]["min_fps"], rel=0.15)


def test_oldest_first_starves_a_session_in_both(pairs) -> None:
    live, sim = pairs["oldest"]
    for report in (live, sim):
        assert report["overall"]["min_fps"] < 0.75 * report["overall"]["mean_fps"]
    assert live["overall"]["min_fps"] == pytest.approx(sim["overall"]["min_fps"], rel=0.35)


@pytest.mark.parametrize("policy", POLICIES)
def test_median_latency_agrees_within_25_percent(pairs, policy: str) -> None:
    live, sim = pairs[policy]
    assert live["overall"]["latency_ms"]["p50"] == pytest.approx(
        sim["overall"]["latency_ms"]["p50"], rel=0.25
    )


def test_both_reports_have_the_same_shape(pairs) -> None:
    for live, sim in pairs.values():
        # segments: a plain simulation is one setting; an experiment's report has them
        # (tests/test_sim_experiment.py compares those with the live engine's)
        # a live run measures its machine (host_probe, host_jitter); a simulation has none
        assert set(sim) == set(live) - {
            "events",
            "segments",
            "host_probe",
            "host_jitter",
            "host_load",
        }
        # `run` adds warmup_s from its --warmup flag; this engine was made without it.
        assert set(sim["config"]) - {"warmup_s"} == set(live["config"])
        # accuracy: the live synthetic scene has ground truth; the simulator has no frames
        assert set(sim["overall"]) == set(live["overall"]) - {"accuracy"}
        assert set(sim["sessions"][0]) == set(live["sessions"][0]) - {"accuracy"}
