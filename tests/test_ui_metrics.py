"""View → Serve metrics…: the app's Prometheus endpoint on loopback, turned on and off."""

from __future__ import annotations

import socket

from PySide6.QtWidgets import QInputDialog

from test_metrics_export import METRICS, by_label, refused, scrape


def test_serve_metrics_toggles_the_endpoint_and_says_its_url(dashboard, qtbot, monkeypatch):
    asked = []

    def port_zero(*args, **kwargs):
        asked.append(args[1])
        return 0, True  # the dialog's answer: any free port

    monkeypatch.setattr(QInputDialog, "getInt", port_zero)
    action, engine = dashboard.metrics_action, dashboard.engine
    assert action in dashboard.menuBar().actions()[-1].menu().actions()  # View's last
    assert dashboard.presenter.metrics is None and not action.isChecked()

    action.trigger()
    server = dashboard.presenter.metrics
    assert asked == ["Serve metrics"] and server is not None and server.port > 0
    url = f"http://127.0.0.1:{server.port}/metrics"
    assert action.isChecked() and url in action.text()
    assert dashboard.status_line.message.text() == f"Metrics at {url}"

    def delivered() -> dict[int, float]:
        return by_label(scrape(url)[0], "batchscope_windows_delivered_total", "session")

    qtbot.waitUntil(lambda: len(delivered()) == 3 and min(delivered().values()) > 5, timeout=20_000)
    assert scrape(url)[1] == set(METRICS)
    # paused, no batch comes: the endpoint has every batch the engine recorded
    dashboard.pause_action.trigger()
    qtbot.waitUntil(lambda: engine.paused, timeout=10_000)

    def batches_served() -> float:
        return sum(by_label(scrape(url)[0], "batchscope_batch_size_count", "device").values())

    qtbot.waitUntil(lambda: batches_served() == engine.store.batches.total > 0, timeout=10_000)

    action.trigger()  # off: nothing listens
    assert dashboard.presenter.metrics is None and not action.isChecked()
    assert action.text() == "Serve metrics…"
    assert dashboard.status_line.message.text() == f"Metrics no longer served ({url})"
    assert refused(url)


def test_a_port_in_use_is_said_and_nothing_served(dashboard, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(QInputDialog, "getInt", lambda *a, **k: (port, True))
        dashboard.metrics_action.trigger()
    assert dashboard.presenter.metrics is None and not dashboard.metrics_action.isChecked()
    assert dashboard.status_line.message.text() == (
        f"Cannot serve metrics: 127.0.0.1:{port} is in use; choose another port, "
        "or 0 for any free one"
    )


def test_closing_the_window_stops_the_endpoint(dashboard, monkeypatch):
    monkeypatch.setattr(QInputDialog, "getInt", lambda *a, **k: (0, True))
    dashboard.metrics_action.trigger()
    url = dashboard.presenter.metrics.url
    assert scrape(url)[1] == set(METRICS)
    dashboard.close()
    assert refused(url)
