"""A verdict against the budget (issue 48, item 2): one line, pass or fail with the margins,
wherever a plan is verified or two segments are compared; one planned p99 per setting; a
recommendation that does not turn on the seeds' noise."""

from __future__ import annotations

import json

import pytest

from batchscope.cli import main
from batchscope.config import RunConfig
from batchscope.profiles.profile import load_profile
from batchscope.sim.planner import Budget, Point, PolicyPlan, plan, recommend

BUDGET = Budget(30.0, 50.0)


def test_the_verdict_says_pass_or_fail_with_each_margin():
    from batchscope.sim.planner.verdict import figures_verdict, verdict

    assert verdict(BUDGET, 29.8, 43.7) == (
        "pass: p99 43.7 ≤ 50 ms ✓ (6.3 to spare), slowest 29.8 fps ≥ 28.5 ✓ (1.3 to spare)"
    )
    line = verdict(BUDGET, 28.49, 50.04)
    # a miss by less than the last digit shown is still a visible miss
    assert line.startswith("FAIL: p99 50.04 > 50 ms ✗ (0.04 over)")
    assert "slowest 28.49 fps < 28.5 ✗ (0.01 short)" in line
    p99_only = figures_verdict({"min_fps": 24.0, "latency_ms": {"p99": 40.0}}, None, 50.0, 0.95)
    assert p99_only.startswith("pass: p99 40.0 ≤ 50 ms ✓") and "no fps floor" in p99_only


def _policy_plan(policy: str, p99: float, best: float) -> PolicyPlan:
    point = Point(4, 8, 30.0, 30.0, p99, 30.0, True, p99_best=best)
    return PolicyPlan(policy, {}, 4, point, 4, 1)


def test_p99s_within_the_seeds_spread_tie_and_the_simpler_policy_wins():
    # the case: dynamic 45.4 vs all 45.7 ms (0.7%); the seeds spread over 3 ms
    noisy = [_policy_plan("dynamic", 45.4, 42.0), _policy_plan("all", 45.7, 42.5)]
    assert recommend(noisy, BUDGET).policy == "all"
    # a difference beyond either spread is the policy's, and the lower p99 wins
    tight = [_policy_plan("dynamic", 30.0, 29.5), _policy_plan("all", 45.7, 45.0)]
    assert recommend(tight, BUDGET).policy == "dynamic"
    # more sessions still come first
    more = PolicyPlan(
        "fixed", {}, 5, Point(5, 8, 30.0, 30.0, 49.0, 30.0, True, p99_best=40.0), 5, 1
    )
    assert recommend([*noisy, more], BUDGET).policy == "fixed"


def test_a_point_keeps_its_best_seed_and_says_its_spread():
    result = plan(load_profile("laptop-8gb"), "fp16", (256, 144), BUDGET, ["all"], seeds=3)
    point = result.recommended.at_max
    assert point.p99_best is not None and point.p99_best <= point.p99_worst
    assert point.to_json()["spread"]["p99_best"] == point.p99_best


def _check(served_fps: float, served_p99: float) -> dict:
    def overall(fps: float, p99: float) -> dict:
        return {
            "overall": {
                "mean_fps": fps,
                "min_fps": fps - 1,
                "latency_ms": {"p50": p99 / 2, "p99": p99},
                "throughput_wps": fps * 4,
            }
        }

    return {
        "config": RunConfig(profile="laptop-8gb", sessions=4, duration_s=10.0),
        "on": "inprocess",
        "planned": overall(30.0, 40.0),
        "live": overall(served_fps, served_p99),
        "budget": BUDGET,
    }


def test_verify_says_the_served_run_against_the_budget():
    from batchscope.sim.planner import format_verify, verify_json

    passed = verify_json(_check(30.5, 43.7))["verdict"]
    assert passed["pass"] and passed["p99_margin_ms"] == pytest.approx(6.3)
    assert passed["min_fps_margin"] == pytest.approx(1.0)
    assert "served pass: p99 43.7 ≤ 50 ms ✓" in format_verify(_check(30.5, 43.7))
    failed = verify_json(_check(30.5, 61.0))["verdict"]
    assert not failed["pass"] and failed["line"].startswith("FAIL: p99 61.0 > 50 ms ✗ (11.0 over)")


@pytest.mark.slow
def test_verify_plans_with_the_figures_of_the_plan_table():
    """One planned p99 per setting: Verify's planned column is the plan's own (worst of its
    seeds over its duration), not a second simulation at seed 0 for the verify's 10 s."""
    from batchscope.sim.planner import verify, verify_json

    result = plan(load_profile("laptop-8gb"), "fp16", (256, 144), BUDGET, ["all"], seeds=3)
    check = verify(result, seconds=2.0, warmup_s=0.5)
    data = verify_json(check)
    point = result.recommended.at_max
    assert data["planned"]["p99_ms"] == point.p99_worst
    assert data["planned"]["min_fps"] == point.min_fps_worst
    assert data["planned"]["mean_fps"] == point.mean_fps
    assert "verdict" in data


def _report(path, sessions: int, policy: str) -> str:
    args = ["simulate", "--profile", "laptop-8gb", "--precision", "fp16",
            "--resolution", "512x288", "--sessions", str(sessions), "--policy", policy,
            "--duration", "6", "--json", str(path)]  # fmt: skip
    assert main(args) == 0
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data[0] if isinstance(data, list) else data))
    return str(path)


def test_compare_judges_each_run_against_the_budget_asked_for(tmp_path, capsys):
    a = _report(tmp_path / "a.json", 3, "all")
    b = _report(tmp_path / "b.json", 5, "oldest")
    capsys.readouterr()
    assert main(["compare", a, b, "--p99-ms", "50"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = [x for x in out if x.startswith(("A  pass", "A  FAIL", "B  pass", "B  FAIL"))]
    assert len(lines) == 2
    assert lines[0].startswith("A  pass: p99 ") and "slowest 30.0 fps ≥ 28.5 ✓" in lines[0]
    assert lines[1].startswith("B  FAIL: ") and "fps < 28.5 ✗" in lines[1]
    assert main(["compare", a, b]) == 0
    assert "pass:" not in capsys.readouterr().out  # no budget asked: no verdict
    assert main(["compare", a, b, "--p99-ms", "0"]) == 2
    err = capsys.readouterr().err
    assert "--p99-ms" in err and "Traceback" not in err


def _segment(index: int, min_fps: float, p99: float) -> dict:
    return {
        "index": index,
        "start_s": 10.0 * index,
        "end_s": 10.0 * index + 10.0,
        "changes": {"sessions": 4},
        "config": {"sessions": 4, "policy": "all", "fps": 30.0},
        "caption": "",
        "stable": True,
        "measured_s": 9.0,
        "overall": {
            "throughput_wps": 120.0,
            "mean_fps": 30.0,
            "min_fps": min_fps,
            "jain": 1.0,
            "overwritten": 0,
            "latency_ms": {"mean": 20.0, "p50": 20.0, "p95": 30.0, "p99": p99, "max": p99},
            "batch_sizes": {"4": 10},
            "busy": 0.5,
        },
        "sessions": [{"delivered": 270}] * 4,
        "predicted": None,
    }


def test_the_segments_table_judges_two_compared_segments(qtbot):
    from batchscope.ui.segment_table import SegmentTable
    from batchscope.ui.segment_table.feed import SegmentUpdate
    from batchscope.ui.theme import Look

    table = SegmentTable(Look())
    qtbot.addWidget(table)
    table.show()
    segments = [_segment(0, 29.8, 43.7), _segment(1, 24.0, 61.0)]
    table.update_from(SegmentUpdate(segments, None, None, 0.0))
    table.set_budget(50.0, 0.95)
    table.select(0, 1)
    qtbot.waitUntil(lambda: table.verdict.isVisible())
    a, b = table.verdict.text().splitlines()
    assert a == (
        "A: seg 0 pass: p99 43.7 ≤ 50 ms ✓ (6.3 to spare), slowest 29.8 fps ≥ 28.5 ✓ (1.3 to spare)"
    )
    assert b.startswith("B: seg 1 FAIL: p99 61.0 > 50 ms ✗ (11.0 over)")
    table.set_budget(70.0, 0.5)  # the Capacity tab's budget changed: judged again
    assert table.verdict.text().splitlines()[1].startswith("B: seg 1 pass: p99 61.0 ≤ 70 ms ✓")
    table.select(0)
    assert not table.verdict.isVisible()


def test_the_capacity_budget_reaches_whoever_listens(qtbot):
    from batchscope.ui.capacity import CapacityPresenter
    from test_ui_capacity import FakeDashboard, laptop

    # no frame rate: nothing to plan, so no planner starts; the budget is still taken
    presenter = CapacityPresenter(FakeDashboard(laptop(fps=None)))
    seen = []
    presenter.budget_changed.connect(lambda p99, ratio: seen.append((p99, ratio)))
    assert presenter.set_budget("40", "0.9") is None
    assert seen == [(40.0, 0.9)]
    assert presenter.set_budget("-1", "0.9") is not None
    assert seen == [(40.0, 0.9)]
    presenter.shutdown()
