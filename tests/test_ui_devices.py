"""The Devices view and the Devices/router controls (several devices in BatchScope's worker)."""

from __future__ import annotations

from typing import Any

import pytest

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.ui.plots.device_bars import DeviceBars, fleet, mean_batch
from batchscope.ui.theme import Look
from contract import SMALL_EMULATED, wait_for
from test_ui_controls import pick


def test_the_devices_slider_and_the_router_send_their_fields(controls, qtbot):
    controls.show_config(RunConfig())
    assert controls.devices.value() == 1 and not controls.router.isEnabled()  # no router
    controls.devices.setValue(3)
    qtbot.waitUntil(lambda: bool(controls.sent), timeout=2000)
    assert controls.sent == [{"devices": 3}]
    assert controls.router.isEnabled()
    pick(controls.router, "pinned")
    assert controls.sent[-1] == {"router": "pinned"}
    controls.show_config(RunConfig(devices=2, backend="ray"))  # Ray's router is its own
    assert not controls.router.isEnabled()
    assert controls.router.currentData() == "least-loaded"


def _served(qtbot, config: RunConfig) -> tuple[DeviceBars, Any]:
    """The view updated from a live run's snapshot once every device ran a batch."""
    engine = Engine(config)
    engine.open()
    engine.start()
    view = DeviceBars(Look())
    qtbot.addWidget(view)
    try:
        engine.reset_stats()
        assert wait_for(lambda: all(d["batch_sizes"] for d in engine.snapshot("run").devices), 60)
        snap = engine.snapshot("run")
    finally:
        engine.stop(5.0)
    view.update_from(snap)
    return view, snap


def test_the_devices_view_shows_each_devices_busy_share_sessions_and_batch(qtbot):
    config = RunConfig(**{**SMALL_EMULATED, "sessions": 5, "devices": 2, "router": "pinned"})
    view, snap = _served(qtbot, config)
    heights = list(view.bars.opts["height"])
    assert heights == pytest.approx([100 * d["busy"] for d in snap.devices])
    assert [d["sessions"] for d in snap.devices] == [3, 2]  # pinned: dealt by id
    texts = [t.toPlainText() for t in view._texts if t.isVisible()]
    assert texts == [f"{d['sessions']} sessions\nbatch {mean_batch(d):.2f}" for d in snap.devices]
    assert "% mean · 2 × laptop-8gb · router pinned" in view._title_text
    tip = view.title.toolTip().splitlines()
    assert tip[1].startswith("device 1 (emulated:laptop-8gb): busy ")


def test_unequal_devices_are_counted_by_kind_and_each_bar_names_its_own(qtbot):
    """Two laptop GPUs and a 3g slice of one: the title said "3 × emulated:laptop-8gb,
    emulated:laptop-8gb@3g" (three of the first, read aloud) and no bar said which was
    the slice."""
    profiles = ("laptop-8gb", "laptop-8gb", "laptop-8gb@3g")
    config = RunConfig(**{**SMALL_EMULATED, "sessions": 6, "devices": 3, "profiles": profiles})
    view, snap = _served(qtbot, config)
    assert "% mean · 2 × laptop-8gb + laptop-8gb@3g · router" in view._title_text
    texts = [t.toPlainText() for t in view._texts if t.isVisible()]
    assert [t.splitlines()[0] for t in texts] == list(profiles)
    assert [t.splitlines()[1] for t in texts] == [f"{d['sessions']} sessions" for d in snap.devices]
    assert fleet([{"device": "cpu"}, {"device": "cpu"}, {"device": "emulated:x"}]) == (
        "2 × cpu + emulated:x"
    )


def test_with_one_device_the_view_says_how_to_get_several(qtbot):
    engine = Engine(RunConfig(**SMALL_EMULATED, sessions=2))
    engine.open()
    try:
        snap = engine.snapshot()
    finally:
        engine.stop(5.0)
    view = DeviceBars(Look())
    qtbot.addWidget(view)
    view.update_from(snap)
    # its one bar (an empty card read as broken), and how to get more
    assert snap.devices == [] and len(view.bars.opts["height"]) == 1
    assert f"{len(snap.sessions)} sessions" in view._texts[0].toPlainText()
    assert "one device" in view._title_text
    assert "Set Devices above 1 in the controls" in view.title.toolTip()
