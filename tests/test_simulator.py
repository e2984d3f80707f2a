"""The discrete-event simulator and `batchscope simulate`: the study's findings, the
report contract, determinism, and one-line errors for bad input. (Its speed is a
benchmark: benchmarks/sim_speed.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from batchscope.cli import main
from batchscope.config import RunConfig
from batchscope.engine.session import WINDOW
from batchscope.profiles.profile import load_profile
from batchscope.sim.simulator import simulate
from contract import LATENCY_KEYS, OVERALL_KEYS, SESSION_KEYS, STAGE_KEYS
from simulated import session_phases, simulate_trace

LAPTOP_B1_WPS = 1000.0 / 9.82  # laptop-8gb fp16 512x288 at batch 1: 101.8 windows/s


def scenario(policy: str, sessions: int = 4, **changes: object) -> RunConfig:
    """laptop-8gb fp16 512x288 at 30 fps: 4 sessions offer 120 windows/s, more than it serves."""
    return RunConfig(
        sessions=sessions,
        policy=policy,
        backend="emulated",
        profile="laptop-8gb",
        precision="fp16",
        resolution=(512, 288),
        duration_s=30.0,
        **changes,
    )


@pytest.fixture(scope="module")
def overload() -> dict[str, dict]:
    return {p: simulate(scenario(p)) for p in ("oldest", "round-robin", "all")}


def test_oldest_first_starves_a_session_under_overload(overload: dict[str, dict]) -> None:
    overall = overload["oldest"]["overall"]
    assert overall["min_fps"] < 0.6 * overall["mean_fps"]


def test_batch_all_gives_every_session_the_same_fps(overload: dict[str, dict]) -> None:
    overall = overload["all"]["overall"]
    assert overall["jain"] > 0.99
    assert overall["min_fps"] > 0.97 * overall["mean_fps"]


def test_round_robin_is_fair(overload: dict[str, dict]) -> None:
    overall = overload["round-robin"]["overall"]
    assert overall["jain"] > 0.99
    assert overall["min_fps"] > 0.97 * overall["mean_fps"]


@pytest.mark.parametrize("policy", ["oldest", "round-robin"])
def test_one_at_a_time_throughput_follows_batch_one(overload: dict[str, dict], policy: str) -> None:
    assert overload[policy]["overall"]["throughput_wps"] == pytest.approx(LAPTOP_B1_WPS, rel=0.02)
    assert set(overload[policy]["overall"]["batch_sizes"]) == {"1"}


def test_batching_lowers_throughput_on_the_laptop_gpu(overload: dict[str, dict]) -> None:
    # PRODUCT.md: at 512x288 the first window already fills the laptop GPU.
    assert (
        overload["all"]["overall"]["throughput_wps"]
        < overload["oldest"]["overall"]["throughput_wps"]
    )


def test_throughput_counts_what_was_delivered_in_the_interval() -> None:
    # 16 sessions at 120 fps keep batches of 8 full (103.77 ms each). Counting windows by
    # arrival after the warm-up loses the first batch, whose windows arrived before it:
    # 75.2 windows/s instead of the curve's 77.1 (-2.5%) in a 5 s run
    config = scenario("all", sessions=16, fps=120.0, max_batch=8).with_changes(duration_s=5.0)
    report = simulate(config)
    assert report["overall"]["batch_sizes"] == {"8": 48}
    curve = load_profile("laptop-8gb").curve("fp16", (512, 288))
    assert report["overall"]["throughput_wps"] == pytest.approx(curve.windows_per_s(8), rel=0.01)


def test_light_load_delivers_every_frame() -> None:
    report = simulate(scenario("all", sessions=2))
    assert report["overall"]["min_fps"] == pytest.approx(30.0, abs=0.1)
    assert report["overall"]["overwritten"] == 0


def test_same_seed_same_report_other_seed_other_phases() -> None:
    a, b = simulate(scenario("oldest")), simulate(scenario("oldest"))
    assert a == b
    c = simulate(scenario("oldest", seed=1))
    assert [s["fps"] for s in c["sessions"]] != [s["fps"] for s in a["sessions"]]


def test_phases_are_drawn_like_the_live_feeder() -> None:
    import random

    rng = random.Random(7)
    assert session_phases(3, 30.0, 7) == [rng.random() / 30.0 for _ in range(3)]


def test_first_window_is_published_at_the_third_frame() -> None:
    config = RunConfig(sessions=1, policy="oldest", duration_s=1.0)
    trace = simulate_trace(
        config, load_profile("laptop-8gb").curve("fp16", (512, 288)), warmup_s=0.0
    )
    phase = session_phases(1, 30.0, 0)[0]
    assert trace.items["arrival"][0] == pytest.approx(phase + (WINDOW - 1) / 30.0)


def test_records_follow_the_definitions() -> None:
    config = scenario("all", sessions=6)
    curve = load_profile("laptop-8gb").curve("fp16", (512, 288))
    trace = simulate_trace(config, curve)
    items, batches = trace.items, trace.batches
    assert np.all(items["prep_end"] == items["start"])  # no prep on a simulated device
    assert np.all(items["result"] == items["compute_end"])  # nor post-processing
    assert np.all(items["start"] >= items["arrival"])
    for size in np.unique(batches["size"]):
        mine = batches[batches["size"] == size]
        assert np.allclose(mine["compute_s"] * 1000.0, curve.ms(int(size)))
    # One batch on the device at a time.
    assert np.all(batches["start"][1:] >= batches["end"][:-1] - 1e-12)
    # Every window published in the interval was delivered, overwritten, or still pending
    # (at most one per session, plus one in flight per session at each end).
    for sid in range(config.sessions):
        published = (config.fps or 0) * config.duration_s
        accounted = np.count_nonzero(items["session"] == sid) + trace.overwritten[sid]
        assert published - 3 <= accounted <= published + 1


@pytest.mark.parametrize(("delay_ms", "p50_ms"), [(5.0, 5.0 + 9.82), (20.0, 20.0 + 9.82)])
def test_dynamic_waits_its_delay_for_a_fuller_batch(delay_ms: float, p50_ms: float) -> None:
    # One session never fills a batch of 8: every window waits out the delay, then runs alone.
    report = simulate(scenario("dynamic", sessions=1, max_batch=8, max_delay_ms=delay_ms))
    assert report["overall"]["latency_ms"]["p50"] == pytest.approx(p50_ms, abs=0.01)
    assert report["overall"]["mean_fps"] == pytest.approx(30.0, abs=0.1)


def test_adaptive_grows_its_cap_only_under_its_objective() -> None:
    loose = simulate(scenario("adaptive", sessions=8, slo_ms=1000.0))
    tight = simulate(scenario("adaptive", sessions=8, slo_ms=5.0))
    assert max(int(k) for k in loose["overall"]["batch_sizes"]) > 1
    assert set(tight["overall"]["batch_sizes"]) == {"1"}


def test_report_schema_is_the_contract(overload: dict[str, dict]) -> None:
    report = overload["all"]
    assert {"kind", "config", "sessions", "overall", "memory"} <= set(report)
    assert report["kind"] == "simulate"
    assert {
        "policy",
        "sessions",
        "precision",
        "resolution",
        "fps",
        "duration_s",
        "backend",
        "device",
        "profile",
    } <= set(report["config"])
    assert report["config"]["resolution"] == [512, 288]
    for s in report["sessions"]:
        assert set(s) == SESSION_KEYS
        assert set(s["latency_ms"]) == LATENCY_KEYS
        assert set(s["stages_ms"]) == STAGE_KEYS
    assert set(report["overall"]) == OVERALL_KEYS
    assert set(report["overall"]["latency_ms"]) == LATENCY_KEYS
    assert 0.0 < report["overall"]["busy"] <= 1.0
    json.dumps(report)


# -- the command line ---------------------------------------------------------------------


def test_grid_prints_the_table_and_writes_a_json_list(tmp_path: Path, capsys) -> None:
    out = tmp_path / "grid.json"
    rc = main(
        [
            "simulate",
            "--profile",
            "laptop-8gb",
            "--precision",
            "fp16",
            "--resolution",
            "512x288",
            "--sessions",
            "3,4",
            "--policy",
            "oldest,all",
            "--duration",
            "5",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "mean fps" in text and "overwr %" in text and "thru w/s" in text
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert [(r[0], r[1]) for r in rows] == [
        ("3", "oldest"),
        ("3", "all"),
        ("4", "oldest"),
        ("4", "all"),
    ]
    reports = json.loads(out.read_text())
    assert [(r["config"]["sessions"], r["config"]["policy"]) for r in reports] == [
        (3, "oldest"),
        (3, "all"),
        (4, "oldest"),
        (4, "all"),
    ]
    assert all(r["kind"] == "simulate" for r in reports)


def test_json_to_stdout_moves_the_table_to_stderr(capsys) -> None:
    rc = main(
        [
            "simulate",
            "--sessions",
            "2",
            "--policy",
            "dynamic",
            "--max-batch",
            "8",
            "--max-delay-ms",
            "20",
            "--duration",
            "2",
            "--json",
            "-",
        ]
    )
    assert rc == 0
    captured = capsys.readouterr()
    (report,) = json.loads(captured.out)
    assert report["config"]["max_delay_ms"] == 20.0
    assert "dynamic ≤8, 20 ms" in captured.err


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def test_zero_sessions_is_one_line_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--sessions", "4,0"])
    assert exc.value.code == 2
    assert "--sessions" in _one_error_line(capsys)


def test_zero_fps_is_one_line_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:  # argparse refuses it with the knob's range
        main(["simulate", "--fps", "0"])
    assert exc.value.code == 2
    assert "--fps" in _one_error_line(capsys)


def test_resolution_the_profile_lacks_is_one_line_exit_2(capsys) -> None:
    assert main(["simulate", "--profile", "laptop-8gb", "--resolution", "640x360"]) == 2
    err = _one_error_line(capsys)
    assert "640x360" in err and "512x288" in err  # what it asked for and what there is


def test_precision_the_profile_lacks_is_one_line_exit_2(capsys) -> None:
    assert main(["simulate", "--profile", "server-24gb", "--precision", "fp32"]) == 2
    assert "fp32" in _one_error_line(capsys)


def _profile_file(tmp_path: Path, points: list[dict], **top: object) -> Path:
    data = {
        "name": "broken",
        "curves": [{"precision": "fp16", "resolution": [512, 288], "points": points}],
        **top,
    }
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("points", "field"),
    [
        ([{"batch": 1}], "points[0].ms"),
        ([{"batch": 1, "ms": -3.0}], "points[0].ms"),
        ([{"batch": 1, "ms": 10.0}, {"batch": 2, "ms": 8.0}], "points"),
    ],
    ids=["missing-ms", "negative-ms", "time-falls"],
)
def test_malformed_profile_is_one_line_naming_the_field(
    tmp_path: Path, capsys, points: list[dict], field: str
) -> None:
    path = _profile_file(tmp_path, points)
    assert main(["simulate", "--profile", str(path)]) == 2
    err = _one_error_line(capsys)
    assert str(path) in err and field in err


def test_profile_without_curves_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "nocurves.json"
    path.write_text(json.dumps({"name": "x"}))
    assert main(["simulate", "--profile", str(path)]) == 2
    assert "curves" in _one_error_line(capsys)


def test_profile_found_by_its_declared_name_too(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    folder = tmp_path / "batchscope" / "profiles"
    folder.mkdir(parents=True)
    data = json.loads((Path(__file__).parents[1] / "assets/profiles/server-24gb.json").read_text())
    data["name"] = "cpu-demo"
    (folder / "mybox.json").write_text(json.dumps(data))
    assert load_profile("cpu-demo").name == "cpu-demo"
    assert load_profile("mybox").name == "cpu-demo"


def test_seeds_show_the_spread_over_phase_draws(capsys) -> None:
    from batchscope.config import RunConfig
    from batchscope.sim.seeds import seed_spread

    # server-24gb, 5 sessions, oldest first: the slowest session gets 10, 10, 5, 5, 15,
    # 15, 10, 15 fps for seeds 0-7 (docs/FINDINGS.md)
    config = RunConfig(profile="server-24gb", sessions=5, policy="oldest", duration_s=30.0)
    spread = seed_spread(config, 8)
    assert (spread["min_fps_worst"], spread["min_fps_median"]) == pytest.approx(
        (5.0, 10.0), abs=0.1
    )
    assert spread["worst_seed"] == 2
    assert (
        main(
            [
                "simulate",
                "--profile",
                "server-24gb",
                "--sessions",
                "5",
                "--policy",
                "oldest",
                "--seeds",
                "8",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "min worst" in table and "spread over seeds 0–7" in table


@pytest.mark.parametrize("policy", ["oldest", "round-robin", "all", "dynamic"])
def test_the_simulators_inline_mailbox_keeps_the_real_mailboxes_rule(policy: str) -> None:
    """The simulator's loop applies the latest-only rule inline for speed; it must stay the
    rule of engine/session.py's Mailboxes. Every window the run published is replayed into the
    real mailboxes, each batch takes its sessions from them at its start: the windows it
    took (arrival, session) are the real ones, and so are the overwrites counted."""
    import numpy as np

    from batchscope.engine.session import Mailboxes, Window
    from batchscope.sim.devices import load_devices, play_devices

    config = RunConfig(backend="emulated", profile="laptop-8gb", sessions=12, policy=policy,
                       max_batch=4, max_delay_ms=20.0, duration_s=3.0, seed=5)  # fmt: skip
    (device,) = load_devices(["laptop-8gb"])
    played = play_devices(config, [device.curve(config)], "pinned", 0.0)
    (schedule,) = played.clock.schedules
    times, sessions = schedule.times_array.tolist(), schedule.sessions_array.tolist()
    frame = np.zeros((2, 2, 3), np.uint8)
    real, i, k = Mailboxes(), 0, 0
    arrivals, taken_by = played.delivered
    for batch in played.measured:
        while i < len(times) and times[i] <= batch.start:  # published by the batch's start
            real.publish(Window(sessions[i], 0, 0, (frame,) * 3, times[i]))
            i += 1
        took = real.take(taken_by[k : k + batch.size])  # in the order the batch has them
        assert [(w.arrival, w.session) for w in took] == list(
            zip(arrivals[k : k + batch.size], taken_by[k : k + batch.size], strict=True)
        )
        k += batch.size
    assert k == len(arrivals) > 50
    over = played.clock.overwrites()
    assert int(np.sum(over["t"] <= played.measured[-1].start)) == sum(real.overwritten().values())
