"""What this CPU can do for the model: its int8 and bf16 instructions, and the fastest path.

Why it exists: the real model on a CPU has three ways to run (ONNX Runtime fp32, ONNX
Runtime static int8, torch bf16), and which one is fastest depends on instructions the
CPU has or lacks. int8 convolutions are fast where the CPU has VNNI (AVX512-VNNI,
AVX-VNNI, or AMX's int8 tiles): ONNX Runtime's MLAS kernels multiply u8×s8 into int32
in one instruction there. bf16 convolutions (torch, oneDNN) need AVX512-BF16 or AMX's
bf16 tiles; without them oneDNN emulates bf16 in fp32 and is slower than fp32, so a
bf16 run is refused there (one line). docs/BENCHMARKS.md, "int8 and bf16 on the CPU",
has the measurements behind :func:`fastest_cpu_path`.

The flags are read from ``/proc/cpuinfo`` (Linux: no import, instant); elsewhere from
torch's own check (oneDNN's bf16 support), asked only when needed.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

#: flags that make int8 convolutions fast (VNNI's u8×s8→s32 dot product, AMX int8 tiles)
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
#: flags that make bf16 convolutions fast (AVX-512 BF16 dot product, AMX bf16 tiles)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: the flags shown where the device is chosen, in this order, with their short names
SHOWN = {
    "avx2": "AVX2",
    "avx512f": "AVX-512",
    "avx512_vnni": "AVX512-VNNI",
    "avx_vnni": "AVX-VNNI",
    "avx512_bf16": "AVX512-BF16",
    "amx_int8": "AMX-INT8",
    "amx_bf16": "AMX-BF16",
}
CPUINFO = Path("/proc/cpuinfo")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux names them (empty where /proc/cpuinfo is absent)."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU's model name (``AMD EPYC``), or the platform's processor string."""
    for line in _cpuinfo_lines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    import platform

    return platform.processor() or "CPU"


def _cpuinfo_lines() -> list[str]:
    try:
        return CPUINFO.read_text(errors="replace").splitlines()
    except OSError:
        return []


def has_fast_int8() -> bool:
    """Whether the CPU has VNNI (or AMX int8): int8 convolutions several times fp32's."""
    return any(f in cpu_flags() for f in INT8_FLAGS)


def bf16_refusal() -> str | None:
    """None where the CPU runs bf16 convolutions natively, else the reason (one line)."""
    flags = cpu_flags()
    if any(f in flags for f in BF16_FLAGS):
        return None
    if not flags:  # not Linux: ask oneDNN (through torch) instead
        import torch

        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return None
    return (
        f"this CPU ({cpu_name()}) has neither AVX512-BF16 nor AMX-BF16: bf16 would be "
        "emulated, slower than fp32; use fp32 or int8"
    )


def describe_cpu(cores: int | None = None) -> str:
    """``AMD EPYC · 2 cores · AVX-512, AVX512-VNNI, AVX512-BF16 (no AMX)``: for the
    device menu and the status line."""
    import os

    flags = cpu_flags()
    shown = [name for flag, name in SHOWN.items() if flag in flags]
    if flags and not any(f.startswith("amx") for f in flags):
        shown.append("no AMX")
    n = cores if cores is not None else os.cpu_count() or 1
    have = ", ".join(shown) if shown else "features unknown"
    return f"{cpu_name()} · {n} core{'s' if n != 1 else ''} · {have}"


def fastest_cpu_path(onnxruntime_ok: bool) -> tuple[str, str, str]:
    """(runtime, precision, why) of the fastest measured way to run the model on this CPU.

    int8 in ONNX Runtime where the CPU has VNNI (docs/BENCHMARKS.md, "int8 and bf16 on the
    CPU": several times ONNX Runtime fp32 on an AVX512-VNNI EPYC); else fp32 in ONNX Runtime
    (1.8-2.9x torch eager); torch fp32 without ONNX Runtime. bf16 (torch) is never the
    default: measured slower than ONNX Runtime fp32 on that EPYC (AVX512-BF16, no AMX).
    """
    if not onnxruntime_ok:
        return "torch", "fp32", "ONNX Runtime is not installed"
    if has_fast_int8():
        vnni = next(SHOWN[f] for f in INT8_FLAGS if f in cpu_flags())
        return "onnxruntime", "int8", f"int8 in ONNX Runtime: this CPU has {vnni}"
    return "onnxruntime", "fp32", "fp32 in ONNX Runtime: this CPU has no VNNI for int8"
