"""The run controls send only what the user changed and show every value as it is."""

from __future__ import annotations

from batchscope.config import DYNAMIC_DEFAULT_MAX_BATCH, KNOBS, RunConfig, default_cpu_precision
from batchscope.ui.controls.device_options import device_choices
from batchscope.ui.controls.panel import ControlsPanel


def pick(combo, data) -> None:
    """Select the item whose data is ``data``, as a click would."""
    index = next(i for i in range(combo.count()) if combo.itemData(i) == data)
    assert index != combo.currentIndex()
    combo.setCurrentIndex(index)


def test_an_unrelated_click_sends_only_its_field_and_keeps_values_outside_the_sliders(controls):
    config = RunConfig(policy="dynamic", max_batch=8, max_delay_ms=500.0, slo_ms=2000.0)
    controls.show_config(config)
    assert controls.sent == []  # showing is not changing
    assert controls.max_delay.value() == 500 and controls.max_delay.maximum() == 500
    assert controls.objective.value() == 2000 and controls.objective.maximum() == 2000
    pick(controls.precision, "fp32")
    assert controls.sent == [{"precision": "fp32"}]
    assert (controls.max_delay.value(), controls.objective.value()) == (500, 2000)


def test_slider_ranges_and_defaults_come_from_the_knobs(controls):
    controls.show_config(RunConfig())
    for slider, name in (
        (controls.max_delay, "max_delay_ms"),
        (controls.fixed_batch, "batch"),
        (controls.objective, "slo_ms"),
        (controls.fps, "fps"),
        (controls.max_batch, "max_batch"),
    ):
        assert (slider.minimum(), slider.maximum()) == KNOBS[name].slider, name
    assert controls.max_delay.value() == KNOBS["max_delay_ms"].default
    # a config inside the ranges again shrinks a widened slider back
    controls.show_config(RunConfig(max_delay_ms=500.0))
    controls.show_config(RunConfig())
    assert controls.max_delay.maximum() == KNOBS["max_delay_ms"].slider[1]


def test_large_and_fractional_values_are_shown_as_they_are(controls):
    controls.show_config(RunConfig(max_batch=200, batch=100, max_delay_ms=2.5, fps=12.5))
    assert controls.max_batch.value() == 200 and not controls.unlimited.isChecked()
    assert controls.fixed_batch.value() == 100
    assert controls.max_delay.value() == 2.5
    assert controls.max_delay._label.text() == "2.5"
    assert controls.fps.value() == 12.5
    controls.channels_last.setChecked(True)  # disabled on emulated, but a click is a click
    assert controls.sent == [{"channels_last": True}]


def test_a_slider_drag_is_one_change_of_one_field(controls, qtbot):
    controls.show_config(RunConfig(policy="fixed", max_delay_ms=500.0))
    for v in (5, 6, 7, 8):
        controls.fixed_batch.setValue(v)
    qtbot.waitUntil(lambda: bool(controls.sent), timeout=2000)
    assert controls.sent == [{"batch": 8}]


def test_a_pending_drag_goes_out_with_the_next_click(controls):
    controls.show_config(RunConfig(policy="fixed"))
    controls.fixed_batch.setValue(9)
    pick(controls.precision, "fp32")
    assert controls.sent == [{"batch": 9, "precision": "fp32"}]


def test_switching_to_dynamic_from_unlimited_sends_the_cap_dynamic_needs(controls):
    controls.show_config(RunConfig(policy="all", max_batch=None, max_delay_ms=500.0))
    assert controls.unlimited.isChecked() and not controls.max_batch.isEnabled()
    pick(controls.policy, "dynamic")
    assert controls.sent == [{"policy": "dynamic", "max_batch": DYNAMIC_DEFAULT_MAX_BATCH}]
    assert not controls.unlimited.isChecked() and controls.max_batch.isEnabled()
    assert controls.max_batch.value() == DYNAMIC_DEFAULT_MAX_BATCH
    pick(controls.policy, "all")  # all keeps the cap it now has: only the policy goes
    assert controls.sent[-1] == {"policy": "all"}


def test_a_device_change_sends_the_device_and_what_fit_had_to_change(controls):
    controls.show_config(RunConfig(precision="fp32", resolution=(256, 144), max_delay_ms=500.0))
    pick(controls.device, "emulated:server-24gb")  # measured only fp16 at 512×288
    assert controls.sent == [
        {
            "backend": "emulated",
            "device": "cpu",
            "profile": "server-24gb",
            "runtime": "torch",
            "precision": "fp16",
            "resolution": (512, 288),
        }
    ]
    pick(controls.device, "cpu")  # fp16 is refused on the CPU; 512×288 is fine
    assert controls.sent[-1] == {
        "backend": "torch",
        "device": "cpu",
        "profile": None,
        "runtime": "onnxruntime",  # the CPU's default: the fastest runtime measured there
        "precision": default_cpu_precision(),  # and its precision (int8 with VNNI)
    }


def test_on_a_serving_engine_the_device_is_what_runs_a_batch_in_it(controls):
    """gui --backend triton: the Engine row names it, a device change keeps it."""
    config = RunConfig(backend="triton", profile="laptop-8gb", resolution=(256, 144))
    controls.show_config(config)
    assert controls.engine.currentText() == "Triton server"
    adaptive = controls.policy.model().item(controls.policy.findData("adaptive"))
    assert not adaptive.isEnabled()  # Triton has no live cap: greyed, the reason its tip
    assert "no live batch cap" in adaptive.toolTip()
    assert controls.device.currentData() == "emulated:laptop-8gb"  # the runner, not the engine
    pick(controls.device, "emulated:server-24gb")
    sent = controls.sent[-1]
    assert (sent["backend"], sent["profile"]) == ("triton", "server-24gb")
    RunConfig(**{**config.__dict__, **sent})  # a config the engine can take as it is
    controls.show_config(RunConfig())
    assert controls.engine.currentText() == "BatchScope's worker"
    assert controls.policy.model().item(controls.policy.findData("adaptive")).isEnabled()
    pick(controls.device, "emulated:server-24gb")
    assert controls.sent[-1]["backend"] == "emulated"


def test_the_engine_list_switches_the_engine_and_keeps_the_device(qtbot):
    """Choosing an engine sends only the backend: the device stays what runs a batch (in
    the engine, or in BatchScope's worker); an engine not set up is greyed with the reason."""
    panel = ControlsPanel(
        device_choices(gpus=[]), {"inprocess": None, "ray": None, "triton": "not set up here"}
    )
    qtbot.addWidget(panel)
    sent: list[dict] = []
    panel.changed.connect(sent.append)
    config = RunConfig(profile="laptop-8gb", resolution=(256, 144))
    panel.show_config(config)
    assert sent == []  # showing sends nothing
    triton = panel.engine.model().item(panel.engine.findData("triton"))
    assert not triton.isEnabled() and "not set up here" in triton.toolTip()
    pick(panel.engine, "ray")
    assert sent == [{"backend": "ray", "ray_address": None}]
    ray = RunConfig(**{**config.__dict__, **sent[-1]})  # a config the engine takes as it is
    assert ray.serving == "ray" and ray.runner == "emulated"
    panel.show_config(ray)
    pick(panel.engine, "inprocess")
    assert sent[-1] == {"backend": "emulated", "ray_address": None}  # the device's own again


def test_a_ray_cluster_given_at_the_start_is_left_and_found_again(qtbot):
    """gui --backend ray --ray-address ADDR: a switch off Ray drops the address (it is
    Ray's only: a config keeping it is refused), a switch back connects to it again."""
    panel = ControlsPanel(device_choices(gpus=[]), {"inprocess": None, "ray": None})
    qtbot.addWidget(panel)
    sent: list[dict] = []
    panel.changed.connect(sent.append)
    on_cluster = RunConfig(backend="ray", profile="laptop-8gb", ray_address="10.0.0.5:6379")
    panel.show_config(on_cluster)
    pick(panel.engine, "inprocess")
    off = RunConfig(**{**on_cluster.__dict__, **sent[-1]})  # refused if it kept the address
    assert off.serving is None and off.ray_address is None
    panel.show_config(off)
    pick(panel.engine, "ray")
    assert sent[-1] == {"backend": "ray", "ray_address": "10.0.0.5:6379"}


def test_each_source_at_its_own_fps_is_shown_and_not_overwritten(controls):
    controls.show_config(RunConfig(fps=None))
    assert controls.source_fps.isChecked() and not controls.fps.isEnabled()
    pick(controls.precision, "fp32")
    assert "fps" not in controls.sent[-1]
    controls.source_fps.setChecked(False)
    assert controls.sent[-1] == {"fps": KNOBS["fps"].default}


def test_a_resolution_or_device_the_lists_lack_is_shown_not_replaced(controls):
    config = RunConfig(backend="torch", device="cuda:3", profile=None, resolution=(320, 176))
    controls.show_config(config)
    assert controls.device.currentData() == "cuda:3"
    assert controls.resolution.currentText() == "320 × 176"
    assert controls.sent == []


def test_torch_compile_is_offered_for_the_torch_runtime_only(controls):
    controls.show_config(
        RunConfig(backend="torch", device="cpu", runtime="torch", precision="fp32", profile=None)
    )
    assert controls.compile.isEnabled() and not controls.compile.isChecked()
    controls.compile.setChecked(True)
    assert controls.sent[-1] == {"compile": True}
    controls.show_config(
        RunConfig(
            backend="torch", device="cpu", runtime="onnxruntime", precision="fp32", profile=None
        )
    )
    assert not controls.compile.isEnabled()  # compile is a torch option
    controls.show_config(RunConfig())  # the emulated device runs no model
    assert not controls.compile.isEnabled()


def test_a_config_shown_while_a_slider_waits_to_send_keeps_the_drag(controls, qtbot):
    """The engine's config arriving mid-drag is the change before's: the dragged slider keeps
    its value and sends it; the other controls show the config (the old panel dropped the drag)."""
    before = RunConfig(policy="adaptive", slo_ms=50.0, precision="fp16")
    controls.show_config(before)
    controls.objective.setValue(120)  # a drag, sent after the debounce
    controls.show_config(before.with_changes(precision="fp32"))
    assert controls.objective.value() == 120
    assert controls.precision.currentData() == "fp32"
    qtbot.waitUntil(lambda: controls.sent != [], timeout=5000)
    assert controls.sent == [{"slo_ms": 120.0}]
