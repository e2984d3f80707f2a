"""The Prometheus endpoint (issue 46 item 6): `run --metrics-port`, the app's View → Serve
metrics…, and engine/metrics_export.py behind both; scraped over HTTP and parsed with
prometheus_client's own parser, its figures checked against the engine's report."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from batchscope.cli import main
from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.metrics_export import (
    LATENCY_BUCKETS_S,
    METRICS,
    Histograms,
    MetricsPortError,
    MetricsServer,
)
from batchscope.experiment import Fault
from contract import wait_for

APP = str(Path(__file__).resolve().parents[1] / "app")
URL_LINE = re.compile(r"batchscope: metrics at (http://127\.0\.0\.1:(\d+)/metrics)")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> tuple[Samples, set[str]]:
    """Every sample of the endpoint by (name, sorted labels), and the metric names."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name + ("_total" if family.type == "counter" else ""))
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, names


def by_label(samples: Samples, name: str, label: str) -> dict[int, float]:
    """``name``'s samples by the value of ``label`` (a session, a device)."""
    return {int(dict(labels)[label]): value for (n, labels), value in samples.items() if n == name}


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets in /proc/net/tcp*, LISTEN)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for row in path.read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_histograms_count_a_value_on_a_bound_in_its_bucket():
    h = Histograms([0.001, 0.01, 0.1])
    h.add(np.array([7, 7, 7, 7, 2]), np.array([0.001, 0.0011, 0.1, 5.0, 0.01]))
    assert h.counts[7].tolist() == [1, 1, 1, 1]  # ≤1 ms, ≤10 ms, ≤100 ms, above
    assert h.counts[2].tolist() == [0, 1, 0, 0]
    family = h.family("x_seconds", "x", "session")
    buckets = {
        (s.labels["session"], s.labels.get("le")): s.value
        for s in family.samples
        if s.name == "x_seconds_bucket"
    }
    assert buckets[("7", "0.01")] == 2 and buckets[("7", "+Inf")] == 4
    assert buckets[("2", "0.001")] == 0 and buckets[("2", "0.01")] == 1


@pytest.mark.slow
def test_endpoint_figures_match_the_engines_report():
    """A real engine on two emulated devices, overwriting and expiring windows (a slow
    device, a 20 ms drop limit): after it stops, every counter the endpoint serves is the
    report's, the latency histogram holds every delivered window's latency, the batch-size
    histogram every batch."""
    engine = Engine(
        RunConfig(
            sources=("synthetic",),
            resolution=(256, 144),
            sessions=6,
            policy="oldest",
            devices=2,
            drop_after_ms=20.0,
        )
    )
    server = MetricsServer(0)
    try:
        assert server.url == f"http://127.0.0.1:{server.port}/metrics" and server.port > 0
        assert "batchscope-metrics" in {t.name for t in threading.enumerate()}
        assert scrape(server.url) == ({}, set())  # bound, serving nothing until it watches
        server.watch(engine)
        engine.open()
        engine.start()
        assert engine.inject(Fault("slow_device", 1.0, factor=4.0)) is None
        assert wait_for(lambda: engine.store.expiries.total > 10 and engine.store.items.total > 60)
        live, names = scrape(server.url)  # a scrape while it runs: the rest comes next time
        assert names == set(METRICS)
        assert set(by_label(live, "batchscope_session_fps", "session")) == set(range(6))
        assert set(by_label(live, "batchscope_device_busy", "device")) == {0, 1}
        assert any(by_label(live, "batchscope_device_busy", "device").values())
        engine.stop()
        report = engine.report()
        samples, _ = scrape(server.url)
    finally:
        engine.stop()
        server.stop()
    sessions = {s["id"]: s for s in report["sessions"]}
    for metric, key in (
        ("batchscope_windows_delivered_total", "delivered"),
        ("batchscope_windows_overwritten_total", "overwritten"),
        ("batchscope_windows_expired_total", "expired"),
    ):
        served = by_label(samples, metric, "session")
        assert {sid: served.get(sid, 0) for sid in sessions} == {
            sid: s[key] for sid, s in sessions.items()
        }, metric
    assert sum(s["overwritten"] for s in sessions.values()) > 0
    assert sum(s["expired"] for s in sessions.values()) > 0
    counts = by_label(samples, "batchscope_latency_seconds_count", "session")
    assert counts == {sid: s["delivered"] for sid, s in sessions.items()}
    items = engine.store.items.view()
    latency = items["result"] - items["arrival"]
    sums = by_label(samples, "batchscope_latency_seconds_sum", "session")
    for sid in sessions:
        assert sums[sid] == pytest.approx(latency[items["session"] == sid].sum(), rel=1e-9)
    # the +Inf bucket holds them all, the 2 s one every window under 2 s
    inf = {
        dict(labels)["session"]: v
        for (n, labels), v in samples.items()
        if n == "batchscope_latency_seconds_bucket" and dict(labels)["le"] == "+Inf"
    }
    assert {int(k): v for k, v in inf.items()} == counts
    under = sum(
        v
        for (n, labels), v in samples.items()
        if n == "batchscope_latency_seconds_bucket"
        and dict(labels)["le"] == str(LATENCY_BUCKETS_S[-1])
    )
    assert under == np.count_nonzero(latency <= LATENCY_BUCKETS_S[-1])
    batches = by_label(samples, "batchscope_batch_size_count", "device")
    assert sum(batches.values()) == sum(report["overall"]["batch_sizes"].values())
    assert {d: int(n) for d, n in batches.items()} == {
        d: sum(entry["batch_sizes"].values()) for d, entry in enumerate(report["devices"])
    }
    assert sum(by_label(samples, "batchscope_batch_size_sum", "device").values()) == sum(
        int(size) * n for size, n in report["overall"]["batch_sizes"].items()
    )
    missed = {
        dict(labels)["record"]: v
        for (n, labels), v in samples.items()
        if n == "batchscope_records_missed_total"
    }
    assert missed == dict.fromkeys(("window", "batch", "overwrite", "expiry"), 0.0)
    assert refused(server.url)  # stopped: the port is free again
    assert "batchscope-metrics" not in {t.name for t in threading.enumerate()}


def test_a_port_in_use_exits_2_with_one_line_before_the_run(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortError, match="in use"):
            MetricsServer(port)
        code = main(["run", "--duration", "1", "--warmup", "0", "--metrics-port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"batchscope: error: --metrics-port {port}: 127.0.0.1:{port} is in use; "
        "choose another port, or 0 for any free one\n"
    )


@pytest.mark.slow
def test_run_serves_metrics_while_it_runs_and_nothing_listens_without_the_flag(tmp_path):
    """`run --metrics-port 0` prints its URL, listens there (and nowhere else) while it runs,
    and stops at the end; the same run without the flag listens on no port at all."""
    env = {**os.environ, "PYTHONPATH": APP}
    base = [sys.executable, "-m", "batchscope", "run", "--resolution", "256x144"]
    base += ["--sessions", "2", "--warmup", "0"]

    plain = _run([*base, "--duration", "4"], env)
    try:
        assert "thru" in _line(plain, re.compile(r".*thru.*"))  # a status line: it runs
        assert listening_ports(plain.pid) == set()
    finally:
        plain.communicate(timeout=60)
    assert plain.returncode == 0

    report = tmp_path / "report.json"
    served = _run([*base, "--duration", "5", "--metrics-port", "0", "--json", str(report)], env)
    try:
        match = URL_LINE.fullmatch(_line(served, URL_LINE))
        assert match
        url, port = match.group(1), int(match.group(2))
        assert listening_ports(served.pid) == {port}

        def delivered() -> dict[int, float]:
            return by_label(scrape(url)[0], "batchscope_windows_delivered_total", "session")

        assert wait_for(lambda: min(delivered().values(), default=0) > 10, 20)
        samples, names = scrape(url)
        assert names == set(METRICS)
    finally:
        _, err = served.communicate(timeout=60)
    assert served.returncode == 0, err
    assert refused(url)
    sessions = {s["id"] for s in json.loads(report.read_text())["sessions"]}
    assert set(by_label(samples, "batchscope_windows_delivered_total", "session")) == sessions
    assert set(by_label(samples, "batchscope_latency_seconds_count", "session")) == sessions
    assert set(by_label(samples, "batchscope_session_fps", "session")) == sessions
    assert by_label(samples, "batchscope_batch_size_count", "device")[0] > 0


def _run(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _line(proc: subprocess.Popen, pattern: re.Pattern[str]) -> str:
    """The first line of ``proc``'s stderr that ``pattern`` matches whole (stripped)."""
    for line in proc.stderr:
        if pattern.fullmatch(line.strip()):
            return line.strip()
    raise AssertionError(f"no line like {pattern.pattern}; exit {proc.wait()}")
