"""Several devices in the simulator and the planner (sim/devices.py, sim/planner/devices.py):
one device plays as the one-device simulator does, the routers' rules, the report's
``devices`` list, and the planner's answers for N devices and for S sessions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchscope.cli import main
from batchscope.config import ConfigError, RunConfig, parse_devices
from batchscope.profiles.profile import ProfileError, load_profile
from batchscope.sim.devices import (
    devices_report,
    load_devices,
    mixed_shapes,
    play_devices,
    play_devices_experiment,
    simulate_devices,
)
from batchscope.sim.host_jitter import HostJitter
from batchscope.sim.planner import Budget, plan
from batchscope.sim.planner.devices import (
    DevicesSearch,
    fewest_devices,
    seed_figures,
    sessions_for_devices,
)
from batchscope.sim.simulator import simulate

LAPTOP = dict(backend="emulated", profile="laptop-8gb", precision="fp16", resolution=(512, 288))
SETTINGS = [
    ("oldest", {}),
    ("round-robin", {}),
    ("all", {"max_batch": 8}),
    ("dynamic", {"max_batch": 4, "max_delay_ms": 5.0}),
    ("fixed", {"batch": 4, "max_delay_ms": 10.0}),
    ("adaptive", {"slo_ms": 40.0}),
]
FIGURES = ("throughput_wps", "min_fps", "mean_fps", "latency_ms", "overwritten", "batch_sizes")


@pytest.mark.parametrize(("policy", "knobs"), SETTINGS)
@pytest.mark.parametrize("sessions", [2, 6])  # under and over what one device carries
def test_one_device_plays_as_the_one_device_simulator(policy, knobs, sessions):
    config = RunConfig(sessions=sessions, policy=policy, duration_s=5.0, **LAPTOP, **knobs)
    alone = simulate(config)["overall"]
    for router in ("pinned", "least-loaded"):
        report = simulate_devices(config, load_devices(["laptop-8gb"]), router)
        for key in FIGURES:
            assert report["overall"][key] == alone[key], (router, key)
        assert report["overall"]["busy"] == alone["busy"]
        assert report["devices"][0]["batch_sizes"] == alone["batch_sizes"]


@pytest.mark.parametrize("sessions", [3, 8])
def test_a_deadline_drop_on_one_device_plays_as_the_one_device_simulator(sessions):
    """--drop-after-ms on the devices' loop: one device drops what the one-device loop
    drops, at the same instants (8 sessions overload the laptop: windows expire)."""
    config = RunConfig(
        sessions=sessions, policy="oldest", drop_after_ms=20.0, duration_s=5.0, **LAPTOP
    )
    alone = simulate(config)
    report = simulate_devices(config, load_devices(["laptop-8gb"]), "least-loaded")
    for key in (*FIGURES, "expired"):
        assert report["overall"][key] == alone["overall"][key], key
    assert (report["overall"]["expired"] > 0) == (sessions == 8)
    # on two devices the same sessions fit: nothing waits past the limit
    two = simulate_devices(config, load_devices(["laptop-8gb"] * 2), "least-loaded")
    assert two["overall"]["expired"] < report["overall"]["expired"] or sessions == 3


@pytest.mark.parametrize("router", ["pinned", "least-loaded"])
@pytest.mark.parametrize("seed", [0, 1, 3])
def test_a_run_whose_last_batch_ends_before_its_end_finishes(router, seed):
    """One session on two devices: its last batch ends before the run does and nothing is
    left to happen (CI: a live segment's prediction crashed on the infinity that says so).
    Every window the session sent is served, as on one device."""
    config = RunConfig(sessions=1, policy="all", duration_s=2.0, seed=seed, **LAPTOP)
    alone = simulate(config)["overall"]
    report = simulate_devices(config, load_devices(["laptop-8gb"] * 2), router)
    assert report["overall"]["throughput_wps"] == alone["throughput_wps"] > 0
    assert report["overall"]["latency_ms"] == alone["latency_ms"]


def test_pinned_deals_sessions_by_count_and_keeps_each_on_its_device():
    config = RunConfig(sessions=7, policy="all", duration_s=3.0, **LAPTOP)
    curves = [d.curve(config) for d in load_devices(["laptop-8gb"] * 3)]
    played = play_devices(config, curves, "pinned")
    assert played.pinned == [3, 2, 2]
    on = np.array([m[3] for m in played.measured])
    sessions = np.array(played.delivered[1])
    item_on = np.repeat(on, [m[1] for m in played.measured])
    for d in range(3):
        assert set(sessions[item_on == d]) == {s for s in range(7) if s % 3 == d}
    report = simulate_devices(config, load_devices(["laptop-8gb"] * 3), "pinned")
    assert [d["sessions"] for d in report["devices"]] == [3, 2, 2]
    assert all(max(map(int, d["batch_sizes"])) <= d["sessions"] for d in report["devices"])


def test_latest_only_holds_per_session_across_devices():
    """Every window published is delivered, overwritten, or still waiting at the end:
    a session never has two windows waiting on two devices."""
    config = RunConfig(sessions=24, policy="all", duration_s=4.0, **LAPTOP)
    report = simulate_devices(config, load_devices(["laptop-8gb"] * 2), "least-loaded", 0.0)
    published = sum(s["delivered"] + s["overwritten"] for s in report["sessions"])
    frames = sum(len(np.arange(2, 4.0 * 30)) for _ in range(24))  # from the 3rd frame on
    assert frames - 2 * 24 <= published <= frames + 24  # phases move a frame in or out
    assert report["overall"]["overwritten"] > 0  # 24 sessions overload two laptops


def test_least_loaded_sends_more_windows_to_the_faster_device():
    """A laptop beside a server: pinned gives each half the sessions, so the laptop's
    sessions starve; least-loaded places windows where fewer wait."""
    devices = load_devices(["laptop-8gb", "server-24gb"])
    config = RunConfig(sessions=12, policy="all", duration_s=10.0, **LAPTOP)
    pinned = simulate_devices(config, devices, "pinned")
    least = simulate_devices(config, devices, "least-loaded")
    served = lambda r: [sum(int(k) * n for k, n in d["batch_sizes"].items()) for d in r["devices"]]  # noqa: E731
    assert served(pinned)[0] < served(pinned)[1]  # the laptop is the slower one
    assert least["overall"]["min_fps"] > pinned["overall"]["min_fps"]
    assert least["overall"]["throughput_wps"] >= pinned["overall"]["throughput_wps"]
    labels = [d["device"] for d in least["devices"]]
    assert labels == ["emulated:laptop-8gb", "emulated:server-24gb"]


def test_device_lists_name_profiles_and_refuse_real_devices():
    assert parse_devices("3", "laptop-8gb") == ["laptop-8gb"] * 3
    assert parse_devices("emulated:laptop-8gb, server-24gb", "x") == ["laptop-8gb", "server-24gb"]
    for bad, why in [("0", "at most 256"), ("cuda:0,cuda:1", "real device"), ("a,,b", "a count")]:
        with pytest.raises(ConfigError, match=why):
            parse_devices(bad, "laptop-8gb")
    config = RunConfig(sessions=2, policy="all", duration_s=1.0, neighbours=2, **LAPTOP)
    with pytest.raises(ConfigError, match="neighbours"):
        simulate_devices(config, load_devices(["laptop-8gb"] * 2), "pinned")
    with pytest.raises(ConfigError, match="unknown router"):
        simulate_devices(config, load_devices(["laptop-8gb"]), "random")


def test_simulate_devices_cli_reports_the_devices(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["simulate", "--devices", "2", "--router", "least-loaded", "--sessions", "8",
            "--duration", "3", "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "2 devices (emulated:laptop-8gb), router least-loaded" in text
    assert "device 1  emulated:laptop-8gb" in text
    (report,) = json.loads(out.read_text())
    assert report["router"] == "least-loaded"
    assert (
        report["device_label"] == "simulated: 2 devices (emulated:laptop-8gb), router least-loaded"
    )
    keys = {"device", "sessions", "busy", "batch_sizes"}
    assert [set(d) for d in report["devices"]] == [keys, keys]
    windows = sum(int(k) * n for d in report["devices"] for k, n in d["batch_sizes"].items())
    assert windows == sum(s["delivered"] for s in report["sessions"])


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--devices", "cuda:0"], "real device"),
        (["--router", "pinned"], "give --devices too"),
        (["--devices", "2", "--experiment", "bus-or-taxi"], "conflicts with the experiment"),
        (["--devices", "nope,laptop-8gb"], "profile nope"),
    ],
)
def test_simulate_devices_bad_input_is_one_line(args, said, capsys):
    assert main(["simulate", *args]) != 0
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


@pytest.fixture(scope="module")
def server_plan():
    # server-24gb at 512x288, p99 ≤ 100 ms: one device carries 5 sessions (dynamic ≤4, 5 ms)
    return plan(load_profile("server-24gb"), "fp16", (512, 288), Budget(30.0, 100.0), seeds=4,
                duration_s=10.0)  # fmt: skip


def test_sessions_for_n_devices_is_n_times_one_device_pinned(server_plan):
    m = server_plan.recommended.max_sessions
    assert m == 5
    answer = sessions_for_devices(server_plan, load_profile("server-24gb"), 3)
    assert answer.sessions >= 3 * m and answer.per_device == m
    assert answer.tried[0] == (3, "pinned", 15, True)
    assert answer.tried[-1][3] is False  # least-loaded tried upwards until a count failed
    budget = server_plan.budget
    assert budget.meets(answer.min_fps_worst, answer.p99_worst)
    # the partition judged by the one-device runs holds when the devices play together
    search = DevicesSearch(server_plan, load_profile("server-24gb"))
    assert search._played(3, "pinned", 15)
    assert not search._played(3, "pinned", 18)  # 6 a device: one over what one carries


def test_fewest_devices_for_s_sessions(server_plan):
    profile = load_profile("server-24gb")
    answer = fewest_devices(server_plan, profile, 23)
    assert answer is not None
    # pinned needs ⌈23/5⌉ = 5; least-loaded never needs more
    assert answer.devices <= 5
    assert (5, "pinned", 23, True) in answer.tried
    if answer.router == "least-loaded":
        assert (answer.devices, "least-loaded", 23, True) in answer.tried
        assert any(d == answer.devices - 1 and not ok for d, _, _, ok in answer.tried)
    assert fewest_devices(server_plan, profile, 23, devices_max=answer.devices - 1) is None


def test_forked_seeds_give_the_same_answer_as_one_process(server_plan):
    """Least-loaded's seeds played in two forked workers: the same counts tried, the same
    answer and figures, and no worker left behind."""
    import multiprocessing

    profile = load_profile("server-24gb")
    alone = fewest_devices(server_plan, profile, 23)
    forked = fewest_devices(server_plan, profile, 23, workers=2)
    assert forked == alone
    assert multiprocessing.active_children() == []


def test_plan_sessions_cli_json_has_devices_and_router(tmp_path, capsys):
    out = tmp_path / "plan.json"
    args = ["plan", "--profile", "server-24gb", "--p99-ms", "100", "--seeds", "2", "--duration",
            "5", "--policies", "dynamic", "--sessions", "12", "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    assert "fewest devices for 12 sessions" in capsys.readouterr().out
    rec = json.loads(out.read_text())["recommended"]
    assert {"policy", "params", "devices", "router", "max_sessions"} <= set(rec)
    assert rec["router"] in ("pinned", "least-loaded") and 1 <= rec["devices"] <= 3
    assert rec["max_sessions"] == 12


def test_plan_devices_and_sessions_together_is_one_clear_error(capsys):
    args = ["plan", "--p99-ms", "50", "--devices", "2", "--sessions", "8"]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "give one" in err and "Traceback" not in err


def test_plan_verify_on_several_devices_is_refused_on_triton_only(capsys):
    """--verify on N devices: BatchScope's worker or Ray; Triton serves one instance."""
    assert main(["plan", "--p99-ms", "50", "--devices", "2", "--verify", "--on", "triton"]) != 0
    err = capsys.readouterr().err
    assert "BatchScope's Triton serves one model instance" in err and "Traceback" not in err


def test_a_stall_and_a_burst_change_one_sessions_pace_on_several_devices():
    """Paces as the burst and stall faults set them live: the stalled session sends
    nothing for its 10 s (20 fps over 30 s), the bursting one sends 3x for 10 s."""
    from batchscope.sim.devices import Pace, devices_report

    config = RunConfig(sessions=6, policy="all", duration_s=30.0, **LAPTOP)
    devices = load_devices(["laptop-8gb"] * 2)
    curves = [d.curve(config) for d in devices]
    paces = (Pace(10.0, 1, 0.0), Pace(20.0, 1, 1.0), Pace(10.0, 0, 3.0), Pace(20.0, 0, 1.0))
    for router in ("pinned", "least-loaded"):
        played = play_devices(config, curves, router, 1.0, paces)
        fps = [s["fps"] for s in devices_report(played, config, devices, router, 1.0)["sessions"]]
        assert fps[1] == pytest.approx(20.0, abs=0.2)  # stalled a third of the run
        assert fps[0] > 30.0  # the burst: more windows than 30 fps, some delivered
        assert all(f == pytest.approx(30.0, abs=0.2) for f in fps[2:])
    with pytest.raises(ConfigError, match="no such session"):
        play_devices(config, curves, "pinned", 1.0, (Pace(1.0, 9, 0.0),))


#: a host late by the same amount every time: the draws' order cannot matter
STEADY_LATE = HostJitter((3.0,) * 101, (5.0,) * 101, "steady", (2.0,) * 101)
NEVER_LATE = HostJitter((0.0,) * 101, (0.0,) * 101, "never", (0.0,) * 101)
#: a host late by a different amount at each draw: the draws' order and occasions matter
VARYING_LATE = HostJitter(
    tuple(3.0 * q / 100 for q in range(101)),
    tuple(9.0 * (q / 100) ** 2 for q in range(101)),
    "varying",
    tuple(2.0 * q / 100 for q in range(101)),
)


@pytest.mark.parametrize("host", [STEADY_LATE, VARYING_LATE], ids=["steady", "varying"])
@pytest.mark.parametrize(("policy", "knobs"), SETTINGS)
def test_a_late_host_on_one_device_is_one_rule_in_both_simulators(policy, knobs, host):
    """--host-jitter: frames published late, an idle worker deciding late, batches ending
    late, by draws; one device's figures from the devices' loop equal the one-device
    simulator's with the same host, draw for draw (one loop plays both: before, the
    one-device loop drew a wake at every turn, its looks too, and agreed only with a
    steady host)."""
    config = RunConfig(sessions=6, policy=policy, duration_s=5.0, **LAPTOP, **knobs)
    alone = simulate(config, None, 1.0, host)
    quiet = simulate(config, None, 1.0)
    for router in ("pinned", "least-loaded"):
        report = simulate_devices(config, load_devices(["laptop-8gb"]), router, 1.0, host)
        for key in FIGURES:
            assert report["overall"][key] == alone["overall"][key], (router, key)
        assert report["host_jitter_model"] == alone["host_jitter_model"]
    assert alone["overall"]["latency_ms"] != quiet["overall"]["latency_ms"]  # it counts


def test_neighbours_play_on_one_device_of_the_devices_loop():
    """The one-device simulator's neighbours (each batch stretched by its own draws) are
    the devices' loop's on one device; several devices still refuse them."""
    config = RunConfig(sessions=6, policy="dynamic", max_batch=4, duration_s=4.0,
                       neighbours=2, neighbour_duty=0.5, **LAPTOP)  # fmt: skip
    alone = simulate(config, None, 1.0)
    report = simulate_devices(config, load_devices(["laptop-8gb"]), "pinned", 1.0)
    for key in FIGURES:
        assert report["overall"][key] == alone["overall"][key], key
    clean = simulate(config.with_changes(neighbours=0), None, 1.0)
    assert alone["overall"]["latency_ms"]["p50"] > clean["overall"]["latency_ms"]["p50"]


@pytest.mark.parametrize("router", ["pinned", "least-loaded"])
@pytest.mark.parametrize("devices", [2, 3])
def test_a_host_never_late_leaves_several_devices_as_they_were(router, devices):
    """The host's draws are not the router's: on 3 devices least-loaded draws its two
    choices, and a host never late (whose draws are still made) changes no placement
    (its draws came from the router's stream before, and moved them)."""
    config = RunConfig(sessions=9, policy="dynamic", max_batch=4, duration_s=5.0, **LAPTOP)
    on = load_devices(["laptop-8gb"] * devices)
    quiet = simulate_devices(config, on, router, 1.0)["overall"]
    never = simulate_devices(config, on, router, 1.0, NEVER_LATE)["overall"]
    for key in FIGURES:
        assert never[key] == quiet[key], key


def test_a_late_host_adds_its_wake_and_device_lateness_to_each_idle_devices_windows():
    """Two sessions pinned on two devices, never more than one window waiting: each window
    waits for its idle device's late wake (5 ms) and its batch ends 2 ms late, so every
    latency grows by 7 ms (publish lateness moves the arrival too, so it adds nothing)."""
    config = RunConfig(sessions=2, policy="oldest", duration_s=5.0, **LAPTOP)
    on = load_devices(["laptop-8gb", "laptop-8gb"])
    quiet = simulate_devices(config, on, "pinned", 1.0)["overall"]["latency_ms"]
    late = simulate_devices(config, on, "pinned", 1.0, STEADY_LATE)["overall"]["latency_ms"]
    for key in ("p50", "p99"):
        assert late[key] == pytest.approx(quiet[key] + 7.0, abs=0.01), key


def test_simulate_devices_takes_a_measured_host(tmp_path, capsys):
    measured = tmp_path / "measured.json"
    measured.write_text(
        json.dumps({"host_jitter": {"publish_ms": [0.0, 1.0, 6.0], "wake_ms": [0.0, 2.0, 9.0]}})
    )
    out = tmp_path / "sim.json"
    argv = ["simulate", "--profile", "laptop-8gb", "--resolution", "512x288", "--sessions",
            "4", "--devices", "2", "--duration", "3", "--host-jitter", str(measured),
            "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    (report,) = json.loads(out.read_text())
    assert report["host_jitter_model"]["source"] == str(measured)
    assert report["host_jitter_model"]["wake_ms"]["p99"] > 0
    assert len(report["devices"]) == 2


def test_the_devices_planner_replays_the_host_the_plan_replayed(server_plan):
    """plan --host-jitter with --devices/--sessions: least-loaded's seeds are played with
    the plan's measured host, as pinned's one-device runs are (before, without it)."""
    import copy
    import dataclasses

    late_runs = copy.copy(server_plan.runs)
    late_runs.jitter = STEADY_LATE
    late_plan = dataclasses.replace(server_plan, runs=late_runs)
    profile = load_profile("server-24gb")
    quiet, late = DevicesSearch(server_plan, profile), DevicesSearch(late_plan, profile)
    quiet._played(2, "least-loaded", 8)
    late._played(2, "least-loaded", 8)
    on = load_devices(["server-24gb"] * 2, profile)
    config = server_plan.config().with_changes(sessions=8, seed=0)
    expected = seed_figures(config, on, "least-loaded", late.warmup_s, STEADY_LATE)
    assert late.figures[(2, "least-loaded", 8)][1] >= expected[1]  # the worst seed's p99
    assert late.figures[(2, "least-loaded", 8)][1] > quiet.figures[(2, "least-loaded", 8)][1]


def test_one_shape_for_every_session_plays_as_no_shapes():
    config = RunConfig(sessions=9, policy="dynamic", max_batch=4, duration_s=5.0, **LAPTOP)
    on = load_devices(["laptop-8gb", "laptop-8gb"])
    curves = [d.curve(config) for d in on]
    one = mixed_shapes(config, on, [config.resolution] * 9)
    assert one.of_session == (0,) * 9
    for router in ("pinned", "least-loaded"):
        plain = devices_report(play_devices(config, curves, router), config, on, router, 1.0)
        shaped = devices_report(
            play_devices(config, curves, router, shapes=one), config, on, router, 1.0, one
        )
        for key in (*FIGURES, "busy"):
            assert shaped["overall"][key] == plain["overall"][key], (router, key)
        assert shaped["memory"] == plain["memory"]


@pytest.mark.parametrize("router", ["pinned", "least-loaded"])
def test_a_batch_holds_one_shape_and_takes_that_shapes_time(router):
    """Sessions at 512x288 and 256x144 on two laptops: each batch's windows are all of one
    shape, and the batch lasts what that shape's curve says for its rows."""
    config = RunConfig(sessions=8, policy="all", max_batch=8, duration_s=5.0, **LAPTOP)
    on = load_devices(["laptop-8gb", "laptop-8gb"])
    resolutions = [(512, 288) if s % 3 == 0 else (256, 144) for s in range(8)]
    shapes = mixed_shapes(config, on, resolutions)
    played = play_devices(config, [d.curve(config) for d in on], router, shapes=shapes)
    sessions = iter(played.delivered[1])
    kinds_seen = set()
    for start, n, end, d, _reason, _cap, pad in played.measured:
        kinds = {shapes.of_session[next(sessions)] for _ in range(n)}
        assert len(kinds) == 1, "a batch mixed two shapes"
        (k,) = kinds
        kinds_seen.add(k)
        assert end - start == pytest.approx(shapes.curves[d][k].ms(n + pad) / 1000.0)
    assert kinds_seen == {0, 1}
    report = devices_report(played, config, on, router, 1.0, shapes)
    assert report["overall"]["throughput_wps"] > 0


def test_mixed_shapes_name_what_is_wrong():
    config = RunConfig(sessions=2, duration_s=5.0, **LAPTOP)
    on = load_devices(["laptop-8gb"])
    with pytest.raises(ConfigError, match="one per session"):
        mixed_shapes(config, on, [(512, 288)])
    with pytest.raises(ProfileError, match="no curve for fp16 at 128x72"):
        mixed_shapes(config, on, [(512, 288), (128, 72)])


# -- experiments on several devices --------------------------------------------------------

EVERY_CHANGE = """
[[step]]
at = 0
sessions = 4
policy = "oldest"
[[step]]
at = 4
sessions = 6
stall = {session = 1, for_s = 2}
[[step]]
at = 8
policy = "dynamic"
max_batch = 4
max_delay_ms = 5
drop_after_ms = 20
slow_device = {factor = 2, for_s = 2}
[[step]]
at = 12
resolution = "256x144"
[[step]]
at = 16
sessions = 3
burst = {session = 0, factor = 3, for_s = 2}
[[step]]
at = 20
policy = "adaptive"
slo_ms = 40
fps = 60
source_error = {session = 2, for_s = 2}
"""

TWO_DEVICES = """
[[step]]
at = 0
sessions = 8
policy = "oldest"
[[step]]
at = 4
policy = "all"
max_batch = 4
[[step]]
at = 7
max_batch = 2
[[step]]
at = 10
stall = {session = 1, for_s = 2}
"""


def _experiment_text(steps: str, duration: float = 9, **base: str) -> str:
    fields = {
        "backend": '"emulated"',
        "profile": '"laptop-8gb"',
        "precision": '"fp16"',
        "resolution": '"512x288"',
        "fps": "30",
        "max_batch": '"none"',
        **base,
    }
    lines = "\n".join(f"{k} = {v}" for k, v in fields.items())
    return f"""
name = "test"
duration = {duration}
[base]
{lines}
{steps}
"""


def _experiment(steps: str, duration: float = 9, **base: str):
    from batchscope.experiment import parse_experiment

    return parse_experiment(_experiment_text(steps, duration, **base))


@pytest.mark.parametrize("router", ["pinned", "least-loaded"])
def test_an_experiment_on_one_device_plays_as_the_one_device_simulator(router):
    """Every kind of step (policy, knobs, sessions joining and leaving, resolution, frame
    rate, deadline drop) and every fault: the devices' loop on one device gives the
    one-device simulator's report, whole run and each segment, to the bit."""
    from batchscope.sim.simulated_experiment import simulate_experiment, simulate_on_devices

    experiment = _experiment(EVERY_CHANGE, duration=24)
    alone = simulate_experiment(experiment)
    report = simulate_on_devices(experiment, load_devices(["laptop-8gb"]), router)
    for key in (*FIGURES, "busy", "expired"):
        assert report["overall"][key] == alone["overall"][key], key
    assert len(report["segments"]) == len(alone["segments"]) == 10  # 6 steps, 4 fault ends
    for ours, theirs in zip(report["segments"], alone["segments"], strict=True):
        assert ours == theirs
    figures = [s["overall"] for s in report["segments"]]
    assert figures[1]["min_fps"] == 0.0 and figures[8]["min_fps"] == 0.0  # stall, source error
    assert figures[3]["expired"] > 0  # the deadline drop while the device is slow
    assert max(map(int, figures[3]["batch_sizes"])) == 4  # the new policy's batches
    assert set(figures[0]["batch_sizes"]) == {"1"}  # oldest first, one at a time


def test_simulate_experiment_plays_each_step_on_every_device(tmp_path, capsys):
    """The base sets 2 devices, pinned: a new policy and a retuned knob reach both devices'
    policies (each segment's batches are the new policy's), a stall stops its session,
    and the report and the text say each device."""
    path = tmp_path / "two.toml"
    path.write_text(_experiment_text(TWO_DEVICES, 14, devices="2", router='"pinned"'))
    out = tmp_path / "r.json"
    assert main(["simulate", "--experiment", str(path), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "simulated: 2 devices (emulated:laptop-8gb), router pinned" in text
    assert "device 1  emulated:laptop-8gb" in text
    report = json.loads(out.read_text())
    assert [d["sessions"] for d in report["devices"]] == [4, 4]
    segments = report["segments"]
    assert [s["changes"] for s in segments[:3]] == [
        {"sessions": 8, "policy": "oldest"},
        {"policy": "all", "max_batch": 4},
        {"max_batch": 2},
    ]
    sizes = [{int(k) for k in s["overall"]["batch_sizes"]} for s in segments]
    assert sizes[0] == {1} and sizes[1] == {4} and sizes[2] == {2}  # both devices each time
    assert segments[3]["overall"]["min_fps"] == 0.0 and segments[4]["overall"]["min_fps"] > 0
    each = sum(sum(d["batch_sizes"].values()) for d in report["devices"])
    assert each == sum(report["overall"]["batch_sizes"].values())
    assert all(sum(d["batch_sizes"].values()) > 100 for d in report["devices"])


UNEQUAL = """
[[step]]
at = 0
sessions = 10
policy = "all"
[[step]]
at = 10
router = "least-loaded"
"""


def test_a_step_changes_the_router_on_several_devices():
    """A whole laptop GPU beside its 1g slice, pinned (FINDINGS: the slice's sessions are
    the slowest, 17.6 fps), then least-loaded from 10 s: the windows go where fewer wait and
    every session keeps 30 fps. The base's router opens the run (not the first step's)."""
    from batchscope.sim.simulated_experiment import simulate_experiment

    experiment = _experiment(
        UNEQUAL, 20, profiles='["laptop-8gb", "laptop-8gb@1g"]', devices="2",
        router='"pinned"', resolution='"256x144"',
    )  # fmt: skip
    report = simulate_experiment(experiment)
    first, then = (s["overall"] for s in report["segments"])
    assert report["segments"][1]["changes"] == {"router": "least-loaded"}
    assert first["min_fps"] < 20.0 and then["min_fps"] > 29.5
    assert then["latency_ms"]["p99"] < first["latency_ms"]["p99"]
    assert report["router"] == "least-loaded" and report["config"]["router"] == "least-loaded"
    assert "router least-loaded" in report["device_label"]
    assert [d["sessions"] for d in report["devices"]] == [10, 10]  # both served every one


DEVICES_STEPS = """
[[step]]
at = 0
sessions = 10
policy = "all"
[[step]]
at = 4
devices = 3
[[step]]
at = 8
devices = 1
"""


@pytest.mark.parametrize("router", ["pinned", "least-loaded"])
def test_a_step_adds_and_removes_devices(router):
    """2 devices, 3 from 4 s, 1 from 8 s (as live: a device that joins gets a worker and a
    policy; one that leaves ends its batch and takes no more; the waiting windows are
    placed again): each device's batches start while it is in the run."""
    experiment = _experiment(
        DEVICES_STEPS, 12, devices="2", router=f'"{router}"', resolution='"256x144"'
    )
    played = play_devices_experiment(experiment, load_devices(["laptop-8gb"] * 2), router)
    starts = {d: [m[0] for m in played.measured if m[3] == d] for d in range(3)}
    assert starts[0] and min(starts[0]) < 4 and max(starts[0]) > 8
    assert starts[1] and min(starts[1]) < 4 and 4 < max(starts[1]) <= 8
    assert starts[2] and min(starts[2]) >= 4 and max(starts[2]) <= 8
    assert len(played.devices) == 3 and played.router == router
    assert played.pinned == ([10, 0, 0] if router == "pinned" else None)
    segments = played.changes.segments.all()
    assert [s.changes for s in segments[1:]] == [{"devices": 3}, {"devices": 1}]
    # every session is served on one device as on two or three
    report = devices_report(played, played.changes.config, played.devices, router, 0.0)
    assert report["overall"]["min_fps"] > 29.0
    assert [d["device"] for d in report["devices"]] == ["emulated:laptop-8gb"] * 3


def test_what_the_simulator_cannot_play_on_several_devices_is_one_clear_error(tmp_path, capsys):
    from batchscope.sim.simulated_experiment import simulate_experiment

    steps = '[[step]]\nat = 0\nsessions = 4\n[[step]]\nat = 2\nbackend = "torch"\n'
    with pytest.raises(ConfigError, match="devices = 'cpu': a real device"):
        simulate_experiment(_experiment(steps, devices="2"))  # a later step's devices too
    real = _experiment_text("[[step]]\nat = 0\nsessions = 4\n", devices="2",
                            backend='"torch"', device='"cpu"', profile='"laptop-8gb"')  # fmt: skip
    path = tmp_path / "real.toml"
    path.write_text(real)
    assert main(["simulate", "--experiment", str(path)]) != 0
    err = capsys.readouterr().err
    assert "devices = 'cpu': a real device" in err and "Traceback" not in err
