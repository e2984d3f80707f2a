"""Experiments in the simulator: steps at their times, one segment per change, the
segments' figures from the live engine's code, predictions for live segments, and
the same experiment through the live engine (emulated backend)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine.report.rows import live_vs_predicted
from batchscope.engine.segments import SETTLE_S
from batchscope.engine.session import WINDOW
from batchscope.experiment import Experiment, load_experiment, parse_experiment
from batchscope.profiles.profile import load_profile
from batchscope.sim.prediction import add_predictions, predict_segment
from batchscope.sim.simulated_experiment import simulate_experiment
from batchscope.sim.simulator import ProfileCurves, one_step, play, simulate
from contract import played_live

LAPTOP = load_profile("laptop-8gb")
B1_MS = LAPTOP.curve("fp16", (512, 288)).ms(1)  # 9.82 ms


def experiment(steps: str, duration: float = 9, resolution: str = "512x288") -> Experiment:
    return parse_experiment(
        f"""
name = "test"
duration = {duration}
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "{resolution}"
fps = 30
max_batch = "none"
{steps}
"""
    )


def trace_of(exp: Experiment):
    return play(exp, ProfileCurves(None, exp.base), warmup_s=0.0)


@pytest.fixture(scope="module")
def bus_or_taxi() -> dict:
    return simulate_experiment(load_experiment("bus-or-taxi"))


def test_bus_or_taxi_has_a_segment_per_step(bus_or_taxi: dict) -> None:
    segments = bus_or_taxi["segments"]
    assert [s["changes"] for s in segments] == [
        {"sessions": 3, "policy": "oldest"},
        {"sessions": 6},
        {"policy": "all"},
    ]
    assert [(s["start_s"], s["end_s"]) for s in segments] == [(0, 10), (10, 20), (20, 30)]
    assert [s["measured_s"] for s in segments] == [10 - SETTLE_S] * 3
    assert all(s["stable"] for s in segments)
    assert segments[1]["caption"].startswith("6 sessions")
    assert bus_or_taxi["experiment"]["name"] == "bus-or-taxi"
    assert bus_or_taxi["kind"] == "simulate"


def test_bus_or_taxi_tells_the_studys_story(bus_or_taxi: dict) -> None:
    keeps_up, starves, fair = (s["overall"] for s in bus_or_taxi["segments"])
    assert keeps_up["min_fps"] == pytest.approx(30.0, abs=0.1)
    assert starves["mean_fps"] == pytest.approx(1000.0 / B1_MS / 6, rel=0.02)  # 17.0
    assert starves["min_fps"] < 0.5 * starves["mean_fps"]
    assert fair["jain"] > 0.99
    assert fair["throughput_wps"] < starves["throughput_wps"]  # batching: fair, not faster


def test_segments_match_a_plain_simulation_of_their_config(bus_or_taxi: dict) -> None:
    # A segment starts from the previous setting's mailboxes and batch in flight, a plain
    # run from empty ones; the settling second washes that out within a few batches. What
    # is left is the count at the interval's edges: at most a window per session at each
    # end, 2 / 9 s = 0.22 fps, 1.7% of the smallest mean here (13.3 fps). Median latency
    # is the steady state's, the same to within the batch that straddles an edge.
    for seg in bus_or_taxi["segments"]:
        config = RunConfig(**_config_fields(seg["config"]))
        plain = simulate(config.with_changes(duration_s=seg["measured_s"]), warmup_s=SETTLE_S)
        got, want = seg["overall"], plain["overall"]
        assert got["mean_fps"] == pytest.approx(want["mean_fps"], rel=0.03)
        assert got["throughput_wps"] == pytest.approx(want["throughput_wps"], rel=0.03)
        assert got["latency_ms"]["p50"] == pytest.approx(want["latency_ms"]["p50"], rel=0.05)
        assert got["batch_sizes"].keys() == want["batch_sizes"].keys()


def _config_fields(cfg: dict) -> dict:
    keys = ("policy", "sessions", "fps", "max_batch", "precision", "profile", "seed")
    return {"resolution": tuple(cfg["resolution"]), **{k: cfg[k] for k in keys}}


def test_a_plain_simulation_is_an_experiment_of_one_step() -> None:
    config = RunConfig(sessions=5, policy="oldest", duration_s=5.0)
    report = simulate_experiment(one_step(config), warmup_s=1.0)
    (segment,) = report.pop("segments")
    report.pop("experiment")
    assert report == simulate(config)
    assert segment["changes"] == {} and segment["start_s"] == 0.0


def test_a_step_without_a_curve_keeps_the_config_and_the_next_steps_apply() -> None:
    exp = experiment(
        """
[[step]]
at = 0
sessions = 3
policy = "oldest"
[[step]]
at = 3
resolution = "640x360"
caption = "a resolution the laptop profile never measured"
[[step]]
at = 6
sessions = 5
"""
    )
    first, failed, after = simulate_experiment(exp)["segments"]
    assert "no curve for fp16 at 640x360" in failed["error"]
    assert failed["changes"] == {"resolution": [640, 360]}
    assert failed["config"]["resolution"] == [512, 288]
    assert failed["caption"].startswith("a resolution")
    assert failed["overall"]["throughput_wps"] == pytest.approx(90.0, abs=1.0)  # still running
    assert "error" not in after and after["changes"] == {"sessions": 5}
    assert after["config"]["sessions"] == 5 and after["config"]["resolution"] == [512, 288]
    assert after["overall"]["throughput_wps"] == pytest.approx(1000.0 / B1_MS, rel=0.02)
    assert "error" not in first


def test_fewer_sessions_retire_the_others() -> None:
    exp = experiment(
        '[[step]]\nat = 0\nsessions = 6\npolicy = "all"\n[[step]]\nat = 3\nsessions = 2\n'
    )
    trace = trace_of(exp)
    items = trace.items
    longest = LAPTOP.curve("fp16", (512, 288)).ms(6) / 1000.0  # the batch in flight at 3 s
    retired = items[items["session"] >= 2]
    assert len(retired) > 0 and retired["result"].max() <= 3.0 + longest
    assert retired["arrival"].max() <= 3.0  # their pending windows were dropped, not run
    assert np.all(trace.overwrites["t"][trace.overwrites["session"] >= 2] <= 3.0)
    segment = simulate_experiment(exp)["segments"][1]
    assert [s["id"] for s in segment["sessions"]] == [0, 1]
    assert segment["overall"]["min_fps"] == pytest.approx(30.0, abs=0.1)


def test_a_new_session_draws_its_phase_from_the_runs_generator() -> None:
    exp = experiment(
        '[[step]]\nat = 0\nsessions = 2\npolicy = "oldest"\n[[step]]\nat = 2\nsessions = 3\n'
    )
    items = trace_of(exp).items
    rng = random.Random(0)
    phases = [rng.random() / 30.0 for _ in range(3)]  # sessions 0, 1 at start, 2 at 2 s
    first = items[items["session"] == 2]["arrival"].min()
    assert first == pytest.approx(2.0 + phases[2] + (WINDOW - 1) / 30.0)


def test_a_new_fps_repaces_the_sessions() -> None:
    exp = experiment(
        '[[step]]\nat = 0\nsessions = 3\npolicy = "oldest"\n[[step]]\nat = 3\nfps = 10\n'
    )
    before, after = (s["overall"] for s in simulate_experiment(exp)["segments"])
    assert before["min_fps"] == pytest.approx(30.0, abs=0.2)
    assert after["mean_fps"] == pytest.approx(10.0, abs=0.2)


def test_a_new_resolution_switches_the_curve_after_the_batch_in_flight() -> None:
    exp = experiment(
        '[[step]]\nat = 0\nsessions = 6\npolicy = "all"\n[[step]]\nat = 3\nresolution = "256x144"\n'
    )
    batches = trace_of(exp).batches
    big, small = LAPTOP.curve("fp16", (512, 288)), LAPTOP.curve("fp16", (256, 144))
    straddling = batches[(batches["start"] < 3.0) & (batches["end"] > 3.0)]
    assert len(straddling) == 1
    assert straddling["compute_s"][0] * 1000.0 == pytest.approx(big.ms(int(straddling["size"][0])))
    later = batches[batches["start"] >= 3.0]
    assert np.allclose(later["compute_s"] * 1000.0, [small.ms(int(n)) for n in later["size"]])


def test_same_experiment_same_report() -> None:
    exp = load_experiment("starvation")
    assert simulate_experiment(exp) == simulate_experiment(exp)


# -- predictions for live segments ---------------------------------------------------------


def test_a_prediction_is_the_simulators_figures() -> None:
    config = RunConfig(sessions=6, policy="oldest")
    predicted = predict_segment(config, 9.0)
    plain = simulate(config.with_changes(duration_s=9.0), warmup_s=SETTLE_S)["overall"]
    assert predicted == {
        "mean_fps": plain["mean_fps"],
        "min_fps": plain["min_fps"],
        "latency_ms": {"p50": plain["latency_ms"]["p50"], "p99": plain["latency_ms"]["p99"]},
        "throughput_wps": plain["throughput_wps"],
    }


def test_no_prediction_without_a_curve_or_a_profile() -> None:
    assert predict_segment(RunConfig(resolution=(640, 360)), 9.0) is None
    assert predict_segment(RunConfig(profile="server-24gb", precision="fp32"), 9.0) is None
    assert predict_segment(RunConfig(backend="torch"), 9.0) is None  # its profile is a default
    assert predict_segment(RunConfig(backend="torch"), 9.0, profile=LAPTOP) is not None
    assert predict_segment(RunConfig(fps=None), 9.0) is None
    assert predict_segment(RunConfig(), 0.0) is None


def test_add_predictions_fills_emulated_segments_only() -> None:
    report = simulate_experiment(load_experiment("round-robin"))
    torch_segment = {**report["segments"][0], "config": {**report["segments"][0]["config"]}}
    torch_segment["config"].update(backend="torch", profile=None, device="cpu")
    report["segments"].append(torch_segment)
    filled = add_predictions(report)
    assert all(s["predicted"] is None for s in report["segments"])  # the input is kept
    emulated, torch_run = filled["segments"][:2], filled["segments"][2]
    for seg in emulated:
        ratios = live_vs_predicted(seg)
        assert ratios is not None and ratios["mean_fps"] == pytest.approx(1.0, rel=0.03)
    assert torch_run["predicted"] is None and live_vs_predicted(torch_run) is None
    assert add_predictions(report, profile=LAPTOP)["segments"][2]["predicted"] is not None


# -- live and simulated ------------------------------------------------------------------------

# Three sessions at 30 fps, one window at a time (4.69 ms at 256x144: the device keeps up);
# then camera 0 stalls while camera 1 bursts to 90 fps (one step, one segment; both end at
# 6 s, so two segments open there, the first empty); then round-robin, still one at a
# time, as the device turns 2x slower (9.4 ms a window: 106 windows/s for the 90 offered).
# Every segment but the empty one lasts 3 s: 2 measured, clear of the 1 s a segment needs.
LIVE = """
name = "live-vs-sim"
duration = 15
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
fps = 30
max_batch = "none"
sources = ["synthetic"]
[[step]]
at = 0
sessions = 3
policy = "oldest"
[[step]]
at = 3
caption = "camera 0 stalls, camera 1 bursts"
stall = {session = 0, for_s = 3}
burst = {session = 1, factor = 3, for_s = 3}
[[step]]
at = 9
policy = "round-robin"
caption = "round-robin on a slower device"
slow_device = {factor = 2, for_s = 3}
"""


def sent_fps(session: dict, segment: dict) -> float:
    """Windows a session sent per measured second: delivered, overwritten or expired."""
    return (session["delivered"] + session["overwritten"] + session["expired"]) / segment[
        "measured_s"
    ]


@pytest.mark.slow
def test_live_and_simulated_segments_agree() -> None:
    exp = parse_experiment(LIVE)
    (live_report, engine), sim_report = played_live(exp), simulate_experiment(exp)
    live_only = {"events", "host_probe", "host_jitter", "host_load"}  # its machine, measured
    assert set(sim_report) - {"experiment"} == set(live_report) - live_only
    live, sim = live_report["segments"], sim_report["segments"]
    # what happened, exactly: the same segments, opened by the same steps and fault ends,
    # with the same changes, faults, captions and settings, and the same ones measured
    assert [s["start_s"] for s in sim] == [0.0, 3.0, 6.0, 6.0, 9.0, 12.0]
    assert len(live) == len(sim)
    for a, b in zip(live, sim, strict=True):
        assert set(a) == set(b)
        for key in ("changes", "faults", "caption", "config", "too_short"):
            assert a[key] == b[key], (b["index"], key)
        # live, a segment opens when its step or its fault's end took effect: a little late
        assert 0.0 <= a["start_s"] - b["start_s"] < 0.5, b["index"]
    assert [s["too_short"] for s in sim] == [False, False, True, False, False, False]
    assert live[1]["changes"]["fault"] == sim[1]["changes"]["fault"]
    # the figures: what each session sent (the feeder's pace, whatever the machine's load),
    # what the device took per window (the median live batch: a loaded machine wakes some
    # late) and, looser, what was delivered (its late wake-ups overwrite a few windows)
    segments = engine.segments.all()
    batches = engine.store.batches.view()
    for a, b in zip(live, sim, strict=True):
        if b["too_short"]:
            continue
        assert [s["id"] for s in a["sessions"]] == [s["id"] for s in b["sessions"]]
        for x, y in zip(a["sessions"], b["sessions"], strict=True):
            assert sent_fps(x, a) == pytest.approx(sent_fps(y, b), rel=0.1, abs=1.0)
        seg = segments[a["index"]]
        live_ms = batches[(batches["start"] >= seg.measure_start) & (batches["end"] <= seg.end)]
        sim_ms = max(s["stages_ms"]["compute"] for s in b["sessions"])  # one at a time
        assert np.median(live_ms["compute_s"]) * 1000 == pytest.approx(sim_ms, rel=0.3)
        assert a["overall"]["mean_fps"] == pytest.approx(b["overall"]["mean_fps"], rel=0.25)
    # the faults' effects: camera 0 sent and got nothing, camera 1 sent 3 x 30 fps, and a
    # window took twice as long on the slower device
    stalled, burst = live[1]["sessions"][0], live[1]["sessions"][1]
    assert stalled["delivered"] == sim[1]["sessions"][0]["delivered"] == 0
    assert sent_fps(burst, live[1]) == pytest.approx(90.0, rel=0.1)
    assert sim[4]["sessions"][0]["stages_ms"]["compute"] == pytest.approx(2 * 4.69, rel=0.01)


@pytest.mark.slow
def test_a_session_retired_later_keeps_its_rows_in_the_segments_it_ran_in() -> None:
    exp = experiment(
        '[[step]]\nat = 0\nsessions = 3\npolicy = "oldest"\n[[step]]\nat = 3\nsessions = 2\n',
        duration=5,
        resolution="256x144",
    )
    (live_report, _), sim_report = played_live(exp), simulate_experiment(exp)
    live, sim = live_report["segments"][0], sim_report["segments"][0]
    assert [s["id"] for s in sim["sessions"]] == [0, 1, 2]
    assert [s["id"] for s in live["sessions"]] == [0, 1, 2]
    assert live["overall"]["mean_fps"] == pytest.approx(sim["overall"]["mean_fps"], rel=0.25)
