"""What a segment may claim: perf_analyzer's stability rule, and no figures when too short."""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchscope.cli import main
from batchscope.engine.report.rows import TOO_SHORT, segment_cells
from batchscope.engine.segments import MIN_MEASURED_S, is_stable
from batchscope.engine.stats import item_records
from batchscope.experiment import parse_experiment
from batchscope.sim.simulated_experiment import simulate_experiment


def windows(throughputs: list[int], latencies_s: list[float]) -> np.ndarray:
    """Items delivered over consecutive 1 s windows from t = 0: ``throughputs[k]`` in
    window k, evenly spread, each ``latencies_s[k]`` after its arrival."""
    rows = []
    for k, (n, lat) in enumerate(zip(throughputs, latencies_s, strict=True)):
        for t in k + (np.arange(n) + 0.5) / n:
            rows.append((t - lat, t))
    items = item_records(len(rows))
    items["arrival"], items["result"] = np.array(rows).T
    return items


def test_stable_is_perf_analyzers_max_over_min_rule():
    # ba13837 passed 200, 200, 181 (max − min ≤ 10% of the mean); perf_analyzer's
    # IsInferWindowStable asks max ÷ min ≤ 1.1: 200 / 181 = 1.105
    lat = [0.02] * 3
    assert not is_stable(windows([200, 200, 181], lat), 0.0, 3.0)
    assert is_stable(windows([200, 200, 182], lat), 0.0, 3.0)  # 1.0989


def test_stable_asks_the_mean_latency_too():
    # throughput steady, mean latency 20 → 23 ms (1.15): not stable
    assert not is_stable(windows([100] * 3, [0.020, 0.020, 0.023]), 0.0, 3.0)
    assert is_stable(windows([100] * 3, [0.020, 0.021, 0.0215]), 0.0, 3.0)


def test_stable_looks_at_the_last_three_windows_only():
    items = windows([50, 200, 200, 200], [0.02] * 4)
    assert is_stable(items, 0.0, 4.0)
    assert not is_stable(items, 0.0, 2.0)  # under three whole windows: cannot say


SHORT = """
name = "short"
caption = "steps at 1.02 s and 4.04 s"
duration = 8
[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"
sources = ["synthetic"]
sessions = 3
[[step]]
at = 1.02
policy = "oldest"
[[step]]
at = 4.04
policy = "all"
"""


def test_a_segment_under_the_minimum_has_no_figures_in_any_view():
    # ba13837: segment 0 measured 0.02 s and read 50 fps for 30 fps sessions, Jain 0.90
    report = simulate_experiment(parse_experiment(SHORT))
    first, second = report["segments"][:2]
    assert first["measured_s"] == pytest.approx(0.02, abs=1e-6)
    assert first["measured_s"] < MIN_MEASURED_S
    assert first["too_short"] and first["overall"] is None and first["sessions"] is None
    assert not first["stable"]
    assert not second["too_short"] and second["overall"]["mean_fps"] == pytest.approx(30, rel=0.05)
    cells = segment_cells(first)
    assert cells["mean_fps"] == cells["jain"] == cells["throughput"] == TOO_SHORT


def test_compare_refuses_a_too_short_segment_in_one_line(tmp_path, capsys):
    path = tmp_path / "short.json"
    path.write_text(json.dumps(simulate_experiment(parse_experiment(SHORT))))
    assert main(["compare", str(path), str(path), "--segment", "0,1"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "segment 0 is too short to measure" in err and "short.json" in err


def test_the_html_report_says_too_short(qapp):
    from batchscope.render.page import build_html

    html = build_html(simulate_experiment(parse_experiment(SHORT)))
    assert "Too short to measure: 0.02 s" in html
