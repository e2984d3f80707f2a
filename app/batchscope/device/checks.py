"""Is a device there, and which precisions can it run? One answer for every caller.

The engine's torch backend, a profile sweep and the UI's device menu ask the same
questions before any work; each answer that is "no" is one line naming the setting.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

#: The CUDA driver library a CUDA build of torch loads (Linux, Windows).
CUDA_DRIVER = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"


class BackendError(ValueError):
    """A device or backend that cannot be used with this config; one line naming the setting."""


def gpu_driver_found() -> bool:
    """Whether a GPU driver that torch could use is installed, asked without importing torch.

    False means ``torch.cuda.is_available()`` is False too: no CUDA driver library loads
    (and no ROCm device, on which torch's cuda API runs through HIP; macOS has neither).
    Why it exists: importing torch takes about a second, and the app asks whether there is
    a CUDA GPU before it opens; without a driver the question needs no torch at all.
    """
    if sys.platform == "darwin":
        return False
    if os.path.exists("/dev/kfd"):  # ROCm's kernel driver
        return True
    try:
        ctypes.CDLL(CUDA_DRIVER)
    except OSError:
        return False
    return True


def check_device(device: str) -> Any:
    """A torch.device for ``cpu``/``cuda:N``, or BackendError saying why it is not there."""
    import torch

    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        why = (
            "this torch build has no CUDA"
            if torch.version.cuda is None
            else "no CUDA GPU is visible"
        )
        raise BackendError(
            f"device {device}: not available ({why}); use --device cpu or --backend emulated"
        )
    dev = torch.device(device)
    index = dev.index or 0
    if index >= torch.cuda.device_count():
        raise BackendError(f"device {device}: no such GPU (found {torch.cuda.device_count()})")
    return torch.device("cuda", index)


def supported_precisions(device: str) -> dict[str, str | None]:
    """precision -> None if the device can run it, else the reason it cannot."""
    import torch

    out: dict[str, str | None] = {"fp32": None, "fp16": None, "bf16": None, "int8": None}
    if device.startswith("cuda") and torch.cuda.is_available():
        if not torch.cuda.is_bf16_supported():
            out["bf16"] = "this GPU has no bf16 support (needs compute capability 8.0+)"
        out["int8"] = "int8 runs on the CPU (ONNX Runtime's CPU provider)"
    elif device == "cpu":
        from batchscope.cpu_features import bf16_refusal

        out["fp16"] = "fp16 convolutions on CPU are emulated and very slow; use fp32 or bf16"
        out["bf16"] = bf16_refusal()
    return out


def check_precision(precision: str, device: Any) -> Any:
    """The torch dtype of ``precision`` on ``device``; BackendError if the device cannot
    run it: a GPU without bf16, a CPU without AVX512-BF16 or AMX for bf16, int8 (ONNX
    Runtime's, not torch's).

    fp16 on the CPU is allowed (slow: the reason is only advice there).
    """
    import torch

    if precision == "int8":
        raise BackendError(
            "precision int8: the ONNX export statically quantized; use --runtime onnxruntime"
        )
    why = supported_precisions(str(device) if device.type == "cuda" else "cpu").get(precision)
    if why and (device.type == "cuda" or precision == "bf16"):
        raise BackendError(f"precision {precision} on {device}: {why}")
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
