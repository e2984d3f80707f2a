"""The dashboard end to end: controls reach the engine, plots fill, errors show, close is clean."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import QPoint

from batchscope.config import POLICIES
from batchscope.ui.sessions.panel import NOTE_MARK
from contract import wait_for

#: ms for a live change to reach the engine (through the command thread) on a loaded machine
CHANGE_MS = 30_000


def test_policy_combo_and_sliders_change_engine_config(dashboard, qtbot):
    engine, controls = dashboard.engine, dashboard.controls
    controls.policy.setCurrentIndex(POLICIES.index("oldest"))
    qtbot.waitUntil(lambda: engine.config.policy == "oldest", timeout=CHANGE_MS)
    assert not controls.objective.isEnabled() and not controls.max_batch.isEnabled()

    controls.policy.setCurrentIndex(POLICIES.index("adaptive"))
    assert controls.objective.isEnabled()
    controls.objective.setValue(120)
    controls.unlimited.setChecked(False)
    controls.max_batch.setValue(8)
    qtbot.waitUntil(
        lambda: (
            (engine.config.policy, engine.config.slo_ms, engine.config.max_batch)
            == ("adaptive", 120.0, 8)
        ),
        timeout=CHANGE_MS,
    )

    dashboard.sessions.count.setValue(5)
    qtbot.waitUntil(lambda: len(engine.snapshot().sessions) == 5, timeout=CHANGE_MS)


def test_an_unrelated_click_keeps_values_outside_the_slider_ranges(dashboard, qtbot):
    engine, controls = dashboard.engine, dashboard.controls
    dashboard.presenter.change({"policy": "dynamic", "max_batch": 8, "max_delay_ms": 500.0})
    dashboard.presenter.change({"slo_ms": 2000.0})
    qtbot.waitUntil(lambda: engine.config.slo_ms == 2000.0, timeout=CHANGE_MS)
    dashboard.presenter.config_shown.emit(engine.config)
    assert (controls.max_delay.value(), controls.objective.value()) == (500, 2000)
    controls.precision.setCurrentIndex(controls.precision.findData("fp32"))
    qtbot.waitUntil(lambda: engine.config.precision == "fp32", timeout=CHANGE_MS)
    assert (engine.config.max_delay_ms, engine.config.slo_ms) == (500.0, 2000.0)
    assert (controls.max_delay.value(), controls.objective.value()) == (500, 2000)


def test_invalid_change_is_shown_not_applied(dashboard):
    before = dashboard.engine.config
    assert dashboard.presenter.change({"fps": -1.0}) is False
    assert dashboard.engine.config == before
    assert "fps" in dashboard.status_line.message.text()
    assert dashboard.controls.error.isVisibleTo(dashboard)


def test_precision_the_device_lacks_is_disabled_with_reason(dashboard):
    combo = dashboard.controls.precision
    index = combo.findData("bf16")
    assert not combo.model().item(index).isEnabled()
    assert "no bf16" in combo.itemData(index, role=3)  # Qt.ToolTipRole


def test_plots_receive_data_after_a_few_ticks(dashboard, qtbot):
    def filled() -> bool:
        curves = dashboard.fps_plot.curves
        hist = dashboard.latency.curve.yData
        return (
            bool(curves)
            and all(len(c.xData) > 1 for c in curves.values())
            and hist is not None
            and hist.sum() > 0
        )

    qtbot.waitUntil(filled, timeout=CHANGE_MS)
    assert sorted(dashboard.fps_plot.curves) == [0, 1, 2]
    assert len(dashboard.overwritten.bars.opts["height"]) == 3
    assert len(dashboard.video._tiles) == 3
    assert all(t.image is not None for t in dashboard.video._tiles)
    assert int(dashboard.headline.values["throughput"].text()) > 0
    rows = dashboard.sessions.table
    assert rows.rowCount() == 3

    # the app runs until stopped, so the 2 s clip's note says that it loops (once a tick
    # has shown the note: the plots may fill first)
    def states() -> list[str]:
        return [rows.item(r, 2).text() for r in range(rows.rowCount())]

    qtbot.waitUntil(lambda: states() == ["running" + NOTE_MARK] * 3, timeout=CHANGE_MS)

    # the hidden cards fill once their tab is shown
    def batch_shares() -> float:
        return float(np.sum(dashboard.batches.bars.opts["height"]))

    def compute_bars() -> list[float]:
        return list(dashboard.stages.bars["compute"].opts["height"])

    shown = {
        dashboard.batches: lambda: abs(batch_shares() - 100.0) < 1e-6,
        dashboard.throughput: lambda: len(dashboard.throughput.curve.xData) > 1,
        dashboard.stages: lambda: len(compute_bars()) == 3 and min(compute_bars()) > 0,
        dashboard.memory: lambda: "rss_mb" in dashboard.memory._curves,
    }
    for card, ready in shown.items():
        dashboard.show_tab(card)
        qtbot.waitUntil(ready, timeout=CHANGE_MS)
    # the emulated device reports no torch or NVML memory
    assert set(dashboard.memory._curves) <= {"rss_mb", "profile_peak_mb"}


def test_config_change_is_marked_on_the_time_plots(dashboard, qtbot):
    dashboard.controls.policy.setCurrentIndex(POLICIES.index("round-robin"))
    qtbot.waitUntil(
        lambda: any("policy" in m.event.message for m in dashboard.fps_plot.markers.markers),
        timeout=CHANGE_MS,
    )


def test_bad_dropped_file_shows_error_and_others_keep_running(dashboard, qtbot, tmp_path: Path):
    from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
    from PySide6.QtGui import QDropEvent

    bad = tmp_path / "notes.mp4"
    bad.write_text("this is not a video\n")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(bad))])
    drop = QDropEvent(
        QPointF(50, 50),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    dashboard.dropEvent(drop)  # the window's own drop handler
    table = dashboard.sessions.table

    def error_row() -> int | None:
        for row in range(table.rowCount()):
            item = table.item(row, 2)
            if item is not None and item.text().startswith("error"):
                return row
        return None

    qtbot.waitUntil(lambda: error_row() is not None, timeout=CHANGE_MS)
    assert table.item(error_row(), 1).text().endswith("notes")  # the file, its .mp4 left out
    running = {
        s.id: s.delivered for s in dashboard.engine.snapshot().sessions if s.state == "running"
    }
    assert error_row() == 1 and sorted(running) == [0, 2]  # sessions take the sources in turn

    def all_delivered_more() -> bool:
        after = {s.id: s.delivered for s in dashboard.engine.snapshot().sessions}
        return all(after.get(sid, 0) > n for sid, n in running.items())

    qtbot.waitUntil(all_delivered_more, timeout=CHANGE_MS)


def test_close_stops_every_thread_promptly(dashboard):
    engine = dashboard.engine
    # close stops the engine and the command thread, each joining its threads for at most
    # its timeout: all dead when it returns means each ended within it
    dashboard.close()
    assert engine.threads_alive() == []
    assert not dashboard.presenter.commands.alive
    assert not dashboard.timer.isActive()


def test_settings_are_saved_on_close(dashboard, ui_settings):
    dashboard.close()
    assert ui_settings.value("geometry") is not None
    assert '"policy": "all"' in ui_settings.value("controls")
    assert "tiny.mp4" in ui_settings.value("sources")


def test_pause_and_reset(dashboard, qtbot):
    dashboard.pause_action.setChecked(True)
    assert dashboard.engine.paused and dashboard.pause_action.text() == "Resume"
    assert dashboard.status_line.message.text() == "Paused"
    dashboard.pause_action.setChecked(False)
    assert not dashboard.engine.paused and dashboard.pause_action.text() == "Pause"
    dashboard.presenter.reset_stats()
    assert sum(dashboard.engine.snapshot().batch_sizes.values()) < 20


def test_themes_and_presentation_mode(dashboard, qtbot):
    dashboard.set_look(dashboard.look.with_theme("light"))
    assert dashboard.theme_actions["light"].isChecked()
    dashboard.presentation_action.setChecked(True)
    assert dashboard.look.presentation and dashboard.isFullScreen()
    width = dashboard.fps_plot.look.line_width
    dashboard.presentation_action.setChecked(False)
    assert dashboard.fps_plot.look.line_width < width
    assert not dashboard.isFullScreen() and not dashboard.look.presentation
    image = dashboard.grab().toImage()
    assert (image.width(), image.height()) == (dashboard.width(), dashboard.height())
    light = dashboard.look.theme.window
    panel = dashboard.split.widget(0)  # the controls side, painted in the window colour
    corner = panel.mapTo(dashboard, panel.rect().bottomLeft()) + QPoint(2, -2)
    assert image.pixelColor(corner).name().lower() == light.lower()


def test_video_tiles_without_detections_say_why(dashboard, qtbot):
    qtbot.waitUntil(lambda: bool(dashboard.video._message), timeout=CHANGE_MS)
    assert dashboard.video._message == "emulated device: no model runs"
    assert all(t.detection is None for t in dashboard.video._tiles)


def test_tick_cost_is_small(dashboard, qtbot):
    from batchscope.ui.window.main_window import TICK_HZ

    dashboard.tick_stats.reset()
    qtbot.waitUntil(lambda: dashboard.tick_stats.ticks >= 2 * TICK_HZ, timeout=10_000)
    assert dashboard.tick_stats.busy_fraction < 0.5
    # the timer keeps its rate: a slow tick would make it fall behind
    assert TICK_HZ / 3 < dashboard.tick_stats.rate_hz <= TICK_HZ * 1.1


def test_resolution_change_reopens_sources_off_the_gui_thread(dashboard, qtbot, monkeypatch):
    from PySide6.QtCore import QTimer

    engine = dashboard.engine
    beats = [0]
    heartbeat = QTimer()
    heartbeat.timeout.connect(lambda: beats.__setitem__(0, beats[0] + 1))
    heartbeat.start(10)
    painted_while_opening = []
    real_open = engine.open_sources

    def open_slots(specs, config):
        # the window goes on while the sources decode: its timer fires meanwhile (never,
        # were this on the GUI thread or the GUI thread waiting for it)
        seen = beats[0]
        painted_while_opening.append(wait_for(lambda: beats[0] >= seen + 2, timeout=20))
        return real_open(specs, config)

    monkeypatch.setattr(engine, "open_sources", open_slots)
    combo = dashboard.controls.resolution
    combo.setCurrentIndex([combo.itemText(i) for i in range(combo.count())].index("512 × 288"))
    qtbot.waitUntil(lambda: engine.backend.resolution == (512, 288), timeout=CHANGE_MS)
    qtbot.waitUntil(
        lambda: (
            engine.snapshot().sessions[0].latest is not None
            and engine.snapshot().sessions[0].latest.frame.shape[1] == 512
        ),
        timeout=CHANGE_MS,
    )
    heartbeat.stop()
    assert engine.config.resolution == (512, 288)
    assert painted_while_opening == [True]  # one re-decode, and the window kept painting


def test_camera_menu_says_when_there_is_none(dashboard, monkeypatch):
    import batchscope.engine.sources as sources
    from batchscope.engine.sources import CameraInfo

    monkeypatch.setattr(sources, "list_cameras", lambda: [])
    dashboard.sessions._fill_cameras()
    actions = [a for a in dashboard.sessions.camera_menu.actions() if not a.isSeparator()]
    assert [a.text() for a in actions] == [
        "IP camera or network stream (URL)…",
        "no camera found on this machine",
    ]
    assert not actions[-1].isEnabled()
    monkeypatch.setattr(sources, "list_cameras", lambda: [CameraInfo(2, "USB Cam")])
    dashboard.sessions._fill_cameras()
    assert [a.text() for a in dashboard.sessions.camera_menu.actions()][-1] == "USB Cam  (camera:2)"


def test_a_start_failure_is_shown_and_close_stays_clean(qtbot, tiny_video, ui_settings):
    from batchscope.config import RunConfig
    from batchscope.engine.engine import Engine
    from batchscope.ui.controls.device_options import device_choices
    from batchscope.ui.theme import Look
    from batchscope.ui.window.main_window import MainWindow

    # the server profile has no fp32 curve: the backend cannot be built
    config = RunConfig(
        sources=(str(tiny_video),),
        sessions=1,
        profile="server-24gb",
        precision="fp32",
        skip_bad_sources=True,
    )
    window = MainWindow(Engine(config), Look(), ui_settings, devices=device_choices(gpus=[]))
    qtbot.addWidget(window)
    window.show()
    errors = []
    window.presenter.started.connect(errors.append)
    window.start()
    qtbot.waitUntil(lambda: bool(errors), timeout=CHANGE_MS)
    assert "no curve for fp32" in errors[0]
    assert window.status_line.message.text().startswith("Could not start")
    assert not window.timer.isActive()
    window.close()
    assert window.engine.threads_alive() == []


def test_checkpoint_loads_on_the_real_model_and_is_refused_on_emulated(
    dashboard, qtbot, tmp_path: Path
):
    import torch

    from batchscope.models.blurball import BlurBall

    engine = dashboard.engine
    assert dashboard.presenter.load_checkpoint(str(tmp_path / "x.pt")) is False  # emulated
    assert "real model" in dashboard.status_line.message.text()
    dashboard.presenter.change(
        {
            "backend": "torch",
            "device": "cpu",
            "profile": None,
            "precision": "fp32",
            "resolution": (128, 72),
        }
    )
    # the real model's build and warm-up on two busy cores beside the running dashboard
    build_ms = 180_000
    qtbot.waitUntil(lambda: engine.backend.weights.startswith("demo weights"), timeout=build_ms)
    ckpt = tmp_path / "blurball_best.pt"
    torch.save({"model_state_dict": BlurBall().state_dict()}, ckpt)
    assert dashboard.presenter.load_checkpoint(str(ckpt)) is True
    qtbot.waitUntil(lambda: engine.snapshot().weights == f"checkpoint {ckpt}", timeout=build_ms)
    assert engine.snapshot().draws_detections


def test_the_engine_list_switches_the_engine_live_and_back(dashboard, qtbot, fakes):
    """Engine → a serving engine (faked here: tests/fake_serving.py), and back: the switch
    is a live change, said in the status line; the Device list stays what runs a batch."""
    engine, controls = dashboard.engine, dashboard.controls
    device = controls.device.currentData()
    # the first tick says the looping clip's note: switch after it, or it may follow (and
    # replace) the "Applied" line when the faked build is quicker than one tick
    qtbot.waitUntil(lambda: "it loops" in dashboard.status_line.message.text(), timeout=CHANGE_MS)
    controls.engine.setCurrentIndex(controls.engine.findData("triton"))
    qtbot.waitUntil(lambda: engine.config.serving == "triton", timeout=CHANGE_MS)
    qtbot.waitUntil(
        lambda: "triton: fake" in dashboard.status_line.message.text(), timeout=CHANGE_MS
    )
    assert controls.device.currentData() == device
    built, _ = fakes
    qtbot.waitUntil(lambda: built[0].sent > 20, timeout=CHANGE_MS)
    controls.engine.setCurrentIndex(controls.engine.findData("inprocess"))
    qtbot.waitUntil(lambda: engine.config.serving is None, timeout=CHANGE_MS)
    assert built[0].closed and engine.config.backend == "emulated"
    assert controls.engine.currentData() == "inprocess"
    assert controls.device.currentData() == device
