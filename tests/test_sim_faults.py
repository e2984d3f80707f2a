"""Faults in the simulator: each kind plays with the live engine's semantics.

Every experiment here runs on the emulated laptop GPU at 256×144 fp16 (4.69 ms
for one window), 3 sessions at 30 fps, with one fault from 3 s to 7 s, so the
fault's segment is measured over [4 s, 7 s] and the one after it over [8 s,
10 s] (each leaves out its first, settling second). Where a count is allowed
±1 or ±2 it is the frame grid against the interval's edges: a session's frames
fall at its own phase inside the frame interval, so a 3 s interval holds 89 to
91 of them, and a window published at the edge may be delivered on either side.

The segment lists (changes and captions) are built by hand from the live rules
(``Engine.inject`` and the player): a fault opens a segment when it starts
(``{"fault": …}``, the step's caption or the fault's description) and another
when it ends (``{}``, ``"after: "`` + description); a step with only faults has
no segment of its own. The slow test plays one experiment live and compares.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine.report.phrases import fault_phrase
from batchscope.engine.session import first_frame_delay
from batchscope.experiment import Experiment, Fault, load_experiment, parse_experiment
from batchscope.profiles.profile import load_profile
from batchscope.sim.simulated_experiment import simulate_experiment
from batchscope.sim.simulator import ProfileCurves, Trace, play
from contract import played_live
from simulated import session_phases

LAPTOP = load_profile("laptop-8gb")
B1_MS = LAPTOP.curve("fp16", (256, 144)).ms(1)  # 4.69 ms
FPS = 30.0
SEED = RunConfig().seed
CAPTION = "3 sessions on the laptop GPU at 256×144."


def experiment(policy: str, at_3: str, duration: float = 10, steps: str = "") -> Experiment:
    """3 sessions under ``policy`` from 0 s, the step ``at_3`` at 3 s, then ``steps``."""
    return parse_experiment(
        f"""
name = "faults"
caption = "{CAPTION}"
duration = {duration}
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
sources = ["synthetic"]
fps = {FPS:g}
max_batch = "none"
[[step]]
at = 0
sessions = 3
policy = "{policy}"
[[step]]
at = 3
{at_3}
{steps}
""",
        "faults.toml",
    )


def trace_of(exp: Experiment) -> Trace:
    return play(exp, ProfileCurves(None, exp.base), warmup_s=0.0)


def labels(report: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    return [(s["changes"], s["caption"]) for s in report["segments"]]


def by_id(segment: dict[str, Any], key: str) -> dict[int, Any]:
    return {s["id"]: s[key] for s in segment["sessions"]}


def arrivals(trace: Trace, sid: int) -> np.ndarray:
    """Every window ``sid`` published that the trace recorded (delivered or overwritten)."""
    items = trace.items["arrival"][trace.items["session"] == sid]
    over = trace.overwrites["t"][trace.overwrites["session"] == sid]
    return np.sort(np.concatenate([items, over]))


STALL = Fault("stall", 4.0, session=0)
BURST = Fault("burst", 4.0, session=1, factor=3.0)
SLOW = Fault("slow_device", 4.0, factor=4.0)
SOURCE_ERROR = Fault("source_error", 4.0, session=2)
#: kind -> (policy, the step's line, the fault it parses into)
KINDS = {
    "stall": ("all", "stall = {session = 0, for_s = 4}", STALL),
    "burst": ("all", "burst = {session = 1, factor = 3, for_s = 4}", BURST),
    "slow_device": ("oldest", "slow_device = {factor = 4, for_s = 4}", SLOW),
    "source_error": ("all", "source_error = {session = 2, for_s = 4}", SOURCE_ERROR),
}


def opening(policy: str) -> dict[str, Any]:
    """The first segment's changes: what step 0 sets that the base lacks ("all" is the default)."""
    return {"sessions": 3} if policy == RunConfig().policy else {"sessions": 3, "policy": policy}


def expected(policy: str, fault: Fault, caption: str = "") -> list[tuple[dict[str, Any], str]]:
    """The live segment list of a KINDS experiment, by Engine.inject's rules."""
    return [
        (opening(policy), CAPTION),
        ({"fault": fault.as_json()}, caption or fault_phrase(fault)),
        ({}, f"after: {fault_phrase(fault)}"),
    ]


@pytest.fixture(scope="module")
def played() -> dict[str, tuple[dict[str, Any], Trace]]:
    """kind -> (simulated report, trace) of its KINDS experiment."""
    out = {}
    for kind, (policy, line, _) in KINDS.items():
        exp = experiment(policy, line)
        out[kind] = (simulate_experiment(exp), trace_of(exp))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_opens_the_live_segments(played, kind: str) -> None:
    policy, _, fault = KINDS[kind]
    report, _ = played[kind]
    assert experiment(policy, KINDS[kind][1]).steps[1].faults == (fault,)
    assert labels(report) == expected(policy, fault)
    assert [(s["start_s"], s["end_s"]) for s in report["segments"]] == [(0, 3), (3, 7), (7, 10)]
    assert [s["measured_s"] for s in report["segments"]] == [2.0, 3.0, 2.0]


def test_a_stalled_session_delivers_nothing_then_goes_on_on_its_phase(played) -> None:
    report, trace = played["stall"]
    _, stalled, after = report["segments"]
    delivered = by_id(stalled, "delivered")
    assert delivered[0] == 0
    assert abs(delivered[1] - 90) <= 1 and abs(delivered[2] - 90) <= 1  # the others go on
    assert stalled["overall"]["mean_fps"] == pytest.approx(2 * FPS / 3, abs=0.5)
    assert abs(by_id(after, "delivered")[0] - 60) <= 1
    sent = arrivals(trace, 0)
    assert not np.any((sent >= 3.0) & (sent < 7.0))  # its source sent nothing
    # The live feeder keeps a stalled session's schedule and its 3-frame window: it
    # publishes again at its first frame from 7 s on, on the phase it had.
    phase = session_phases(3, FPS, SEED)[0]
    next_frame = phase + np.ceil((7.0 - phase) * FPS) / FPS
    assert sent[sent >= 7.0][0] == pytest.approx(next_frame, abs=1e-9)


def test_a_burst_sends_factor_times_the_fps_from_the_instant_it_starts(played) -> None:
    report, trace = played["burst"]
    _, burst, after = report["segments"]
    delivered, overwritten = by_id(burst, "delivered"), by_id(burst, "overwritten")
    # 3 × 30 fps for the 3 measured s: every window it sent is delivered or overwritten
    assert abs(delivered[1] + overwritten[1] - 270) <= 2
    assert by_id(burst, "fps")[1] == pytest.approx(3 * FPS, rel=0.05)  # the device keeps up
    assert abs(delivered[0] - 90) <= 1 and abs(delivered[2] - 90) <= 1
    assert abs(by_id(after, "delivered")[1] - 60) <= 1  # back to 30 fps
    sent = arrivals(trace, 1)
    assert 3.0 in sent  # the burst's first frame is at once (Feeder.scale), not at the next
    assert np.diff(sent[(sent >= 3.0) & (sent < 7.0)]) == pytest.approx(1 / (3 * FPS))


def test_a_burst_the_device_cannot_keep_up_with_overwrites_the_excess() -> None:
    # client-burst: 5 sessions at 15 fps, 512×288 (9.82 ms a window, ~102 w/s), and
    # session 0 at 60 fps: 120 w/s asked for. Every window it sends is still counted.
    report = simulate_experiment(load_experiment("client-burst"))
    segments = report["segments"]
    for burst in (segments[1], segments[4]):
        assert burst["changes"] == {
            "fault": {"kind": "burst", "for_s": 5.0, "session": 0, "factor": 4.0}
        }
        delivered, overwritten = by_id(burst, "delivered"), by_id(burst, "overwritten")
        assert abs(delivered[0] + overwritten[0] - 4 * 15 * burst["measured_s"]) <= 2
        assert overwritten[0] > 0.1 * delivered[0]
        assert burst["overall"]["busy"] == pytest.approx(1.0, abs=0.01)
    for quiet in (segments[0], segments[2], segments[3], segments[5]):
        assert quiet["overall"]["min_fps"] == pytest.approx(15.0, abs=0.3)
        assert quiet["overall"]["overwritten"] == 0


def test_a_slow_device_multiplies_every_batch_that_starts_during_it(played) -> None:
    report, trace = played["slow_device"]
    _, slow, after = report["segments"]
    assert set(by_id(slow, "stages_ms")[0]) >= {"compute"}
    for stages in by_id(slow, "stages_ms").values():
        assert stages["compute"] == pytest.approx(4 * B1_MS, abs=1e-3)
    for stages in by_id(after, "stages_ms").values():
        assert stages["compute"] == pytest.approx(B1_MS, abs=1e-3)
    # oldest first, batches of 1: the device is the limit, at 1000 / 18.76 ms = 53.3 w/s
    assert slow["overall"]["throughput_wps"] == pytest.approx(1000 / (4 * B1_MS), rel=0.02)
    # As the live worker sets its slowdown between batches: the batch on the device when
    # the fault starts (or ends) finishes at the pace it started with.
    batches = trace.batches
    during = (batches["start"] >= 3.0) & (batches["start"] < 7.0)
    assert batches["compute_s"][during] == pytest.approx(4 * B1_MS / 1000)
    assert batches["compute_s"][~during] == pytest.approx(B1_MS / 1000)


def test_a_source_error_delivers_nothing_then_resumes_on_a_fresh_phase(played) -> None:
    report, trace = played["source_error"]
    _, failed, after = report["segments"]
    delivered = by_id(failed, "delivered")
    assert delivered[2] == 0
    assert abs(delivered[0] - 90) <= 1 and abs(delivered[1] - 90) <= 1
    assert abs(by_id(after, "delivered")[2] - 60) <= 1
    sent = arrivals(trace, 2)
    assert not np.any((sent >= 3.0) & (sent < 7.0))
    # Roster.recover: the feeder draws a fresh phase from the run's generator (after
    # the 3 sessions' first draws); the session's window is whole, so it publishes
    # at its first frame.
    rng = random.Random(SEED)
    for _ in range(3):
        first_frame_delay(rng, FPS)
    assert sent[sent >= 7.0][0] == 7.0 + first_frame_delay(rng, FPS)


def test_no_fault_leaves_the_run_as_it_was() -> None:
    quiet = simulate_experiment(experiment("all", 'caption = "nothing happens"'))
    assert labels(quiet) == [
        (opening("all"), CAPTION),
        ({}, "nothing happens"),
    ]
    assert quiet["segments"][1]["overall"]["min_fps"] == pytest.approx(FPS, abs=0.3)


def test_a_step_with_changes_and_a_fault_opens_one_segment_listing_both() -> None:
    # ba13837 opened two at 3 s: the change's (3.0–3.0, nothing measured), then the fault's
    exp = experiment(
        "all",
        'policy = "oldest"\ncaption = "oldest, and a stall"\nstall = {session = 0, for_s = 4}',
    )
    report = simulate_experiment(exp)
    assert labels(report) == [
        (opening("all"), CAPTION),
        ({"policy": "oldest", "fault": STALL.as_json()}, "oldest, and a stall"),
        ({}, f"after: {fault_phrase(STALL)}"),
    ]
    assert [s["start_s"] for s in report["segments"]] == [0, 3, 7]
    assert report["segments"][1]["config"]["policy"] == "oldest"
    assert report["segments"][1]["faults"] == [STALL.as_json()]
    assert report["segments"][2]["faults"] == []
    assert by_id(report["segments"][1], "delivered")[0] == 0


def test_a_fault_at_0_s_starts_with_the_experiment() -> None:
    exp = parse_experiment(
        experiment("all", "").text.replace('policy = "all"', 'policy = "all"\n' + KINDS["stall"][1])
    )
    report = simulate_experiment(exp)
    # one step, one segment: step 0's fault is part of the first (ba13837: a 0–0 segment)
    assert labels(report) == [
        ({**opening("all"), "fault": STALL.as_json()}, CAPTION),
        ({}, f"after: {fault_phrase(STALL)}"),
    ]
    assert [(s["start_s"], s["end_s"]) for s in report["segments"]] == [(0, 4), (4, 10)]
    assert by_id(report["segments"][0], "delivered")[0] == 0
    # it never had 3 frames: from 4 s it needs 3 before its first window (frames stood still)
    sent = arrivals(trace_of(exp), 0)
    phase = session_phases(3, FPS, SEED)[0]
    third = phase + (np.ceil((4.0 - phase) * FPS) + 2) / FPS
    assert sent[0] == pytest.approx(third, abs=1e-9)


def test_a_fault_that_ends_at_a_steps_instant_ends_first() -> None:
    exp = experiment(
        "all", KINDS["stall"][1], steps='[[step]]\nat = 7\npolicy = "oldest"\ncaption = "oldest"'
    )
    assert labels(simulate_experiment(exp))[2:] == [
        ({}, f"after: {fault_phrase(STALL)}"),
        ({"policy": "oldest"}, "oldest"),
    ]


def test_a_fault_that_outlasts_the_run_has_no_after_segment() -> None:
    report = simulate_experiment(experiment("all", "stall = {session = 0, for_s = 30}"))
    assert [c for _, c in labels(report)] == [CAPTION, "S0 stalls for 30 s"]


def test_a_fault_on_a_session_a_failed_step_did_not_add_is_refused() -> None:
    # No curve at 128×72: the step fails (a segment with its error), the run keeps 3
    # sessions, and Engine.inject refuses a fault on session 4 (no segment).
    exp = experiment("all", 'sessions = 5\nresolution = "128x72"\nstall = {session = 4, for_s = 2}')
    report = simulate_experiment(exp)
    assert len(report["segments"]) == 2
    assert report["segments"][1]["error"]
    assert report["segments"][1]["config"]["sessions"] == 3


def test_a_burst_inside_a_stall_keeps_the_session_stalled() -> None:
    # faults compose (engine/faults.py ActiveFaults): a stall wins over a burst, and the
    # burst's end does not end the stall (ba13837: the burst's start unstalled session 0
    # and its end reset the pace to normal, 4 s before the stall ended)
    exp = experiment(
        "all",
        KINDS["stall"][1],
        steps="[[step]]\nat = 4\nburst = {session = 0, factor = 2, for_s = 1}",
    )
    report = simulate_experiment(exp)
    assert [c for _, c in labels(report)][1:] == [
        fault_phrase(STALL),
        "burst ×2 on S0 for 1 s",
        "after: burst ×2 on S0 for 1 s",
        f"after: {fault_phrase(STALL)}",
    ]
    burst = report["segments"][2]
    assert burst["measured_s"] == 0.0 and burst["too_short"] and burst["overall"] is None
    assert report["segments"][3]["faults"] == [STALL.as_json()]  # still on after the burst
    sent = arrivals(trace_of(exp), 0)
    assert not np.any((sent >= 3.0) & (sent < 7.0))  # stalled from 3 s until 7 s
    assert np.any((sent >= 7.0) & (sent < 7.5))


def test_two_overlapping_stalls_hold_until_the_later_end() -> None:
    # 4 s at 3 s and 12 s at 4 s; ba13837 had session 0 back at 7 s, the first one's end
    exp = experiment(
        "all",
        "stall = {session = 0, for_s = 4}",
        steps="[[step]]\nat = 4\nstall = {session = 0, for_s = 12}",
        duration=20,
    )
    sent = arrivals(trace_of(exp), 0)
    assert not np.any((sent >= 3.0) & (sent < 16.0))
    assert np.any((sent >= 16.0) & (sent < 16.5))


def test_two_overlapping_slow_devices_multiply() -> None:
    exp = experiment(
        "oldest",
        "slow_device = {factor = 2, for_s = 6}",
        steps="[[step]]\nat = 5\nslow_device = {factor = 3, for_s = 2}",
        duration=12,
    )
    trace = trace_of(exp)
    b = trace.batches
    one = b["compute_s"][(b["start"] > trace.start + 1) & (b["start"] < trace.start + 2.5)]
    alone = b["compute_s"][(b["start"] > trace.start + 3.5) & (b["start"] < trace.start + 4.8)]
    both = b["compute_s"][(b["start"] > trace.start + 5.2) & (b["start"] < trace.start + 6.8)]
    after = b["compute_s"][(b["start"] > trace.start + 7.2) & (b["start"] < trace.start + 8.8)]
    assert np.median(alone) == pytest.approx(2 * np.median(one), rel=0.01)
    assert np.median(both) == pytest.approx(6 * np.median(one), rel=0.01)  # 2 × 3
    assert np.median(after) == pytest.approx(2 * np.median(one), rel=0.01)  # back to the first


def test_camera_stalls_built_in_shows_its_stall() -> None:
    report = simulate_experiment(load_experiment("camera-stalls"))
    stall = Fault("stall", 5.0, session=0)
    assert labels(report) == [
        (
            {},  # 4 sessions and "all" are the defaults
            "4 sessions, batch all waiting, on the laptop GPU at 256×144.",
        ),
        (
            {"fault": stall.as_json()},
            "Session 0's camera stalls for 5 s: the others do not notice.",
        ),
        ({}, "after: S0 stalls for 5 s"),
    ]
    segments = report["segments"]
    assert [(s["start_s"], s["end_s"]) for s in segments] == [(0, 6), (6, 11), (11, 20)]
    fps = by_id(segments[1], "fps")
    assert fps[0] == 0.0
    assert min(fps[1], fps[2], fps[3]) == pytest.approx(30.0, abs=0.3)
    assert by_id(segments[2], "fps")[0] == pytest.approx(30.0, abs=0.3)


def test_client_burst_built_in_shows_both_bursts() -> None:
    report = simulate_experiment(load_experiment("client-burst"))
    burst = Fault("burst", 5.0, session=0, factor=4.0)
    after = ({}, "after: burst ×4 on S0 for 5 s")
    assert labels(report) == [
        (
            {"sessions": 5, "policy": "oldest"},
            "5 sessions, oldest first, at 512×288 on the laptop GPU.",
        ),
        ({"fault": burst.as_json()}, "Session 0 bursts at 4× its fps for 5 s."),
        after,
        ({"policy": "all"}, "Batch all waiting: every session keeps its share."),
        ({"fault": burst.as_json()}, "The same burst under batch all waiting."),
        after,
    ]


#: After the stall at 3 s (the step ``experiment`` makes), the other kinds, each fault
#: 2.5 s long and 0.5 s after the one before ends.
LIVE = """
[[step]]
at = 6
burst = {session = 1, factor = 3, for_s = 2.5}
[[step]]
at = 9
slow_device = {factor = 3, for_s = 2.5}
[[step]]
at = 12
caption = "session 2's source fails"
source_error = {session = 2, for_s = 2.5}
"""


@pytest.mark.slow
def test_faults_live_and_simulated_have_the_same_segments() -> None:
    """One experiment with every kind, live (Engine + ExperimentPlayer) and simulated.

    The same segments (changes and captions), and each segment's mean fps within 15%:
    the fault segments are measured over 1.5 s, where the frame grid's ±1 window per
    session against the edges is ~2%, and a live fault starts a few ms late. (The
    0.5 s segments after the first three faults are too short to measure both ways.)
    """
    exp = experiment("all", "stall = {session = 0, for_s = 2.5}", duration=16, steps=LIVE)
    live, _ = played_live(exp)
    sim = simulate_experiment(exp)
    assert labels(live) == labels(sim)
    assert len(sim["segments"]) == 9
    for a, b in zip(live["segments"], sim["segments"], strict=True):
        assert a["start_s"] == pytest.approx(b["start_s"], abs=0.2)
        assert a["too_short"] == b["too_short"]
        if not b["too_short"]:
            assert a["overall"]["mean_fps"] == pytest.approx(b["overall"]["mean_fps"], rel=0.15)
