"""Emulated MIG slices (``NAME@Kg``): the whole curve cut by the documented assumption."""

from __future__ import annotations

import json

import pytest

from batchscope.cli import main
from batchscope.profiles.profile import (
    MIG_COMPUTE,
    MIG_SLICES,
    ProfileError,
    load_profile,
    mig_slice,
    parse_profile,
)


@pytest.mark.parametrize("name", ["laptop-8gb", "server-24gb"])
@pytest.mark.parametrize("k", sorted(MIG_SLICES))
def test_a_slice_takes_for_n_windows_what_the_whole_takes_for_n_times_7_over_k(name, k):
    whole = load_profile(name)
    cut = load_profile(f"{name}@{k}g")
    assert cut.name == f"{name}@{k}g"
    assert cut.memory_total_mb == whole.memory_total_mb * MIG_SLICES[k] / 8
    assert "not measured" in cut.source and cut.meta["mig"]["of"] == name
    for whole_curve, curve in zip(whole.curves, cut.curves, strict=True):
        assert (curve.precision, curve.resolution) == (
            whole_curve.precision,
            whole_curve.resolution,
        )
        for n in range(1, 65):  # past the last point too: both are linear there
            assert curve.ms(n) == pytest.approx(whole_curve.ms(n * MIG_COMPUTE / k), rel=1e-12)
        assert all(p.peak_mb is None for p in curve.points)  # no memory per batch is made up


def test_the_server_curve_cut_in_seven_keeps_its_fixed_cost_per_batch():
    """server-24gb: 8 ms at batch 1, 20 at 3 (2 ms a batch + 6 a window); a 1g slice pays
    7 × 6 ms a window and the 2 ms once: 44 ms for one window, 86 for two."""
    curve = load_profile("server-24gb@1g").curve("fp16", (512, 288))
    assert [curve.ms(n) for n in (1, 2, 3)] == pytest.approx([44.0, 86.0, 128.0])
    assert load_profile("server-24gb@7g").curve("fp16", (512, 288)).ms(3) == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("server-24gb@5g", "MIG slices are 1g, 2g, 3g, 4g, 7g"),
        ("server-24gb@1g@2g", "server-24gb@1g is already a MIG slice"),
        ("nosuch@1g", "profile nosuch: no such profile"),
    ],
)
def test_a_slice_that_cannot_be_cut_is_one_clear_error(name, said):
    with pytest.raises(ProfileError, match=said):
        load_profile(name)


def test_a_profile_measured_on_a_cpu_is_not_cut():
    data = json.loads(load_profile("server-24gb").path.read_text())
    cpu = parse_profile({**data, "name": "box", "device_id": "cpu"}, "box.json")
    with pytest.raises(ProfileError, match="box@2g: box was measured on a CPU"):
        mig_slice(cpu, 2)


def test_seven_slices_are_simulated_as_seven_devices(capsys, tmp_path):
    """`simulate --devices` with slices: each its own device, the label names the slice;
    two 1g slices of the laptop at 256x144 (13.9 ms a window) each carry two sessions."""
    out = tmp_path / "r.json"
    args = ["simulate", "--devices", "emulated:laptop-8gb@1g,laptop-8gb@1g", "--sessions", "4"]
    args += ["--resolution", "256x144", "--duration", "10", "--json", str(out)]
    assert main(args) == 0
    (report,) = json.loads(out.read_text())  # one report a sessions count
    assert [d["device"] for d in report["devices"]] == ["emulated:laptop-8gb@1g"] * 2
    assert report["overall"]["min_fps"] == pytest.approx(30.0, abs=0.2)
    assert 0.75 < report["devices"][0]["busy"] < 1.0  # 2 × 30 windows × 13.9 ms a second


def test_plan_on_slices_that_carry_no_session_says_so(capsys):
    """On a 1g slice of server-24gb one window takes 44 ms: no count of slices carries a
    30 fps session; the planner says so in one line and exits non-zero."""
    code = main(["plan", "--profile", "server-24gb@1g", "--devices", "7", "--p99-ms", "100"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert "no setting meets the budget at 1 session on server-24gb@1g" in err


def test_profiles_names_the_slices(capsys):
    assert main(["profiles"]) == 0
    assert "NAME@1g, NAME@2g, NAME@3g, NAME@4g, NAME@7g" in capsys.readouterr().out
