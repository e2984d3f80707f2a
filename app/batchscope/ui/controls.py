"""The run controls: policy and its parameters, device, precision, resolution, fps.

A dumb view: ``changed(dict)`` carries the RunConfig fields it owns after
every user change (slider drags debounced, so a drag is one apply and one
event line, not fifty); ``show_config`` sets the widgets without emitting.
Parameters the chosen policy does not read are disabled, and options the
device cannot run are disabled with the reason as tooltip.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QWidget,
)
from superqt import QLabeledDoubleSlider, QLabeledSlider
from superqt.utils import qdebounced

from batchscope.config import POLICIES, POLICY_PARAMS, RunConfig, format_resolution
from batchscope.ui.device_options import (
    DeviceChoice,
    choice_key,
    fit,
    precision_reasons,
    resolution_options,
)

POLICY_LABELS = {
    "oldest": "Oldest first (1 at a time)",
    "round-robin": "Round robin (1 at a time)",
    "all": "Batch all waiting",
    "dynamic": "Dynamic (size or timeout)",
    "fixed": "Fixed batch size",
    "adaptive": "Adaptive (AIMD, objective)",
}

SLIDER_DEBOUNCE_MS = 300


def _slider(lo: int, hi: int, double: bool = False) -> QLabeledSlider:
    s = (
        QLabeledDoubleSlider(Qt.Orientation.Horizontal)
        if double
        else QLabeledSlider(Qt.Orientation.Horizontal)
    )
    s.setRange(lo, hi)
    if double:
        s.setDecimals(0)
    return s


#: The cap dynamic gets when the user switches to it from an unlimited policy.
DYNAMIC_DEFAULT_MAX_BATCH = 8


class ControlsPanel(QWidget):
    changed = Signal(dict)

    def __init__(self, devices: list[DeviceChoice], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._devices = {d.key: d for d in devices}
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setContentsMargins(8, 4, 8, 4)

        self.policy = QComboBox()
        for p in POLICIES:
            self.policy.addItem(POLICY_LABELS[p], p)
        self.max_batch = _slider(1, 64)
        self.unlimited = QCheckBox("unlimited")
        self.max_delay = _slider(0, 200)
        self.fixed_batch = _slider(1, 32)
        self.objective = _slider(5, 500)
        self.device = QComboBox()
        self.device.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.device.setMinimumContentsLength(18)
        for d in devices:
            self.device.addItem(d.label, d.key)
        self.precision = QComboBox()
        self.resolution = QComboBox()
        self.fps = _slider(1, 120, double=True)
        self.channels_last = QCheckBox("channels_last")
        self.cudnn = QCheckBox("cuDNN benchmark")
        self.error = QLabel()
        self.error.setObjectName("controlError")
        self.error.setWordWrap(True)
        self.error.hide()

        batch_row = QHBoxLayout()
        batch_row.setContentsMargins(0, 0, 0, 0)
        batch_row.addWidget(self.max_batch, 1)
        batch_row.addWidget(self.unlimited)
        switches = QHBoxLayout()
        switches.setContentsMargins(0, 0, 0, 0)
        switches.addWidget(self.channels_last)
        switches.addWidget(self.cudnn)
        switches.addStretch(1)

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
        form.addRow("Device", self.device)
        form.addRow("Precision", self.precision)
        form.addRow("Resolution", self.resolution)
        form.addRow("Source fps", self.fps)
        form.addRow("", switches)
        form.addRow(self.error)

        self._emit_debounced = qdebounced(self._emit, timeout=SLIDER_DEBOUNCE_MS)
        self.policy.currentIndexChanged.connect(self._on_policy)
        self.device.currentIndexChanged.connect(self._on_device)
        self.precision.currentIndexChanged.connect(self._emit)
        self.resolution.currentIndexChanged.connect(self._on_resolution)
        for box in (self.unlimited, self.channels_last, self.cudnn):
            box.toggled.connect(self._emit)
        for slider in (self.max_batch, self.max_delay, self.fixed_batch, self.objective, self.fps):
            slider.valueChanged.connect(self._emit_debounced)

    # -- reading --------------------------------------------------------------------------

    def choice(self) -> DeviceChoice:
        return self._devices[self.device.currentData()]

    def values(self) -> dict[str, Any]:
        """The RunConfig fields these controls own."""
        policy = self.policy.currentData()
        unlimited = self.unlimited.isChecked() and policy != "dynamic"
        return {
            "policy": policy,
            "max_batch": None if unlimited else int(self.max_batch.value()),
            "max_delay_ms": float(self.max_delay.value()),
            "batch": int(self.fixed_batch.value()),
            "slo_ms": float(self.objective.value()),
            "fps": float(round(self.fps.value())),
            "precision": self.precision.currentData(),
            "resolution": tuple(self.resolution.currentData()),
            "channels_last": self.channels_last.isChecked(),
            "cudnn_benchmark": self.cudnn.isChecked(),
            **self.choice().changes(),
        }

    # -- showing ----------------------------------------------------------------------------

    def show_config(self, config: RunConfig) -> None:
        """Set every control from ``config`` without emitting ``changed``."""
        self._emit_debounced.cancel()
        widgets = (
            self.policy,
            self.max_batch,
            self.unlimited,
            self.max_delay,
            self.fixed_batch,
            self.objective,
            self.device,
            self.precision,
            self.resolution,
            self.fps,
            self.channels_last,
            self.cudnn,
        )
        for w in widgets:
            w.blockSignals(True)
        try:
            self.policy.setCurrentIndex(POLICIES.index(config.policy))
            self.unlimited.setChecked(config.max_batch is None)
            # unlimited still leaves the slider at a useful cap for dynamic, which needs one
            self.max_batch.setValue(min(64, config.max_batch or DYNAMIC_DEFAULT_MAX_BATCH))
            self.max_delay.setValue(min(200, int(config.max_delay_ms)))
            self.fixed_batch.setValue(min(32, config.batch))
            self.objective.setValue(min(500, max(5, int(config.slo_ms))))
            self.fps.setValue(min(120.0, config.fps or 30.0))
            self.channels_last.setChecked(config.channels_last)
            self.cudnn.setChecked(config.cudnn_benchmark)
            self.device.setCurrentIndex(_find(self.device, choice_key(config)))
            self._fill_options(config.precision, config.resolution)
        finally:
            for w in widgets:
                w.blockSignals(False)
        self._update_enabled()

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))

    def _fill_options(self, precision: str, resolution: tuple[int, int]) -> None:
        """Refill precision and resolution for the current device, disabling what it lacks."""
        choice = self.choice()
        for combo in (self.precision, self.resolution):
            combo.blockSignals(True)
            combo.clear()
        for res, why in resolution_options(choice).items():
            _add_item(self.resolution, format_resolution(res).replace("x", " × "), res, why)
        for p, why in precision_reasons(choice, resolution).items():
            _add_item(self.precision, p.upper(), p, why)
        self.resolution.setCurrentIndex(_find(self.resolution, tuple(resolution)))
        self.precision.setCurrentIndex(_find(self.precision, precision))
        for combo in (self.precision, self.resolution):
            combo.blockSignals(False)

    def _update_enabled(self) -> None:
        used = POLICY_PARAMS[self.policy.currentData()]
        for name, widgets in self._param_rows.items():
            for w in widgets:
                w.setEnabled(name in used)
        policy = self.policy.currentData()
        self.unlimited.setEnabled(policy in ("all", "adaptive"))
        self.max_batch.setEnabled(
            "max_batch" in used and not (self.unlimited.isChecked() and policy != "dynamic")
        )
        choice = self.choice()
        self.channels_last.setEnabled(not choice.emulated)
        self.cudnn.setEnabled(choice.device.startswith("cuda") and not choice.emulated)
        tip = "only for the real model" if choice.emulated else ""
        self.channels_last.setToolTip(tip)
        self.cudnn.setToolTip(tip or ("" if choice.device.startswith("cuda") else "CUDA only"))

    # -- user changes -------------------------------------------------------------------------

    def _on_policy(self) -> None:
        self._update_enabled()
        self._emit()

    def _on_device(self) -> None:
        precision, resolution = fit(
            self.choice(), self.precision.currentData(), tuple(self.resolution.currentData())
        )
        self._fill_options(precision, resolution)
        self._update_enabled()
        self._emit()

    def _on_resolution(self) -> None:
        if self.resolution.currentData() is None:
            return
        precision, resolution = fit(
            self.choice(), self.precision.currentData(), tuple(self.resolution.currentData())
        )
        self._fill_options(precision, resolution)
        self._emit()

    def _emit(self) -> None:
        self._update_enabled()
        self.show_error("")
        self.changed.emit(self.values())


def _find(combo: QComboBox, data: Any) -> int:
    """Index of the item whose data equals ``data`` (0 if none); findData cannot match tuples."""
    for i in range(combo.count()):
        item = combo.itemData(i)
        if item == data or (isinstance(item, list | tuple) and tuple(item) == data):
            return i
    return 0


def _add_item(combo: QComboBox, text: str, data: Any, why: str | None) -> None:
    combo.addItem(text, data)
    index = combo.count() - 1
    if why is not None:
        model = combo.model()
        if isinstance(model, QStandardItemModel):
            item = model.item(index)
            item.setEnabled(False)
            item.setToolTip(why)
        combo.setItemData(index, why, Qt.ItemDataRole.ToolTipRole)
