"""Memory figures: torch's CUDA counters, NVML, and process RSS. All in MB.

NVML or CUDA being absent is the normal case on a laptop or in CI: the
readers then return fewer keys, never raise.
"""

from __future__ import annotations

import os
import resource
import sys
from functools import cache
from typing import Any

MB = 1024.0 * 1024.0


def rss_mb() -> float:
    """Current resident set size of this process."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / MB
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MB if sys.platform == "darwin" else peak / 1024.0


def torch_cuda_mb(index: int) -> dict[str, float]:
    import torch

    return {
        "allocated_mb": torch.cuda.memory_allocated(index) / MB,
        "reserved_mb": torch.cuda.memory_reserved(index) / MB,
        "peak_allocated_mb": torch.cuda.max_memory_allocated(index) / MB,
    }


@cache
def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no library, no GPU: all normal
        return None


def nvml_mb(index: int) -> dict[str, float]:
    """Device used/total, this process's use and utilisation, from NVML where available."""
    nv = _nvml()
    if nv is None:
        return {}
    out: dict[str, float] = {}
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        info = nv.nvmlDeviceGetMemoryInfo(handle)
        out["nvml_device_used_mb"] = info.used / MB
        out["nvml_device_total_mb"] = info.total / MB
        out["nvml_util_pct"] = float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        pid = os.getpid()
        for proc in nv.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == pid and proc.usedGpuMemory is not None:
                out["nvml_process_used_mb"] = proc.usedGpuMemory / MB
    except Exception:
        pass
    return out


#: Where the CUDA MPS control daemon keeps its pipes unless told otherwise (NVIDIA's docs).
MPS_DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"


def gpu_sharing(index: int) -> str:
    """How GPU ``index`` is shared, as far as NVML and the MPS pipes tell ("" if unknown).

    "MIG on" when NVML reports MIG mode enabled (hardware partitions: no
    interference), "MPS on" when an MPS control pipe exists (concurrent clients
    with compute caps), otherwise "time-sliced" (what noisy neighbours meet).
    """
    import os

    nv = _nvml()
    if nv is None:
        return ""
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
            if current == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
                return "MIG on"
        except nv.NVMLError:  # GPUs without MIG say "not supported"
            pass
    except Exception:  # NVML present but this device not readable
        return ""
    pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", MPS_DEFAULT_PIPE_DIR)
    if os.path.exists(os.path.join(pipe_dir, "control")):
        return "MPS on"
    return "time-sliced"
