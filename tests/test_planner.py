"""The capacity planner (sim/planner/) and `batchscope plan` (cli/plan.py).

The search runs on a synthetic profile whose answer can be worked out by hand:
one window takes 20 ms and a batch of b takes 20·b ms (no gain from batching),
so the device serves at most 50 windows/s whatever the policy. At 10 fps with a
0.9 ratio every session needs 9 windows/s: at most 50 / 9 → 5 sessions can fit,
and at 5 sessions (45 of 50 windows/s needed, 50 offered by 5 × 10 fps) every
session is served every frame, so 5 is the answer for every policy that serves
the sessions in turn, with a generous p99 budget.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from batchscope.cli import main
from batchscope.config import RunConfig
from batchscope.profiles.profile import DeviceProfile, load_profile
from batchscope.setting import load_setting
from batchscope.sim.host_jitter import measured_jitter
from batchscope.sim.planner import (
    Budget,
    Plan,
    PlanCancelled,
    capacity_bound,
    plan,
    plot_counts,
    recommend,
    series,
    settings,
    windows_needed,
)
from batchscope.sim.simulator import simulate

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def flat_profile(tmp_path: Path) -> Path:
    """20 ms per window at any batch size, fp16 512x288 only."""
    path = tmp_path / "flat.json"
    path.write_text(
        json.dumps(
            {
                "format": "batchscope-profile/1",
                "name": "flat",
                "device": "a device that gains nothing from batching",
                "curves": [
                    {
                        "precision": "fp16",
                        "resolution": [512, 288],
                        "points": [{"batch": 1, "ms": 20.0}, {"batch": 2, "ms": 40.0}],
                    }
                ],
            }
        )
    )
    return path


def linear_profile(tmp_path: Path, windows_per_s: float) -> Path:
    """A device whose every batch size serves exactly ``windows_per_s`` windows/s."""
    ms = 1000.0 / windows_per_s
    path = tmp_path / "linear.json"
    path.write_text(
        json.dumps(
            {
                "format": "batchscope-profile/1",
                "name": "linear",
                "device": f"{windows_per_s:g} windows/s at any batch size",
                "curves": [
                    {
                        "precision": "fp16",
                        "resolution": [512, 288],
                        "points": [{"batch": 1, "ms": ms}, {"batch": 2, "ms": 2 * ms}],
                    }
                ],
            }
        )
    )
    return path


def report_figures(
    profile: DeviceProfile, result: Plan, policy: str, params: dict, sessions: int, seed: int
) -> tuple[float, float]:
    """(slowest session's fps, overall p99 ms) of `simulate`'s own report for one run."""
    config = RunConfig(
        fps=result.budget.fps,
        profile=profile.name,
        precision=result.precision,
        resolution=result.resolution,
        backend="emulated",
        duration_s=result.duration_s,
        policy=policy,
        sessions=sessions,
        seed=seed,
        **params,
    )
    overall = simulate(config, profile)["overall"]
    return overall["min_fps"], overall["latency_ms"]["p99"]


def assert_exact(result: Plan, profile: DeviceProfile) -> None:
    """Each policy's answer fits on every seed, and on its grid no count above it (up to
    its bound) fits on every seed: judged by `simulate`'s reports, not the planner's."""
    budget = result.budget
    for p in result.policies:
        assert p.max_sessions >= 1
        for seed in range(result.seeds):
            fps, p99 = report_figures(profile, result, p.policy, p.params, p.max_sessions, seed)
            assert fps >= budget.min_fps and p99 <= budget.p99_ms, (p.policy, seed)
        for params in settings(p.policy, budget):
            for n in range(p.max_sessions + 1, p.bound + 1):
                figures = [
                    report_figures(profile, result, p.policy, params, n, seed)
                    for seed in range(result.seeds)
                ]
                missed = [fps < budget.min_fps or p99 > budget.p99_ms for fps, p99 in figures]
                assert any(missed), (p.policy, params, n, figures)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr): argparse's usage errors exit through SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_capacity_bound_by_hand(flat_profile, tmp_path):
    curve = load_profile(flat_profile).curve("fp16", (512, 288))
    budget = Budget(fps=10.0, p99_ms=500.0, min_fps_ratio=0.9)
    # 5 s: each session 45 windows (9 fps); the device 250, +1 (or +n) from the batch
    # already running when the measurement starts
    assert windows_needed(budget, 5.0) == 45
    assert capacity_bound(curve, 1, budget, 256, 5.0) == 5  # 6 × 45 = 270 > 251
    assert capacity_bound(curve, None, budget, 256, 5.0) == 5  # 270 > 256
    assert capacity_bound(curve, None, budget, 3, 5.0) == 3  # --max-sessions caps it
    # the server's curve gains from batching: 1/8 ms, then 3/20 ms, extrapolated linearly
    server = load_profile("server-24gb").curve("fp16", (512, 288))
    at30 = Budget(fps=30.0, p99_ms=50.0)
    assert windows_needed(at30, 30.0) == 855  # 28.5 fps × 30 s
    assert capacity_bound(server, 1, at30, 256, 30.0) == 4  # 125 w/s ÷ 28.5 = 4.4
    assert capacity_bound(server, 3, at30, 256, 30.0) == 5  # 150 w/s ÷ 28.5 = 5.3
    assert capacity_bound(server, None, at30, 256, 30.0) == 5  # → 166.7 w/s at most: 5.8
    # a hair under 4 × 28.5 = 114 windows/s still delivers 4 × 855 windows in 30 s
    linear = load_profile(linear_profile(tmp_path, 113.999)).curve("fp16", (512, 288))
    assert capacity_bound(linear, None, at30, 256, 30.0) == 4
    # the report rounds fps to 3 decimals: 28.4995 fps (854.985 of 855 windows) reads 28.5
    assert windows_needed(Budget(fps=30.0, p99_ms=50.0, min_fps_ratio=0.95), 1000.0) == 28500
    assert windows_needed(Budget(fps=28.5, p99_ms=50.0, min_fps_ratio=1.0), 0.5) == 15


def test_the_edge_a_hair_under_the_budget_is_found(tmp_path):
    """113.999 windows/s and 4 sessions at 28.5 fps: each delivers its 855 windows in 30 s
    on every seed (the planner answered 3: its bound allowed only 1e-9 of slack)."""
    profile = load_profile(linear_profile(tmp_path, 113.999))
    result = plan(profile, "fp16", (512, 288), Budget(30.0, 500.0), ["all"])
    (p,) = result.policies
    assert (p.max_sessions, p.bound) == (4, 4)
    assert p.at_max.min_fps_worst == 28.5
    for seed in range(result.seeds):
        fps, p99 = report_figures(profile, result, "all", p.params, 4, seed)
        assert fps >= 28.5 and p99 <= 500.0, seed


@pytest.mark.parametrize(
    ("p99_ms", "answers"),
    [
        # p99 ≤ 30 ms: one window takes 20 ms, so a second session waiting for it misses
        (30.0, {"oldest": 1, "round-robin": 1, "all": 1, "dynamic": 1}),
        (45.0, {"oldest": 5, "round-robin": 4, "all": 4, "dynamic": 4}),
    ],
)
def test_the_answer_below_the_bound_is_exact(flat_profile, p99_ms, answers):
    profile = load_profile(flat_profile)
    policies = list(answers)
    result = plan(profile, "fp16", (512, 288), Budget(10.0, p99_ms, 0.9), policies, 256, 5.0, 2)
    assert {p.policy: p.max_sessions for p in result.policies} == answers
    assert all(p.bound == 5 for p in result.policies)
    assert_exact(result, profile)


def test_plan_finds_the_hand_answer(flat_profile):
    budget = Budget(fps=10.0, p99_ms=500.0, min_fps_ratio=0.9)
    result = plan(
        load_profile(flat_profile),
        "fp16",
        (512, 288),
        budget,
        policies=["oldest", "round-robin", "all"],
        duration_s=5.0,
        seeds=2,
    )
    assert [p.max_sessions for p in result.policies] == [5, 5, 5]
    for p in result.policies:
        assert p.bound == 5
        assert p.at_max.min_fps_worst >= 9.0
        assert p.at_max.seeds == 2
    # 5 sessions each: oldest has the lowest worst p99 (41.4 ms: one window at a time, in
    # arrival order); round-robin and all tie at 50.1 ms (all takes one window at a time
    # here too: the frames arrive apart), and the simpler policy wins the tie
    oldest, rr, every = result.policies
    assert oldest.at_max.p99_worst < rr.at_max.p99_worst == every.at_max.p99_worst
    assert result.recommended.policy == "oldest"
    profile = load_profile(flat_profile)
    tie = plan(profile, "fp16", (512, 288), result.budget, ["all", "round-robin"], 256, 5.0, 2)
    assert [p.at_max.p99_worst for p in tie.policies] == [every.at_max.p99_worst] * 2
    assert tie.recommended.policy == "round-robin"
    data = result.to_json()
    assert data["kind"] == "plan"
    assert data["budget"] == {"fps": 10.0, "min_fps_ratio": 0.9, "p99_ms": 500.0}
    assert data["resolution"] == [512, 288]
    assert data["recommended"]["max_sessions"] == 5
    assert {"policy", "params", "max_sessions", "at_max"} <= set(data["policies"][0])
    assert data["policies"][0]["at_max"]["min_fps"] >= 9.0


def test_the_budget_decides(flat_profile):
    """A p99 of 30 ms: a window that waits for another's 20 ms misses it, so 1 session."""
    profile = load_profile(flat_profile)
    tight = plan(profile, "fp16", (512, 288), Budget(10.0, 30.0, 0.9), ["oldest"], 256, 5.0, 2)
    loose = plan(profile, "fp16", (512, 288), Budget(10.0, 500.0, 0.9), ["oldest"], 256, 5.0, 2)
    assert (tight.policies[0].max_sessions, loose.policies[0].max_sessions) == (1, 5)
    assert tight.policies[0].at_max.p99_worst == 20.0  # alone: its own 20 ms
    assert tight.policies[0].bound == 5  # the p99, not the device, decided


def test_a_budget_nothing_meets_gives_zero_and_the_closest_point(flat_profile, capsys, tmp_path):
    profile = load_profile(flat_profile)
    result = plan(profile, "fp16", (512, 288), Budget(10.0, 5.0, 0.9), ["oldest", "all"], 8, 5.0, 2)
    assert [p.max_sessions for p in result.policies] == [0, 0]
    for p in result.policies:
        assert p.at_max.sessions == 1
        assert not p.at_max.fits
        assert p.at_max.p99_worst >= 20.0  # one window alone takes 20 ms
    assert result.recommended.max_sessions == 0
    code, out, err = run_cli(
        ["plan", "--profile", str(flat_profile), "--fps", "10", "--p99-ms", "5",
         "--policies", "oldest", "--duration", "5", "--seeds", "2", "--json", "-"],
        capsys,
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["recommended"]["max_sessions"] == 0
    assert data["policies"][0]["at_max"]["sessions"] == 1
    assert "no policy meets this budget" in err


def test_progress_and_cancel(flat_profile):
    profile = load_profile(flat_profile)
    calls = []
    plan(
        profile, "fp16", (512, 288), Budget(10.0, 500.0, 0.9), ["oldest", "all"], 8, 5.0, 1,
        progress=lambda done, total, policy: calls.append((done, total, policy)),
    )  # fmt: skip
    assert calls == [(1, 2, "oldest"), (2, 2, "all")]
    asked = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(PlanCancelled):
        plan(profile, "fp16", (512, 288), Budget(10.0, 500.0, 0.9), cancelled=cancelled)
    assert len(asked) == 4


def test_grid_and_recommendation_order():
    budget = Budget(30.0, 50.0)
    assert settings("oldest", budget) == [{}]
    assert {"max_batch": None} in settings("all", budget)
    assert len(settings("dynamic", budget)) == 9
    assert [s["slo_ms"] for s in settings("adaptive", budget)] == [25.0, 40.0]


@pytest.mark.parametrize(
    ("p99_ms", "objectives"),
    [
        (0.09, [0.045, 0.072]),  # rounded to 0.1 ms, 0.045 was 0.0: not a valid objective
        (33.3, [16.6, 26.6]),
        (1e6, [100_000.0]),  # the knob's top: both clip to it, searched once
    ],
)
def test_adaptive_searches_only_valid_objectives(p99_ms, objectives):
    assert [s["slo_ms"] for s in settings("adaptive", Budget(30.0, p99_ms))] == objectives


def test_a_budget_below_any_objective_is_no_fit_not_a_knob_error(capsys):
    """`--p99-ms 0.09`: no session meets it; the answer says so (it said slo_ms = 0.0)."""
    code, out, err = run_cli(
        ["plan", "--profile", "laptop-8gb", "--resolution", "256x144", "--fps", "30",
         "--p99-ms", "0.09", "--policies", "adaptive", "--duration", "2", "--seeds", "2",
         "--json", "-"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "no policy meets this budget" in err and "slo_ms" not in err
    data = json.loads(out)
    assert data["recommended"]["max_sessions"] == 0
    assert data["policies"][0]["params"]["slo_ms"] in (0.045, 0.072)


def test_a_plans_run_config_finds_a_profile_file_again(flat_profile):
    """`plan --profile FILE --verify` served a config naming the profile, which no lookup
    found ("profile flat: no such profile or file"): the config names the file."""
    result = plan(load_profile(flat_profile), "fp16", (512, 288), Budget(10.0, 500.0, 0.9),
                  ["oldest"], 256, 5.0, 2)  # fmt: skip
    assert load_profile(result.config().profile).name == "flat"
    assert result.to_json()["profile"] == "flat"  # the plan's JSON still names it


def test_series_reuses_the_search(flat_profile):
    profile = load_profile(flat_profile)
    result = plan(profile, "fp16", (512, 288), Budget(10.0, 500.0, 0.9), ["oldest"], 256, 5.0, 2)
    before = result.runs.runs
    (s,) = series(result, profile, limit=6)
    assert s.sessions == (1, 2, 3, 4, 5, 6)
    assert s.max_sessions == 5
    assert s.min_fps[4] >= 9.0 > s.min_fps[5]  # 6 sessions: 60 w/s wanted of 50
    assert result.runs.runs - before < 6 * 2  # 5 and 6 sessions were simulated already


def test_the_plots_runs_in_two_forked_workers_give_the_same_curves(flat_profile):
    profile = load_profile(flat_profile)
    budget = Budget(10.0, 500.0, 0.9)
    result = plan(profile, "fp16", (512, 288), budget, ["oldest", "all"], 256, 5.0, 2)
    done: list[tuple[int, int, str]] = []
    forked = series(result, profile, workers=2, progress=lambda *a: done.append(a))
    assert forked == series(result, profile)
    assert [s.sessions for s in forked] == [plot_counts(p.max_sessions) for p in result.policies]
    assert [d[:2] for d in done] == [(1, 2), (2, 2)]
    assert {d[2] for d in done} == {"oldest", "all"}


def test_a_cancelled_plot_raises_and_leaves_no_worker(flat_profile):
    import multiprocessing

    profile = load_profile(flat_profile)
    budget = Budget(10.0, 500.0, 0.9)
    result = plan(profile, "fp16", (512, 288), budget, ["oldest", "all"], 256, 5.0, 2)
    done: list[tuple[int, int, str]] = []
    with pytest.raises(PlanCancelled):
        series(
            result,
            profile,
            workers=2,
            cancelled=lambda: bool(done),  # true once the first curve is complete
            progress=lambda *a: done.append(a),
        )
    assert done[0][:2] == (1, 2)
    assert multiprocessing.active_children() == []


def test_each_curve_goes_three_past_its_own_answer():
    assert plot_counts(7) == tuple(range(1, 11))
    assert plot_counts(0) == plot_counts(2) == (1, 2, 3, 4, 5, 6)  # at least six counts
    assert plot_counts(18, limit=20) == tuple(range(1, 21))


def test_plan_table_json_plot_and_export(flat_profile, capsys, tmp_path):
    png, folder = tmp_path / "plan.png", tmp_path / "deploy"
    code, out, err = run_cli(
        ["plan", "--profile", str(flat_profile), "--fps", "10", "--p99-ms", "500",
         "--min-fps-ratio", "0.9", "--policies", "oldest,dynamic", "--duration", "5",
         "--seeds", "2", "--json", str(tmp_path / "plan.json"), "--plot", str(png),
         "--export", str(folder)],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "recommended:" in out and "dynamic" in out
    assert err.count("planned ") == 2  # not a terminal: one line per policy
    data = json.loads((tmp_path / "plan.json").read_text())
    assert [p["policy"] for p in data["policies"]] == ["oldest", "dynamic"]
    assert png.stat().st_size > 10_000
    config = load_setting(folder / "policy.json")
    rec = data["recommended"]
    assert (config.policy, config.sessions, config.fps) == (rec["policy"], 5, 10.0)
    # a profile outside the profile folders is named by its path, so the file runs as written
    assert config.profile == str(flat_profile.resolve())
    text = (folder / "config.pbtxt").read_text()
    assert "max_batch_size" in text and "dynamic_batching" in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--profile", "no-such-profile"], "no-such-profile"),
        (["--resolution", "256x144"], "no curve for fp16 at 256x144"),
        (["--p99-ms", "0"], "--p99-ms"),
        (["--p99-ms", "-3"], "--p99-ms"),
        (["--p99-ms", "inf"], "--p99-ms"),
        (["--p99-ms", "nan"], "--p99-ms"),
        (["--min-fps-ratio", "0"], "--min-fps-ratio"),
        (["--min-fps-ratio", "1.5"], "--min-fps-ratio"),
        (["--fps", "0"], "--fps"),
        (["--fps", "-30"], "--fps"),
        (["--max-sessions", "0"], "--max-sessions"),
        (["--max-sessions", "257"], "--max-sessions"),
        (["--seeds", "0"], "--seeds"),
        (["--policies", "fastest"], "fastest"),
    ],
)
def test_bad_input_is_one_line_exit_2(flat_profile, capsys, args, words):
    # a later flag wins in argparse: the args replace the valid --p99-ms
    code, _, err = run_cli(
        ["plan", "--profile", str(flat_profile), "--p99-ms", "50", *args], capsys
    )
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert words in err
    assert "Traceback" not in err


def test_the_p99_budget_is_required(flat_profile, capsys):
    code, _, err = run_cli(["plan", "--profile", str(flat_profile)], capsys)
    assert code == 2 and "--p99-ms" in err


def test_an_export_folder_that_cannot_be_written(flat_profile, capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    argv = ["plan", "--profile", str(flat_profile), "--p99-ms", "50", "--export"]
    code, _, err = run_cli([*argv, str(blocker)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--export" in err
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        code, _, err = run_cli([*argv, str(locked)], capsys)
        assert code == 2 and "cannot be written" in err


def test_recommend_rule():
    from batchscope.sim.planner import Point, PolicyPlan

    def pp(policy: str, n: int, p99: float) -> PolicyPlan:
        point = Point(n, 1, 30.0, 30.0, p99, 30.0, True)
        return PolicyPlan(policy, {}, n, point, n, 1)

    budget = Budget(30.0, 50.0)
    assert recommend([pp("oldest", 3, 40), pp("all", 4, 45)], budget).policy == "all"
    assert recommend([pp("all", 4, 45), pp("dynamic", 4, 30)], budget).policy == "dynamic"
    assert recommend([pp("dynamic", 4, 30), pp("all", 4, 30)], budget).policy == "all"


@pytest.mark.slow
def test_verify_agrees_with_the_plan_within_10_percent_on_a_quiet_host():
    from batchscope.sim.planner import verify

    # the first example: laptop-8gb fp16 512x288 at 30 fps, p99 ≤ 50 ms (oldest, 3
    # sessions). On server-24gb the recommended dynamic setting runs 1.2× the planned p50
    # live: the live pacing drifts the phases through batching patterns a fixed seed
    # does not visit (docs/USER_GUIDE.md "Capacity planner").
    result = plan(load_profile("laptop-8gb"), "fp16", (512, 288), Budget(30.0, 50.0))
    check = verify(result, seconds=10.0)
    # the simulator at the served run's own seed and duration (Verify's planned column is
    # the plan's worst seed): the two then differ only by the engine's timing
    same_run = check["config"].with_changes(backend="emulated")
    planned, live = simulate(same_run)["overall"], check["live"]["overall"]
    jitter = measured_jitter(check["live"])
    rel = 0.10
    if jitter is not None:  # a busy host: the plan with its measured lateness (the app's rule)
        planned = simulate(check["config"], jitter=jitter)["overall"]
        # The lateness is replayed as independent draws; beside two CPU hogs the live
        # run's late wake-ups come in runs (a hog holds the core for its time slice), and
        # its p50 stayed 12-15% over the corrected plan in 2 of 5 runs (11.4 vs 9.93 ms,
        # 11.2 vs 9.98 ms). On a quiet host the plan is held to 10%.
        rel = 0.20
    assert live["mean_fps"] == pytest.approx(planned["mean_fps"], rel=rel)
    assert live["latency_ms"]["p50"] == pytest.approx(planned["latency_ms"]["p50"], rel=rel)


def test_the_verify_object_has_planned_served_and_their_ratio():
    from batchscope.sim.planner import format_verify, verify_json

    def overall(fps: float, p99: float) -> dict:
        return {
            "overall": {
                "mean_fps": fps,
                "min_fps": fps - 1,
                "latency_ms": {"p50": p99 / 2, "p99": p99},
                "throughput_wps": fps * 4,
            }
        }

    config = RunConfig(profile="laptop-8gb", sessions=4, duration_s=10.0)
    check = {
        "config": config,
        "on": "ray",
        "planned": overall(30.0, 40.0),
        "live": overall(24.0, 60.0),
    }
    data = verify_json(check)
    assert data["on"] == "ray"
    keys = {"mean_fps", "min_fps", "p50_ms", "p99_ms", "throughput_wps"}
    assert set(data["planned"]) == set(data["served"]) == set(data["ratio"]) == keys
    assert data["served"]["p99_ms"] == 60.0 and data["ratio"]["p99_ms"] == 1.5
    assert data["ratio"]["mean_fps"] == 0.8
    text = format_verify(check)
    assert "served by a real Ray Serve" in text and "1.500" in text


def test_on_without_verify_is_one_clear_error(capsys):
    assert main(["plan", "--profile", "laptop-8gb", "--p99-ms", "50", "--on", "ray"]) != 0
    err = capsys.readouterr().err
    assert "--verify" in err and "Traceback" not in err
