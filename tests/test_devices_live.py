"""BatchScope's own worker on several (emulated) devices: the router, the report, live
changes of devices and router as transactions, the stop (engine/other_devices.py, routing.py)."""

from __future__ import annotations

import random
import threading
from collections import Counter

import numpy as np
import pytest

from batchscope.cli import main
from batchscope.config import ConfigError, RunConfig
from batchscope.engine.backends import BackendError
from batchscope.engine.engine import Engine
from batchscope.engine.routing import IDLE, Router, least_loaded, pin
from batchscope.engine.session import Mailboxes, Window
from batchscope.profiles.profile import load_profile
from contract import SMALL_EMULATED, recorded, wait_for

START_S = 60.0


def _config(**changes) -> RunConfig:
    return RunConfig(**{**SMALL_EMULATED, "sessions": 8, "policy": "all", **changes})


def _started(config: RunConfig) -> Engine:
    engine = Engine(config)
    engine.open()
    engine.start()
    return engine


def _batches(engine: Engine) -> np.ndarray:
    return recorded(engine, "batches")


def _items(engine: Engine) -> np.ndarray:
    return recorded(engine, "items")


def _lane_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("batchscope-worker-")}


def _window(session: int, t: float) -> Window:
    return Window(session, 1, 0, (), t)


# -- the rules ---------------------------------------------------------------------------


def test_pinned_deals_sessions_by_id_and_again_when_they_change():
    assert pin(range(8), 3) == {0: 0, 1: 1, 2: 2, 3: 0, 4: 1, 5: 2, 6: 0, 7: 1}
    # session 1 left: the others are dealt again, counts within one
    assert Counter(pin([0, 2, 3, 4, 5, 6, 7], 3).values()) == Counter({0: 3, 1: 2, 2: 2})


def test_least_loaded_takes_the_fewer_waiting_then_the_idle_then_the_lower_index():
    draws = random.Random(0)
    assert least_loaded(draws, 2, lambda d: ((3, 1)[d], IDLE)) == 1
    assert least_loaded(draws, 2, lambda d: (1, (5.0, IDLE)[d])) == 1  # idle first
    assert least_loaded(draws, 2, lambda d: (1, 2.0)) == 0
    # of N > 2 devices two are drawn: never the one with most waiting when all others are
    # emptier, and every device is drawn over many windows
    picks = Counter(least_loaded(draws, 4, lambda d: ((0, 0, 0, 9)[d], IDLE)) for _ in range(400))
    assert picks[3] == 0 and set(picks) == {0, 1, 2}


def test_mailboxes_place_each_window_once_and_an_overwrite_waits_where_the_old_one_did():
    boxes = Mailboxes()
    router = Router("pinned", 2, 0, lambda d: IDLE)
    router.repin(range(4))
    boxes.route(router)
    for s in range(4):
        boxes.publish(_window(s, 1.0))
    assert [w.session for w in boxes.waiting(0)] == [0, 2]
    assert [w.session for w in boxes.waiting(1)] == [1, 3]
    assert boxes.waiting_on() == [2, 2]
    router.repin([1, 3])  # a new deal (session 1 on device 0) places new mailboxes only
    assert boxes.publish(_window(1, 2.0))  # overwritten, still on device 1
    assert [w.session for w in boxes.waiting(1)] == [1, 3]
    assert [w.session for w in boxes.take([1])] == [1]
    assert boxes.waiting_on() == [2, 1]
    boxes.publish(_window(1, 3.0))  # opens again: placed by the new deal
    assert boxes.waiting_on() == [3, 1]
    assert [w.session for w in boxes.waiting(0)] == [0, 2, 1]
    assert boxes.expire(10.0, 1.0, device=1) == [(3, 10.0)] and boxes.waiting_on() == [3, 0]
    boxes.route(None)  # one device again: every window is everyone's
    assert {w.session for w in boxes.waiting(1)} == {0, 1, 2}


# -- the config and the CLI --------------------------------------------------------------


def test_who_runs_several_devices_is_said_in_one_line(capsys):
    assert _config(devices=3).devices == 3
    assert RunConfig(backend="torch", device="cpu", devices=2).devices == 2  # model instances
    with pytest.raises(ConfigError, match="one model instance"):
        _config(backend="triton", devices=2)
    with pytest.raises(ConfigError, match="least-loaded"):
        _config(backend="ray", devices=2, router="pinned")
    with pytest.raises(ConfigError, match="neighbours"):
        _config(devices=2, neighbours=2)
    with pytest.raises(ConfigError, match="unknown router"):
        _config(devices=2, router="nearest")
    assert main(["run", "synthetic", "--router", "pinned", "--duration", "1"]) != 0
    err = capsys.readouterr().err
    assert "give --devices N too" in err and "Traceback" not in err


# -- live --------------------------------------------------------------------------------


def test_pinned_sessions_stay_on_their_device_and_the_report_has_each():
    engine = _started(_config(devices=2, router="pinned"))
    try:
        assert _lane_threads() >= {"batchscope-worker-1"}
        engine.reset_stats()
        assert wait_for(lambda: len(_batches(engine)) > 100, START_S)
        report = engine.report()
        items = _items(engine)
        shown = engine.snapshot().device
        started = [e.message for e in engine.store.events if e.message.startswith("start:")]
    finally:
        assert engine.stop(5.0) == []
    assert report["router"] == "pinned" and report["config"]["devices"] == 2
    # the plots' titles and the run's events name both devices, not the first one's backend
    where = "2 devices (emulated:laptop-8gb), router pinned"
    assert shown == report["device_label"] == where
    assert started == [f"start: batch all waiting, 8 sessions on {where}"]
    devices = report["devices"]
    assert [d["sessions"] for d in devices] == [4, 4]
    assert [d["device"] for d in devices] == ["emulated:laptop-8gb"] * 2
    assert all(d["batch_sizes"] and 0 < d["busy"] <= 1 for d in devices)
    # one read: the devices' batches are the overall ones
    each = sum((Counter({int(k): n for k, n in d["batch_sizes"].items()}) for d in devices),
               Counter())  # fmt: skip
    assert each == Counter({int(k): n for k, n in report["overall"]["batch_sizes"].items()})
    assert report["overall"]["busy"] == pytest.approx(sum(d["busy"] for d in devices) / 2, abs=2e-4)
    # pinned: session s ran on device s mod 2 only
    for s in range(8):
        assert set(items["device"][items["session"] == s].tolist()) == {s % 2}
    assert not _lane_threads()


def test_least_loaded_spreads_the_sessions_over_both_devices():
    engine = _started(_config(devices=2, sessions=8))
    try:
        assert wait_for(lambda: len(set(_batches(engine)["device"].tolist())) == 2, START_S)
        assert wait_for(lambda: len(_batches(engine)) > 100, START_S)
        report = engine.report()
    finally:
        assert engine.stop(5.0) == []
    assert report["router"] == "least-loaded"
    served = [d["sessions"] for d in report["devices"]]
    assert all(n > 0 for n in served) and max(served) <= 8


def test_devices_and_router_change_live_and_each_change_opens_a_segment():
    engine = _started(_config(devices=1, sessions=6))
    try:
        assert wait_for(lambda: len(_batches(engine)) > 20, START_S)
        assert "router" not in engine.report()
        assert engine.apply(engine.config.with_changes(devices=3, router="pinned")) is None
        assert len(engine.workers()) == 3
        assert _lane_threads() == {"batchscope-worker-1", "batchscope-worker-2"}
        assert wait_for(lambda: set(_batches(engine)["device"].tolist()) == {0, 1, 2}, START_S)
        assert engine.apply(engine.config.with_changes(router="least-loaded")) is None
        assert engine.workers()[1].backend is not None  # a router change builds nothing
        assert engine.report()["router"] == "least-loaded"
        assert engine.apply(engine.config.with_changes(devices=2)) is None
        assert wait_for(lambda: _lane_threads() == {"batchscope-worker-1"}, 10.0)
        segments = engine.segments.all()
        assert [seg.changes for seg in segments[1:]] == [
            {"devices": 3, "router": "pinned"},
            {"router": "least-loaded"},
            {"devices": 2},
        ]
        engine.reset_stats()
        assert wait_for(lambda: len(_batches(engine)) > 40, START_S)
        assert set(_batches(engine)["device"].tolist()) == {0, 1}  # device 2 is gone
    finally:
        assert engine.stop(5.0) == []
    assert not _lane_threads()


def test_a_device_change_that_fails_leaves_the_run_as_it_was(monkeypatch):
    """Device 0's new backend builds, a new device's does not: nothing changes, the new
    device's worker is stopped, the backend built for device 0 is given back."""
    engine = _started(_config(devices=2, sessions=4))
    try:
        before = [w.backend for w in engine.workers()]
        closed = []

        def refuse(config, oom_above, cancelled):
            raise BackendError("device 2 is not there")

        import batchscope.engine.other_devices as other_devices

        monkeypatch.setattr(other_devices, "make_backend", refuse)
        real_close = type(before[0]).close
        monkeypatch.setattr(
            type(before[0]), "close", lambda self: (closed.append(self), real_close(self))
        )
        error = engine.apply(engine.config.with_changes(devices=3, precision="fp32"))
        assert error is not None and "device 2 is not there" in error
        assert engine.config.devices == 2 and engine.config.precision == "fp16"
        assert [w.backend for w in engine.workers()] == before
        assert wait_for(lambda: _lane_threads() == {"batchscope-worker-1"}, 10.0)
        assert wait_for(lambda: len(closed) == 1, 10.0)  # closed on device 0's thread
        assert closed[0] not in before  # the one built for the change
        n = len(_batches(engine))
        assert wait_for(lambda: len(_batches(engine)) > n + 20, START_S)  # still delivering
    finally:
        assert engine.stop(5.0) == []


def test_run_on_two_devices_prints_each_and_reports_them(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["run", "synthetic", "--resolution", "256x144", "--sessions", "4", "--devices", "2",
            "--router", "pinned", "--duration", "2", "--warmup", "0.5", "--quiet",
            "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "4 sessions, all ≤8, router pinned:" in text or "router pinned:" in text
    assert "device 1  emulated:laptop-8gb" in text
    import json

    report = json.loads(out.read_text())
    assert [d["sessions"] for d in report["devices"]] == [2, 2]


def test_a_list_of_profiles_runs_each_device_on_its_own(tmp_path, capsys):
    """``--devices emulated:A,emulated:B``: device 1 replays B's curve; the report names
    both; a MIG UUID among them or a list on Ray is one clear error (a real device beside
    them: tests/test_devices_real.py)."""
    out = tmp_path / "r.json"
    argv = ["run", "synthetic", "--resolution", "512x288", "--sessions", "4", "--devices",
            "emulated:laptop-8gb,emulated:server-24gb", "--router", "pinned", "--duration",
            "2", "--warmup", "0.5", "--quiet", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    import json

    report = json.loads(out.read_text())
    names = [d["device"] for d in report["devices"]]
    assert names == ["emulated:laptop-8gb", "emulated:server-24gb"]
    assert report["config"]["profiles"] == ["laptop-8gb", "server-24gb"]
    assert report["device_label"].startswith("2 devices (emulated:laptop-8gb, emulated:server")
    for entry, name in zip(report["devices"], ("laptop-8gb", "server-24gb"), strict=True):
        profile = load_profile(name)  # each device's own memory, not device 0's
        assert entry["memory"]["device_total_mb"] == profile.memory_total_mb  # 8192, 24576
        assert "rss_mb" not in entry["memory"]  # the process's: once, in report["memory"]
    capsys.readouterr()
    for bad, says in (
        (["--devices", "emulated:laptop-8gb,MIG-4f2c"], "does not open a MIG slice by its UUID"),
        (["--devices", "emulated:laptop-8gb,", "--duration", "1"], "give a count (2) or a list"),
        (["--backend", "ray", "--devices", "emulated:laptop-8gb,emulated:laptop-8gb"],
         "give a count with --backend ray"),
    ):  # fmt: skip
        assert main(["run", "synthetic", *bad]) != 0
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err
    with pytest.raises(ConfigError, match="one profile per emulated device"):
        _config(devices=2, profiles=("server-24gb", "laptop-8gb"))  # not the run's profile


def test_each_device_builds_its_own_profile():
    config = _config(devices=2, profiles=("laptop-8gb", "server-24gb"), resolution=(512, 288))
    engine = Engine(config)
    engine.open()
    try:
        labels = [w.backend.label for w in engine.workers()]
    finally:
        engine.stop(5.0)
    assert "laptop-8gb" in labels[0] and "server-24gb" in labels[1]


def test_the_bus_view_has_a_band_per_device_and_each_window_in_its_devices_band():
    """Pinned on 2 devices: session s's cells lie in band s mod 2 (the router's decision
    shows), a batch is found by time and band, the busy share is the devices' mean."""
    from batchscope.engine.report.bus_layout import bus_layout

    engine = _started(_config(devices=2, sessions=4, router="pinned"))
    try:
        assert wait_for(lambda: len(_batches(engine)) > 60, START_S)
        snap = engine.snapshot()
    finally:
        engine.stop(5.0)
    assert snap.bus is not None
    lay = bus_layout(snap.bus, snap.t, range(4), devices=2)
    assert lay.devices == 2 and lay.band == (0.0, 2 * lay.device_h)
    for sid, (_, _, y0) in lay.cells.items():
        assert len(y0) and set((y0 // lay.device_h).astype(int).tolist()) == {sid % 2}, sid
    for device in (0, 1):
        mine = lay.batches[lay.batches["device"] == device]
        mid = float(mine["start"][-1] + mine["end"][-1]) / 2
        i = lay.batch_at(mid, device)
        assert i is not None and lay.batches["device"][i] == device
        assert f"on device {device}:" in lay.describe(i)
        assert set(lay.members[i]) <= {s for s in range(4) if s % 2 == device}
    span = lay.t_max - lay.t_min
    lo = np.clip(lay.batches["start"], lay.t_min, lay.t_max)
    hi = np.clip(lay.batches["end"], lay.t_min, lay.t_max)
    assert lay.busy() == pytest.approx(float((hi - lo).sum()) / span / 2)


EXPERIMENT = """
name = "two-devices"
duration = 6

[base]
backend = "emulated"
profile = "laptop-8gb"
precision = "fp16"
resolution = "256x144"

[[step]]
at = 0
sessions = 12
policy = "all"

[[step]]
at = 3
devices = 2
router = "pinned"
"""


def test_an_experiment_changes_devices_live_and_each_segment_is_predicted_on_its_devices(
    tmp_path, capsys
):
    """Live, a step to 2 devices is predicted by the devices' simulator (the one-device
    prediction said p50 12 ms where 2 devices serve in 7); the simulator plays a step
    that changes the devices as live (the step's segment serves faster there too)."""
    from batchscope.sim.devices import load_devices, simulate_devices
    from batchscope.sim.prediction import predict_segment

    path = tmp_path / "two.toml"
    path.write_text(EXPERIMENT)
    out = tmp_path / "r.json"
    assert main(["run", "--experiment", str(path), "--quiet", "--json", str(out)]) == 0
    import json

    segments = json.loads(out.read_text())["segments"]
    assert segments[1]["changes"] == {"devices": 2, "router": "pinned"}
    config = _config(sessions=12, devices=2, router="pinned")
    measured = segments[1]["measured_s"]
    alone = simulate_devices(
        config.with_changes(duration_s=measured), load_devices(["laptop-8gb"] * 2), "pinned", 1.0
    )
    predicted = segments[1]["predicted"]
    assert predicted["latency_ms"]["p50"] == alone["overall"]["latency_ms"]["p50"]
    one = predict_segment(config.with_changes(devices=1, router="least-loaded"), measured)
    assert one is not None and one["latency_ms"]["p50"] > predicted["latency_ms"]["p50"]
    # the simulator plays the same file: its step to 2 devices serves faster there too
    simulated = tmp_path / "s.json"
    assert main(["simulate", "--experiment", str(path), "--json", str(simulated)]) == 0
    played = json.loads(simulated.read_text())["segments"]
    assert [s["changes"] for s in played] == [s["changes"] for s in segments]
    p50 = [s["overall"]["latency_ms"]["p50"] for s in played]
    assert p50[1] < p50[0] and p50[1] == pytest.approx(predicted["latency_ms"]["p50"], rel=0.2)


def test_a_recording_says_which_device_ran_each_batch(tmp_path):
    import csv

    engine = _started(_config(devices=2, sessions=4, router="pinned"))
    try:
        folder = engine.start_recording(tmp_path / "rec")
        assert wait_for(lambda: len(_batches(engine)) > 40, START_S)
        engine.stop_recording()
    finally:
        engine.stop(5.0)
    with open(folder / "batches.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["device"] for r in rows} == {"0", "1"}


def test_each_devices_line_says_its_own_peak_memory_when_it_has_one():
    from batchscope.engine.report.text import format_devices

    device = {"sessions": 2, "busy": 0.5, "batch_sizes": {"2": 10}}
    report = {
        "config": {"sessions": 4},
        "policy_label": "all",
        "router": "pinned",
        "devices": [
            {**device, "device": "cuda:0", "memory": {"peak_allocated_mb": 1234.4}},
            {**device, "device": "emulated:laptop-8gb", "memory": {"profile_peak_mb": 812.0}},
            {**device, "device": "cpu", "memory": {}},  # a CPU has no counters of its own
        ],
    }
    lines = format_devices([report]).splitlines()
    assert lines[1].endswith("mean batch  2.00  peak 1,234 MB")
    assert lines[2].endswith("peak 812 MB")
    assert lines[3].endswith("mean batch  2.00")
