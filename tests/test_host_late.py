"""The host's share (issue 25): how late the feeder and the worker woke against their
plan, per window and per batch, as a stage of the latency, in every report, and the
verdicts and probe that say when it matters. Driven by injected clocks: a late wake-up
is made, not waited for."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from batchscope.config import RunConfig
from batchscope.engine.feeder import Feeder
from batchscope.engine.host_check import probe_phrase, probe_timers
from batchscope.engine.metrics import MetricsStore
from batchscope.engine.policies import make_policy
from batchscope.engine.report.host import explained_by_host, host_verdict, host_word
from batchscope.engine.session import Mailboxes, Session, Window
from batchscope.engine.sources import SyntheticSource
from batchscope.engine.stats import host_late_summary, item_records, stage_means
from batchscope.engine.worker import Worker
from clocked import ClockedBoxes, ClockedDevice
from contract import wait_for


def test_the_host_stage_is_carved_out_of_the_wait_and_the_stages_still_add_up():
    items = item_records(2)
    items["arrival"] = [0.000, 0.010]
    items["start"] = [0.020, 0.020]
    items["prep_end"] = [0.021, 0.021]
    items["compute_end"] = [0.031, 0.031]
    items["result"] = [0.032, 0.032]
    items["host_wait"] = [0.006, 0.004]  # the worker woke 6 ms late; item 2 waited 10 ms
    items["host_device"] = [0.002, 0.002]  # and the device's timer ended 2 ms late
    items["host_late"] = [0.011, 0.006]  # and item 1 was published 3 ms late besides
    stages = stage_means(items)
    assert stages == {"wait": 10.0, "host": 7.0, "prep": 1.0, "compute": 8.0, "post": 1.0}
    latency = float(np.mean(items["result"] - items["arrival"])) * 1000
    assert sum(stages.values()) == pytest.approx(latency)
    assert host_late_summary(items) == {"p50": 8.5, "p99": 10.95}


def test_a_late_publish_is_measured_against_the_frames_due_time():
    now = [10.0]
    boxes = Mailboxes()
    feeder = Feeder(boxes, lambda m: None, clock=lambda: now[0])
    session = Session(0, SyntheticSource((64, 48)))
    feeder.set_sessions([session], fps=30.0)
    for _ in range(3):  # three frames for a window, each 4 ms past its due time
        due = feeder._heap[0][0]
        now[0] = due + 0.004
        feeder._publish_due(now[0])
    (window,) = boxes.take([0])
    assert window.publish_late == pytest.approx(0.004)
    assert window.arrival == now[0]  # its latency still starts at its arrival


def test_a_worker_that_wakes_late_for_its_deadline_records_it_per_batch_and_window():
    now = [100.0]
    boxes = ClockedBoxes(now, late=0.007)
    store = MetricsStore()
    policy = make_policy(RunConfig(policy="dynamic", max_batch=8, max_delay_ms=10.0))
    worker = Worker(boxes, store, policy, lambda kind, msg: None, clock=lambda: now[0])
    frame = np.zeros((48, 64, 3), np.uint8)
    try:
        worker.swap_backend(ClockedDevice(now))  # no time: an instant device
        worker.start()
        boxes.publish(Window(0, 3, 2, (frame,) * 3, now[0], publish_late=0.002))
        boxes.armed.set()  # from now on, its waits are late
        assert wait_for(lambda: store.batches.total == 1)
    finally:
        worker.stop()
    batch = store.batches.view()[0]
    item = store.items.view()[0]
    assert batch["host_wait"] == pytest.approx(0.007)  # woke 7 ms after the 10 ms deadline
    assert item["host_wait"] == pytest.approx(0.007)
    assert item["host_device"] == 0.0  # an instant device has no timer to be late
    assert item["host_late"] == pytest.approx(0.009)  # and its window was published 2 ms late
    assert item["start"] - item["arrival"] == pytest.approx(0.017)


def test_verdicts_say_when_the_tail_is_the_machines():
    def segment(p99: float, predicted: float | None, late: float) -> dict:
        seg = {"overall": {"latency_ms": {"p99": p99}, "host_late_ms": {"p50": 1, "p99": late}}}
        seg["predicted"] = None if predicted is None else {"latency_ms": {"p99": predicted}}
        return seg

    explained = segment(24.3, 16.8, 6.0)  # 7.5 ms over the prediction, host late 6 ms
    assert explained_by_host(explained)
    assert host_verdict(explained) == (
        "the host was late by p99 6.0 ms: this tail (+7.5 ms over the prediction) is the "
        "machine's, not the policy's"
    )
    beyond = segment(60.0, 16.8, 6.0)
    assert not explained_by_host(beyond)
    assert host_verdict(beyond).endswith("not the machine alone")
    assert host_verdict(segment(17.0, 16.8, 6.0)) is None  # no gap to explain
    assert host_verdict(segment(24.3, 16.8, 0.5)) is None  # timer noise
    assert host_verdict(segment(20.0, None, 5.0)).endswith("part of this tail is the machine's")
    assert host_verdict(segment(200.0, None, 5.0)) is None  # a twentieth of the tail


def test_the_probe_measures_late_sleeps_and_names_the_machine():
    result = probe_timers(0.05)
    assert result.keys() == {"p50_ms", "p99_ms", "sleeps", "verdict"}
    assert result["sleeps"] >= 5 and result["p99_ms"] >= result["p50_ms"] >= 0
    assert result["verdict"] == host_word(result["p99_ms"])
    stop = threading.Event()
    stop.set()
    assert probe_timers(5.0, stop=stop)["sleeps"] == 0  # a stop ends it at once
    busy = {"p50_ms": 1.0, "p99_ms": 9.7, "sleeps": 190, "verdict": "busy"}
    assert probe_phrase(busy).startswith("host: busy (timers late by p99 9.7 ms")
    assert host_word(4.9) == "quiet" and host_word(5.0) == "busy"


def test_a_run_reports_the_host_everywhere_the_contract_says(tmp_path):
    from contract import SMALL_EMULATED, running_engine

    engine = running_engine(**{**SMALL_EMULATED, "sessions": 2})
    try:
        assert wait_for(lambda: engine.host_probe.result is not None)
        report = engine.report()
    finally:
        engine.stop()
    assert set(report["overall"]["host_late_ms"]) == {"p50", "p99"}
    for s in report["sessions"]:
        assert set(s["host_late_ms"]) == {"p50", "p99"}
        assert "host" in s["stages_ms"]
    assert all(
        "host_late_ms" in (seg["overall"] or {"host_late_ms": 1}) for seg in report["segments"]
    )
    assert report["host_probe"]["verdict"] in ("quiet", "busy")


def test_the_status_line_says_quiet_or_busy(qtbot):
    from batchscope.ui.plots.headline import StatusLine
    from batchscope.ui.theme import Look

    line = StatusLine(Look())
    qtbot.addWidget(line)
    line._show_host(0.4)
    assert line.host.text() == "host: quiet"
    line._show_host(7.2)
    assert line.host.text() == "host: busy · late 7 ms"
    assert "p99 7.2 ms" in line.host.toolTip()
    line._show_host(7.2, others=1.6)  # others load the machine
    assert line.host.text() == "host: busy · late 7 ms"
    assert "Other work on the machine delays them" in line.host.toolTip()
    line._show_host(7.2, others=0.1)  # nothing else runs: the app's own drawing
    assert line.host.text() == "host: late 7 ms (this app)"
    assert "BatchScope's own work" in line.host.toolTip()


def test_the_load_watch_tells_this_process_from_others():
    import time as _time

    from batchscope.engine.host_check import LoadWatch

    watch = LoadWatch(span_s=5.0)
    first = watch.now()
    assert first["process_cpu_share"] == 0.0  # nothing to compare with yet
    end = _time.monotonic() + 0.7
    while _time.monotonic() < end:  # this process busy for 0.7 s
        pass
    load = watch.now()
    assert load["process_cpu_share"] > 0.3  # most of a core (a loaded CI shares it)
    assert load["others"] is None or load["others"] >= 0.0


# -- the host modelled: simulate|plan --host-jitter -----------------------------------------


def busy_report(publish_p99: float = 3.0, wake_p99: float = 5.0) -> dict:
    """A run's report whose host was late: quantiles rising to the p99s (ms)."""
    q = np.linspace(0.0, 1.0, 101)
    return {
        "host_jitter": {
            "publish_ms": [round(float(v), 4) for v in publish_p99 * q**4],
            "wake_ms": [round(float(v), 4) for v in wake_p99 * q**4],
        }
    }


def test_a_replayed_host_lengthens_the_simulated_tail_and_none_changes_nothing():
    from batchscope.sim.host_jitter import HostJitter
    from batchscope.sim.simulator import simulate

    config = RunConfig(
        sources=("synthetic",), sessions=4, backend="emulated", profile="laptop-8gb",
        precision="fp16", resolution=(256, 144), duration_s=8.0,
    )  # fmt: skip
    clean = simulate(config)
    assert simulate(config, jitter=None) == clean
    jitter = HostJitter.from_report(busy_report(), "busy.json")
    late = simulate(config, jitter=jitter)
    assert late == simulate(config, jitter=jitter)  # a pure function of its inputs
    assert late["overall"]["latency_ms"]["p99"] > clean["overall"]["latency_ms"]["p99"] + 1.0
    assert late["host_jitter_model"] == {
        "source": "busy.json",
        "publish_ms": {
            "p50": pytest.approx(3.0 * 0.5**4, abs=1e-3),
            "p99": pytest.approx(3.0 * 0.99**4, abs=1e-3),
        },
        "wake_ms": {
            "p50": pytest.approx(5.0 * 0.5**4, abs=1e-3),
            "p99": pytest.approx(5.0 * 0.99**4, abs=1e-3),
        },
        "device_ms": {"p50": 0.0, "p99": 0.0},
    }


def test_a_host_that_was_never_late_replays_as_none():
    from batchscope.sim.host_jitter import HostJitter
    from batchscope.sim.simulator import simulate

    config = RunConfig(sources=("synthetic",), sessions=3, resolution=(256, 144), duration_s=5.0)
    quiet = HostJitter.from_report(busy_report(0.0, 0.0), "quiet.json")
    clean, replayed = simulate(config), simulate(config, jitter=quiet)
    for key in ("latency_ms", "mean_fps", "batch_sizes"):
        assert replayed["overall"][key] == clean["overall"][key]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no such file"),
        ("not json", "not a JSON report"),
        ("[]", "a list of simulated reports"),
        ('{"kind": "simulate"}', "no host_jitter in it"),
        ('{"host_jitter": {"publish_ms": [], "wake_ms": []}}', "is empty"),
        ('{"host_jitter": {"publish_ms": [3, 1], "wake_ms": []}}', "not in order"),
        ('{"host_jitter": {"publish_ms": ["x"], "wake_ms": []}}', "not a list of ms"),
    ],
)
def test_a_bad_host_jitter_file_is_one_line_exit_2(tmp_path, capsys, content, says):
    from batchscope.cli import main

    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    code = main(["simulate", "--sessions", "2", "--duration", "2", "--host-jitter", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"batchscope: error: {path}: ") and says in err[0]


def test_plan_replays_a_measured_host_and_carries_fewer_or_as_many_sessions(tmp_path, capsys):
    import json

    from batchscope.cli import main

    report = tmp_path / "busy.json"
    report.write_text(json.dumps(busy_report(4.0, 8.0)))
    common = ["plan", "--profile", "laptop-8gb", "--resolution", "512x288", "--p99-ms", "40",
              "--policies", "all", "--duration", "5", "--seeds", "2"]  # fmt: skip
    assert main([*common, "--json", str(tmp_path / "clean.json")]) == 0
    assert main([*common, "--host-jitter", str(report), "--json", str(tmp_path / "h.json")]) == 0
    clean = json.loads((tmp_path / "clean.json").read_text())["recommended"]["max_sessions"]
    busy = json.loads((tmp_path / "h.json").read_text())["recommended"]["max_sessions"]
    assert 0 < busy <= clean


def test_the_app_predicts_with_the_machine_only_when_it_is_busy():
    from batchscope.sim.host_jitter import measured_jitter

    quiet = {**busy_report(), "overall": {"host_late_ms": {"p50": 0.1, "p99": 0.4}}}
    busy = {**busy_report(), "overall": {"host_late_ms": {"p50": 0.5, "p99": 6.0}}}
    assert measured_jitter(quiet) is None
    jitter = measured_jitter(busy)
    assert jitter is not None and jitter.source == "this machine, measured in this run"


def test_the_machines_load_is_reported_and_said_beside_a_busy_host(capsys):
    import time as _time

    from batchscope.cli.reports import print_host
    from batchscope.engine.host_check import host_load_since, load_mark

    mark = load_mark()
    end = _time.process_time() + 0.05
    while _time.process_time() < end:  # this process busy for 50 ms of CPU
        pass
    load = host_load_since(mark)
    assert load["cores"] >= 1 and 0.0 < load["process_cpu_share"] <= load["cores"] + 0.5
    report = {
        "overall": {"latency_ms": {"p99": 20.0}, "host_late_ms": {"p50": 1.0, "p99": 6.0}},
        "host_probe": {"p50_ms": 1.0, "p99_ms": 9.7, "sleeps": 190, "verdict": "busy"},
        "host_load": {"cores": 2, "load_avg_1m": 5.2, "process_cpu_share": 0.81},
    }
    print_host(report, None)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("  host: busy (timers late by p99 9.7 ms")
    assert lines[1] == "  machine: load 5.2 on 2 cores, BatchScope used 0.81 of a core"
    assert lines[2].startswith("  whole run: the host was late by p99 6.0 ms")
