"""The grouped summaries (one pass for every session) against their definitions."""

from __future__ import annotations

import numpy as np
import pytest

from batchscope.engine.stats import (
    PERCENTILES,
    STAGES,
    host_late_summaries,
    item_records,
    latency_summaries,
    latency_summary,
    stage_means,
    stage_means_grouped,
)


def test_grouped_percentiles_are_numpys_to_the_bit():
    rng = np.random.default_rng(7)
    for _ in range(400):
        counts = rng.integers(0, 60, size=int(rng.integers(1, 12)))
        kind = rng.integers(3)  # continuous, ties, a few distinct values
        values = rng.exponential(20.0, int(counts.sum()))
        if kind == 1:
            values = np.round(values)
        elif kind == 2:
            values = rng.choice([1.0, 2.5, 1e-9, 33.333], int(counts.sum()))
        got = latency_summaries(values, counts)
        start = 0
        for count, summary in zip(counts.tolist(), got, strict=True):
            group = values[start : start + count]
            start += count
            if count == 0:
                assert summary == dict.fromkeys(("mean", "p50", "p95", "p99", "max"), 0.0)
                continue
            for q, p in zip(PERCENTILES, np.percentile(group, PERCENTILES), strict=True):
                assert summary[f"p{q}"] == round(float(p), 3), (q, group)
            assert summary["max"] == round(float(group.max()), 3)
            assert summary["mean"] == pytest.approx(round(float(group.mean()), 3), abs=1e-3)


def test_one_group_is_the_summary_of_a_session():
    values = np.array([5.0, 1.0, 3.0, 2.0, 4.0])
    assert latency_summary(values) == {"mean": 3.0, "p50": 3.0, "p95": 4.8, "p99": 4.96, "max": 5.0}
    assert latency_summary([]) == dict.fromkeys(("mean", "p50", "p95", "p99", "max"), 0.0)


def test_grouped_stage_means_are_each_groups_means():
    rng = np.random.default_rng(3)
    counts = [3, 0, 5, 1]
    items = item_records(sum(counts))
    items["arrival"] = rng.uniform(0, 1, items.size)
    items["host_wait"] = rng.uniform(0, 0.001, items.size)
    items["host_device"] = rng.uniform(0, 0.001, items.size)
    items["start"] = items["arrival"] + rng.uniform(0.002, 0.01, items.size)
    items["prep_end"] = items["start"] + 0.001
    items["compute_end"] = items["prep_end"] + rng.uniform(0.005, 0.02, items.size)
    items["result"] = items["compute_end"] + 0.0005
    got = stage_means_grouped(items, counts)
    assert got[1] == dict.fromkeys(STAGES, 0.0)
    start = 0
    for count, means in zip(counts, got, strict=True):
        mine = items[start : start + count]
        start += count
        if count:
            assert means == stage_means(mine)
            total = sum(means.values())
            latency = float(np.mean(mine["result"] - mine["arrival"])) * 1000.0
            assert total == pytest.approx(latency, abs=5e-3)  # the stages add up


def test_grouped_host_lateness_is_numpys_percentile_of_each_group():
    """The report summarises every session in one pass: each group's p50 and p99 are
    ``np.percentile``'s of its own lateness, to the bit (the per-session call it replaced)."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        counts = rng.integers(0, 40, size=int(rng.integers(1, 10)))
        items = item_records(int(counts.sum()))
        late = rng.exponential(0.002, items.size)
        items["host_late"] = np.where(rng.random(items.size) < 0.3, 0.0, late)  # many ties at 0
        start = 0
        for count, got in zip(counts.tolist(), host_late_summaries(items, counts), strict=True):
            group = items["host_late"][start : start + count] * 1000.0
            start += count
            want = np.percentile(group, [50, 99]) if count else [0.0, 0.0]
            assert got == {"p50": round(float(want[0]), 3), "p99": round(float(want[1]), 3)}
