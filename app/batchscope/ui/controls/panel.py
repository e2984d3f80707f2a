"""The run controls: policy and its parameters, device, precision, resolution, fps.

A dumb view: ``changed(dict)`` carries only the RunConfig fields the user
just changed (plus what that change forces: dynamic needs a cap, a device
may not run the shown precision or resolution), so a click never writes
back a value the controls merely display. Slider drags are debounced, so a
drag is one apply and one event line, not fifty. ``show_config`` sets the
widgets without emitting, showing each value as it is: a slider's range
(``Knob.slider``) grows to hold a valid value outside it, never clamps it.
Parameters the chosen policy does not read are disabled, and options the
device cannot run are disabled with the reason as tooltip.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPaintEvent, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QWidget,
)
from superqt import QLabeledDoubleSlider, QLabeledSlider
from superqt.utils import qdebounced

from batchscope.config import (
    DROP_AFTER_RULE,
    DYNAMIC_DEFAULT_MAX_BATCH,
    KNOBS,
    POLICIES,
    POLICY_PARAMS,
    ROUTERS,
    SERVING_REFUSALS,
    ConfigError,
    RunConfig,
    format_resolution,
)
from batchscope.engine.serving.engines import ENGINE_LABELS, engine_availability
from batchscope.policy_kinds import KINDS
from batchscope.ui.controls.device_options import (
    DeviceChoice,
    choice_key,
    fit,
    precision_reasons,
    resolution_options,
)
from batchscope.ui.plain_text import add_item, plain_label, plain_tip

#: The longest reason the controls show for a change not applied (about three lines of the
#: panel); the rest is in its tooltip
ERROR_CHARS = 160

SLIDER_DEBOUNCE_MS = 300

ENGINE_TIP = (
    "What forms the batches: BatchScope's own worker, or a real serving engine with the same "
    "sessions (batchscope gui --backend ray|triton starts on one). A switch is a live change: "
    "the engine starts (seconds; the run goes on meanwhile), then takes over, and a new "
    "segment opens. The Device list is what runs a batch in the engine."
)

ROUTER_TIP = (
    "Where each window goes on several devices: pinned (a session stays on one device, the "
    "sessions dealt by count, again when they join or leave) or least-loaded (of two devices "
    "drawn at random, the one with fewer windows waiting: Ray Serve's rule, the only one Ray "
    "has). A change is live and opens a segment."
)

Slider = QLabeledSlider | QLabeledDoubleSlider


def _slider_range(name: str) -> tuple[float, float]:
    """``KNOBS[name].slider``, or the knob's whole range where it has none (e.g. a 0–1 duty)."""
    knob = KNOBS[name]
    return knob.slider or (knob.lo, knob.hi)


def _min_decimals(name: str) -> int:
    """A fraction (a knob of range 0–1) slides in hundredths; other float knobs in units."""
    return 2 if KNOBS[name].kind is float and _slider_range(name)[1] <= 1 else 0


def _slider(name: str) -> Slider:
    """A slider over ``_slider_range(name)``; float knobs get a double slider (no rounding)."""
    knob = KNOBS[name]
    lo, hi = _slider_range(name)
    if knob.kind is float:
        s: Slider = QLabeledDoubleSlider(Qt.Orientation.Horizontal)
        s.setDecimals(_min_decimals(name))
    else:
        s = QLabeledSlider(Qt.Orientation.Horizontal)
    s.setRange(lo, hi)
    s.setValue(knob.default if knob.default is not None else lo)
    if knob.help:
        s.setToolTip(f"{knob.help} ({knob.range_text()})")
    return s


def _show_value(slider: Slider, name: str, value: float) -> None:
    """Show ``value`` exactly: the knob's slider range, widened to include it if it lies outside."""
    lo, hi = _slider_range(name)
    slider.setRange(min(lo, value), max(hi, value))
    if isinstance(slider, QLabeledDoubleSlider):
        slider.setDecimals(max(_min_decimals(name), _decimals(value)))
    slider.setValue(value)


def _decimals(value: float) -> int:
    """The fewest decimals (at most 3) that show ``value`` as it is."""
    for d in range(3):
        if round(value, d) == value:
            return d
    return 3


class ControlsPanel(QWidget):
    changed = Signal(dict)  # the RunConfig fields the user changed: name -> new value

    def __init__(
        self,
        devices: list[DeviceChoice],
        engines: dict[str, str | None] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """``engines``: each engine's reason it cannot serve here, or None (default:
        ``engine_availability()``); one that cannot is greyed, the reason its tip."""
        super().__init__(parent)
        self._devices = {d.key: d for d in devices}
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setContentsMargins(8, 4, 8, 4)

        self._make_policy_widgets()
        self._make_device_widgets(devices, engines)
        self._make_run_widgets()
        self._lay_out(form)
        #: slider -> the RunConfig field it sets
        self._sliders: dict[Slider, str] = {
            self.max_batch: "max_batch",
            self.max_delay: "max_delay_ms",
            self.fixed_batch: "batch",
            self.objective: "slo_ms",
            self.fps: "fps",
            self.neighbours: "neighbours",
            self.neighbour_duty: "neighbour_duty",
            self.devices: "devices",
        }
        self._pending: dict[str, Any] = {}
        self._flush_debounced = qdebounced(self._flush, timeout=SLIDER_DEBOUNCE_MS)
        self._connect()

    def _make_policy_widgets(self) -> None:
        """The policy list and its knobs' sliders."""
        self.policy = QComboBox()
        for p in POLICIES:
            self.policy.addItem(KINDS[p].label, p)
        self.max_batch = _slider("max_batch")
        self.unlimited = QCheckBox("unlimited")
        self.max_delay = _slider("max_delay_ms")
        self.fixed_batch = _slider("batch")
        self.objective = _slider("slo_ms")

    def _make_device_widgets(
        self, devices: list[DeviceChoice], engines: dict[str, str | None] | None
    ) -> None:
        """The device list (a runtime that cannot run here greyed, the reason its tip) and
        the engine list."""
        self.device = ElidedCombo()
        self.device.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.device.setMinimumContentsLength(18)
        for d in devices:  # a runtime that cannot run here is greyed out, the reason its tip
            add_item(self.device, d.label, d.key, d.unavailable)
        # the closed box may cut a long label: the list shows it whole, the box's tip too
        self._fit_device_list()
        self.device.currentIndexChanged.connect(self._tip_device)
        # the engine that forms the batches (a live switch; gui --backend ray|triton)
        self.engine = QComboBox()
        self.engine.setObjectName("controlEngine")
        self.engine.setToolTip(ENGINE_TIP)
        for name, why in (engines if engines is not None else engine_availability()).items():
            add_item(self.engine, ENGINE_LABELS[name], name, why)
        self._serving: str | None = None
        self._ray_address: str | None = None  # gui --ray-address: Ray's, whenever on Ray

    def _make_run_widgets(self) -> None:
        """Precision, resolution, fps, the model's switches, devices and router, the
        emulated device's neighbours, the deadline drop, and the lines that warn."""
        self.precision = QComboBox()
        self.resolution = QComboBox()
        self.fps = _slider("fps")
        self.source_fps = QCheckBox("source's own")
        self.source_fps.setToolTip("each source at its own frame rate")
        self.channels_last = QCheckBox("channels_last")
        self.cudnn = QCheckBox("cuDNN benchmark")
        self.compile = QCheckBox("torch.compile")
        self.compile.setToolTip(
            "compile the model (torch runtime): faster batches after a first build of "
            "30–100 s on a CPU; the run goes on meanwhile"
        )
        self.neighbours = _slider("neighbours")
        # several devices: emulated ones or model instances in BatchScope's worker, or Ray
        # Serve replicas
        self.devices = _slider("devices")
        self.router = QComboBox()
        self.router.setObjectName("controlRouter")
        for name in ROUTERS:
            self.router.addItem(name, name)
        self.router.setToolTip(ROUTER_TIP)
        self.neighbour_duty = _slider("neighbour_duty")
        self.neighbour_duty.setToolTip(
            "Share of every 0.1 s each neighbour keeps the GPU busy, 0 to 1 (1: always busy)"
        )
        self.drop_on = QCheckBox("drop after")
        self.drop_on.setToolTip(
            "Deadline drop (off by default): a window that waited longer than this is "
            f"discarded before the policy chooses, and counted as expired; {DROP_AFTER_RULE}"
        )
        self.drop_ms = QLineEdit()
        self.drop_ms.setPlaceholderText("ms, e.g. 100")
        self.drop_ms.setToolTip(
            f"{KNOBS['drop_after_ms'].help}; {KNOBS['drop_after_ms'].range_text()}"
        )
        # a limit the run's frame rate leaves nothing to drop (show_drop_warning)
        self.drop_warning = plain_label()
        self.drop_warning.setObjectName("controlWarning")
        self.drop_warning.setWordWrap(True)
        self.drop_warning.hide()
        self.error = plain_label()  # errors quote what was typed: drawn as they are
        self.error.setObjectName("controlError")
        self.error.setWordWrap(True)
        self.error.hide()

    def _lay_out(self, form: QFormLayout) -> None:
        """The rows, in the panel's order; each knob's row kept to grey with its policy."""
        batch_row = _row(self.max_batch, self.unlimited)
        fps_row = _row(self.fps, self.source_fps)
        # two to a line: one line of three set the panel's width (546 px at 1280×800)
        switches = QGridLayout()
        switches.setContentsMargins(0, 0, 0, 0)
        for i, box in enumerate((self.channels_last, self.cudnn, self.compile)):
            switches.addWidget(box, i // 2, i % 2)
        switches.setColumnStretch(2, 1)
        drop_row = _row(self.drop_ms, self.drop_on)
        devices_row = _row(self.devices, self.router)

        self._param_rows: dict[str, list[QWidget]] = {}
        form.addRow("Policy", self.policy)
        for name, label, field in (
            ("max_batch", "Max batch", batch_row),
            ("max_delay_ms", "Max queue delay ms", self.max_delay),
            ("batch", "Fixed batch", self.fixed_batch),
            ("slo_ms", "Latency objective ms", self.objective),
        ):
            lab = QLabel(label)
            form.addRow(lab, field)
            widgets = [self.max_batch, self.unlimited] if name == "max_batch" else [field]
            self._param_rows[name] = [lab, *widgets]
        form.addRow("Engine", self.engine)
        form.addRow("Device", self.device)
        form.addRow("Precision", self.precision)
        form.addRow("Resolution", self.resolution)
        form.addRow("Source fps", fps_row)
        form.addRow("", switches)
        form.addRow("Devices", devices_row)
        form.addRow("Neighbours", self.neighbours)
        form.addRow("Neighbour duty", self.neighbour_duty)
        form.addRow("Drop after ms", drop_row)
        form.addRow(self.drop_warning)
        form.addRow(self.error)

    def _connect(self) -> None:
        """Every control's change to the handler that sends it."""
        self.policy.currentIndexChanged.connect(self._on_policy)
        self.engine.currentIndexChanged.connect(self._on_engine)
        self.device.currentIndexChanged.connect(self._on_device)
        self.precision.currentIndexChanged.connect(self._on_precision)
        self.resolution.currentIndexChanged.connect(self._on_resolution)
        self.unlimited.toggled.connect(self._on_unlimited)
        self.source_fps.toggled.connect(self._on_source_fps)
        self.channels_last.toggled.connect(lambda on: self._send({"channels_last": on}))
        self.cudnn.toggled.connect(lambda on: self._send({"cudnn_benchmark": on}))
        self.compile.toggled.connect(lambda on: self._send({"compile": on}))
        self.router.currentIndexChanged.connect(
            lambda _i: self._send({"router": self.router.currentData()})
        )
        self.drop_on.toggled.connect(self._on_drop)
        self.drop_ms.editingFinished.connect(self._on_drop)
        for slider, name in self._sliders.items():
            slider.valueChanged.connect(lambda _v, s=slider, n=name: self._on_slider(s, n))

    # -- reading --------------------------------------------------------------------------

    def choice(self) -> DeviceChoice:
        return self._devices[self.device.currentData()]

    # -- showing ----------------------------------------------------------------------------

    def show_config(self, config: RunConfig) -> None:
        """Set every control from ``config`` without emitting ``changed``, except a slider
        the user has moved since the last send: it keeps the new value, still to be sent.

        (``config`` is the engine's after the change before: under load it arrives after
        the next drag has begun, and dropping that drag lost what the user set.)
        """
        unsent = {s: s.value() for s, name in self._sliders.items() if name in self._pending}
        widgets = (
            self.policy,
            self.unlimited,
            self.engine,
            self.device,
            self.precision,
            self.resolution,
            self.source_fps,
            self.channels_last,
            self.cudnn,
            self.compile,
            self.drop_on,
            self.drop_ms,
            self.router,
            *self._sliders,
        )
        for w in widgets:
            w.blockSignals(True)
        try:
            self.policy.setCurrentIndex(POLICIES.index(config.policy))
            self.unlimited.setChecked(config.max_batch is None)
            # unlimited still leaves the slider at the cap dynamic would get
            _show_value(self.max_batch, "max_batch", config.max_batch or DYNAMIC_DEFAULT_MAX_BATCH)
            _show_value(self.max_delay, "max_delay_ms", config.max_delay_ms)
            _show_value(self.fixed_batch, "batch", config.batch)
            _show_value(self.objective, "slo_ms", config.slo_ms)
            self.source_fps.setChecked(config.fps is None)
            _show_value(self.fps, "fps", KNOBS["fps"].default if config.fps is None else config.fps)
            self.channels_last.setChecked(config.channels_last)
            self.cudnn.setChecked(config.cudnn_benchmark)
            self.compile.setChecked(config.compile)
            _show_value(self.neighbours, "neighbours", config.neighbours)
            _show_value(self.neighbour_duty, "neighbour_duty", config.neighbour_duty)
            _show_value(self.devices, "devices", config.devices)
            self.router.setCurrentIndex(ROUTERS.index(config.router))
            self.drop_on.setChecked(config.drop_after_ms is not None)
            if config.drop_after_ms is not None:  # off keeps the last value typed, to re-use
                self.drop_ms.setText(f"{config.drop_after_ms:g}")
            self._serving = config.serving
            self._ray_address = config.ray_address or self._ray_address
            self.engine.setCurrentIndex(_find(self.engine, config.serving or "inprocess"))
            self._grey_policies(SERVING_REFUSALS.get(config.serving or "", {}))
            self.device.setCurrentIndex(_find(self.device, self._device_key(config)))
            self._tip_device()
            self._fill_options(config.precision, config.resolution)
            for slider, value in unsent.items():
                slider.setValue(value)
        finally:
            for w in widgets:
                w.blockSignals(False)
        self._update_enabled()

    def _grey_policies(self, refused: dict[str, str]) -> None:
        """Grey out the policies the engine cannot hold, the reason their tip."""
        model = self.policy.model()
        for i, p in enumerate(POLICIES):
            why = refused.get(p)
            if isinstance(model, QStandardItemModel):
                model.item(i).setEnabled(why is None)
            self.policy.setItemData(i, plain_tip(why) if why else None, Qt.ItemDataRole.ToolTipRole)

    def _fit_device_list(self) -> None:
        fm = self.device.fontMetrics()
        widest = max(
            (fm.horizontalAdvance(self.device.itemText(i)) for i in range(self.device.count())),
            default=0,
        )
        self.device.view().setMinimumWidth(widest + 32)  # + the check mark and margins, px

    def _tip_device(self) -> None:
        self.device.setToolTip(plain_tip(self.device.currentText()))

    def show_drop_warning(self, text: str | None) -> None:
        """Say under the drop row why its limit cannot take effect (``drop_after_warning``
        of the run as it is), or nothing (None)."""
        text = text or ""
        if self.drop_warning.text() != text:
            self.drop_warning.setText(text)
            self.drop_warning.setVisible(bool(text))

    def show_error(self, message: str) -> None:
        """Why the last change was not applied, under the controls: its first line, at
        most :data:`ERROR_CHARS` characters; the whole in its tooltip (and in the status
        line and the events). An engine that did not start can say a page (Ray: its log's
        last lines and a traceback), which filled the panel and cut the controls off."""
        first = message.splitlines()[0] if message else ""
        if len(first) > ERROR_CHARS:
            first = first[: ERROR_CHARS - 1].rstrip() + "…"
        self.error.setText(first)
        self.error.setToolTip(plain_tip(message) if first != message else "")
        self.error.setVisible(bool(message))

    def _device_key(self, config: RunConfig) -> str:
        """The device item for ``config``, added if the list lacks it (e.g. a profile path)."""
        key = choice_key(config)
        if key not in self._devices:
            emulated = config.runner == "emulated"
            choice = DeviceChoice(
                key,
                f"{key} · {'emulated' if emulated else 'real model'}",
                config.runner,
                config.device,
                config.profile,
                ((config.precision, tuple(config.resolution)),) if emulated else (),
            )
            self._devices[key] = choice
            self.device.addItem(choice.label, key)
            self._fit_device_list()
        return key

    def _fill_options(self, precision: str, resolution: tuple[int, int]) -> None:
        """Refill precision and resolution for the current device, disabling what it lacks."""
        choice = self.choice()
        for combo in (self.precision, self.resolution):
            combo.blockSignals(True)
            combo.clear()
        options = resolution_options(choice)
        options.setdefault(tuple(resolution), None)  # the one in use is shown even if unlisted
        for res, why in sorted(options.items()):
            add_item(self.resolution, format_resolution(res).replace("x", " × "), res, why)
        for p, why in precision_reasons(choice, resolution).items():
            add_item(self.precision, p.upper(), p, why)
        self.resolution.setCurrentIndex(_find(self.resolution, tuple(resolution)))
        self.precision.setCurrentIndex(_find(self.precision, precision))
        for combo in (self.precision, self.resolution):
            combo.blockSignals(False)

    def _update_enabled(self) -> None:
        policy = self.policy.currentData()
        used = POLICY_PARAMS[policy]
        for name, widgets in self._param_rows.items():
            for w in widgets:
                w.setEnabled(name in used)
        self.unlimited.setEnabled("max_batch" in KINDS[policy].optional)
        self.max_batch.setEnabled("max_batch" in used and not self.unlimited.isChecked())
        self.fps.setEnabled(not self.source_fps.isChecked())
        self.drop_ms.setEnabled(self.drop_on.isChecked())
        # one device has no router; Ray's is its own (least-loaded)
        self.router.setEnabled(self.devices.value() > 1 and self._serving is None)
        choice = self.choice()
        torch_model = not choice.emulated and choice.runtime == "torch"
        self.channels_last.setEnabled(torch_model)
        self.cudnn.setEnabled(choice.device.startswith("cuda") and torch_model)
        self.compile.setEnabled(torch_model)
        tip = (
            "only for the real model"
            if choice.emulated
            else ("" if torch_model else "a torch option (this device runs ONNX Runtime)")
        )
        self.channels_last.setToolTip(tip)
        self.cudnn.setToolTip(tip or ("" if choice.device.startswith("cuda") else "CUDA only"))

    # -- user changes -------------------------------------------------------------------------

    def _on_policy(self) -> None:
        policy = self.policy.currentData()
        changes: dict[str, Any] = {"policy": policy}
        kind = KINDS[policy]
        if (
            "max_batch" in kind.knobs
            and "max_batch" not in kind.optional
            and self.unlimited.isChecked()
        ):
            # a policy that needs a cap (dynamic: to know when a batch is full) gets one
            changes["max_batch"] = DYNAMIC_DEFAULT_MAX_BATCH
            for w in (self.unlimited, self.max_batch):
                w.blockSignals(True)
            self.unlimited.setChecked(False)
            _show_value(self.max_batch, "max_batch", DYNAMIC_DEFAULT_MAX_BATCH)
            for w in (self.unlimited, self.max_batch):
                w.blockSignals(False)
        self._send(changes)

    def _on_unlimited(self, on: bool) -> None:
        self._send({"max_batch": None if on else int(self.max_batch.value())})

    def _on_source_fps(self, on: bool) -> None:
        self._send({"fps": None if on else self._slider_value(self.fps, "fps")})

    def _on_drop(self) -> None:
        """Drop after the typed ms (checked), or never (unchecked); a bad value is refused."""
        if not self.drop_on.isChecked():
            self._send({"drop_after_ms": None})
            return
        knob = KNOBS["drop_after_ms"]
        text = self.drop_ms.text().strip()
        try:
            value = knob.parse(text)
            if value is None:  # "none": that is the box unchecked
                raise ConfigError(knob.name, text, f"type a number {knob.range_text()}")
        except ConfigError as exc:
            self._update_enabled()
            self.show_error(f"Not applied: {exc}")
            return
        self._send({"drop_after_ms": value})

    def _on_slider(self, slider: Slider, name: str) -> None:
        self._send({name: self._slider_value(slider, name)}, debounce=True)

    def _on_precision(self) -> None:
        self._send({"precision": self.precision.currentData()})

    def _on_engine(self) -> None:
        """A switch of engine: the device stays what runs a batch (in the engine, or in
        BatchScope's worker); the policies the engine cannot hold are greyed."""
        engine = self.engine.currentData()
        self._serving = None if engine == "inprocess" else engine
        self._grey_policies(SERVING_REFUSALS.get(self._serving or "", {}))
        backend = self._serving or self.choice().changes()["backend"]
        # the cluster given at the start (gui --ray-address) is Ray's only: kept for a
        # switch back
        ray_address = self._ray_address if self._serving == "ray" else None
        self._send({"backend": backend, "ray_address": ray_address})

    def _on_device(self) -> None:
        changes = self.choice().changes()
        if self._serving:  # the engine stays; the device is what runs a batch in it
            changes["backend"] = self._serving
        changes.update(self._refit())
        self._send(changes)

    def _on_resolution(self) -> None:
        if self.resolution.currentData() is None:
            return
        resolution = tuple(self.resolution.currentData())
        self._send({"resolution": resolution, **self._refit()})

    def _refit(self) -> dict[str, Any]:
        """Refill the options for the device; the precision/resolution ``fit`` had to change."""
        shown = (self.precision.currentData(), tuple(self.resolution.currentData()))
        precision, resolution = fit(self.choice(), *shown)
        self._fill_options(precision, resolution)
        changes: dict[str, Any] = {}
        if precision != shown[0]:
            changes["precision"] = precision
        if resolution != shown[1]:
            changes["resolution"] = resolution
        return changes

    @staticmethod
    def _slider_value(slider: Slider, name: str) -> Any:
        value = slider.value()
        if isinstance(slider, QLabeledDoubleSlider):
            value = round(value, slider.decimals())  # what the label shows
        return KNOBS[name].kind(value)

    def _send(self, changes: dict[str, Any], debounce: bool = False) -> None:
        """Emit ``changes`` (with any slider move still waiting); sliders wait for the drag."""
        self._pending.update(changes)
        if debounce:
            self._flush_debounced()
        else:
            self._flush_debounced.cancel()
            self._flush()

    def _flush(self) -> None:
        changes, self._pending = self._pending, {}
        self._update_enabled()
        if changes:
            self.show_error("")
            self.changed.emit(changes)


class ElidedCombo(QComboBox):
    """A combo box whose closed box cuts a long entry with "…" (its list and its tooltip
    show it whole), where a plain one would clip it mid-letter."""

    def shown_text(self) -> str:
        """The current entry as the closed box draws it."""
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        field = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, opt, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        return self.fontMetrics().elidedText(
            self.currentText(), Qt.TextElideMode.ElideRight, field.width()
        )

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        opt.currentText = self.shown_text()
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)


def _row(*widgets: QWidget) -> QHBoxLayout:
    row = QHBoxLayout()
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(widgets[0], 1)
    for w in widgets[1:]:
        row.addWidget(w)
    return row


def _find(combo: QComboBox, data: Any) -> int:
    """Index of the item whose data equals ``data`` (0 if none); findData cannot match tuples."""
    for i in range(combo.count()):
        item = combo.itemData(i)
        if item == data or (isinstance(item, list | tuple) and tuple(item) == data):
            return i
    return 0
