"""The run controls: the panel of policy, knobs and device, and which devices it offers."""

from batchscope.ui.controls.device_options import DeviceChoice, device_choices
from batchscope.ui.controls.panel import ControlsPanel

__all__ = ["ControlsPanel", "DeviceChoice", "device_choices"]
