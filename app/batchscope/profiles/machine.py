"""Facts about the measuring machine for a device profile: names, versions, peak memory.

Kept apart from the timing loop in :mod:`batchscope.profiles.curve_sweep` because these
readers differ per platform (CUDA counters, NVML, Linux ``/proc``), and each one must
degrade to "unknown" rather than fail a sweep that took minutes.
"""

from __future__ import annotations

import platform
import re
from typing import Any

from batchscope.device.checks import check_device
from batchscope.device.memory import MB, peak_rss_mb, rss_mb


class PeakMemory:
    """Peak memory of one point in MB: torch's CUDA counter, or the CPU RSS high-water rise."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"
        self._baseline = 0.0
        self.metric = (
            "torch.cuda.max_memory_allocated over the timed runs (model + input + activations)"
            if self.cuda
            else _cpu_metric()
        )

    def before_input(self) -> None:
        """Call before the point's input is made (CPU: the baseline of the RSS rise)."""
        if not self.cuda:
            self._baseline = rss_mb()

    def reset(self) -> None:
        """Start the peak interval (after the warm-up, before the timed runs)."""
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _reset_hwm()

    def peak_mb(self) -> float:
        if self.cuda:
            return self.torch.cuda.max_memory_allocated(self.device) / MB
        return max(0.0, _hwm_mb() - self._baseline)


def _reset_hwm() -> bool:
    """Reset this process's RSS high-water mark (Linux ≥ 4.0); False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _hwm_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            m = re.search(r"VmHWM:\s*(\d+)\s*kB", fh.read())
        if m:
            return int(m.group(1)) / 1024.0
    except OSError:
        pass
    return peak_rss_mb()


def _cpu_metric() -> str:
    if _reset_hwm():
        return (
            "CPU: rise of the process RSS high-water mark (VmHWM, reset per point) above "
            "the RSS before the input was made (input + activations)"
        )
    return (
        "CPU: rise of the process's lifetime peak RSS (ru_maxrss; cannot be reset here, so "
        "0 when an earlier point peaked higher)"
    )


def device_facts(device_name: str) -> tuple[str, float | None, dict[str, Any]]:
    """(device name, total memory MB or None, version facts) for the profile's header."""
    import torch

    device = check_device(device_name)
    facts: dict[str, Any] = {"torch_version": torch.__version__}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts["cuda_version"] = torch.version.cuda
        driver = _driver_version()
        if driver:
            facts["driver_version"] = driver
        return torch.cuda.get_device_name(device), props.total_memory / MB, facts
    facts["threads"] = torch.get_num_threads()
    return f"CPU ({_cpu_name()})", None, facts


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no driver library or no GPU: the version is simply unknown
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            m = re.search(r"model name\s*:\s*(.+)", fh.read())
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def default_name(device_label: str) -> str:
    """A file-friendly profile name from the device's name, e.g. ``nvidia-h200``."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_label.lower()).strip("-")
    return slug[:48].rstrip("-") or "sweep"
