"""Which devices, precisions and resolutions the controls offer, and why some are greyed out.

Pure functions (no widgets) so the rules are tested without a screen. A
device is the real model on the CPU or a CUDA GPU, or an emulated device
profile; an emulated device can only replay the (precision, resolution)
curves its profile measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchscope.config import (
    DEFAULT_RESOLUTION,
    PRECISIONS,
    RUNTIMES,
    RunConfig,
    default_cpu_precision,
    default_runtime,
    format_resolution,
    precision_refusal,
)
from batchscope.device.checks import gpu_driver_found

#: Resolutions the controls offer (width a multiple of 32, height of 16).
RESOLUTIONS: tuple[tuple[int, int], ...] = (
    (128, 72),  # for the real model on a slow CPU
    (256, 144),
    (512, 288),
    (768, 432),
    (1024, 576),
)

_PRECISION_PREFERENCE = ("fp16", "fp32", "bf16")


RUNTIME_LABELS = {"torch": "torch", "onnxruntime": "ONNX Runtime"}


@dataclass(frozen=True)
class DeviceChoice:
    key: str  # "cpu", "cpu/torch", "cuda:0", "emulated:laptop-8gb"
    label: str
    backend: str
    device: str
    profile: str | None = None
    covers: tuple[tuple[str, tuple[int, int]], ...] = ()  # emulated: measured curves
    runtime: str = "torch"  # the real model's runtime (emulated: the torch curves)
    unavailable: str | None = None  # why it cannot be chosen here (shown greyed out)

    @property
    def emulated(self) -> bool:
        return self.backend == "emulated"

    def changes(self) -> dict[str, Any]:
        """The RunConfig fields that select this device."""
        return {
            "backend": self.backend,
            "device": self.device,
            "profile": self.profile,
            "runtime": self.runtime,
        }


def cuda_names() -> list[str]:
    if not gpu_driver_found():  # no driver, no CUDA: known without importing torch
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def real_device_choices(device: str, name: str) -> list[DeviceChoice]:
    """The real model on ``device`` with each runtime: its default first (the fastest
    measured there, see ``config.default_runtime``), then the others, greyed out with
    the reason where they cannot run (e.g. ONNX Runtime not installed)."""
    from batchscope.device.onnx_runtime import runtime_availability

    default = default_runtime(device)
    # torch found the device, so torch runs on it; ONNX Runtime needs its provider
    why = {"torch": None, "onnxruntime": runtime_availability(device)["onnxruntime"]}
    out = []
    for runtime in sorted(RUNTIMES, key=lambda r: r != default):
        key = device if runtime == default else f"{device}/{runtime}"
        label = f"{name} · real model · {RUNTIME_LABELS[runtime]}"
        if runtime == default and device == "cpu" and runtime != "torch":
            label += f" (fastest here: {default_cpu_precision()})"
        out.append(
            DeviceChoice(key, label, "torch", device, runtime=runtime, unavailable=why.get(runtime))
        )
    return out


def device_choices(gpus: list[str] | None = None) -> list[DeviceChoice]:
    """CPU, each CUDA GPU found (each with its runtimes), then each emulated profile."""
    from batchscope.cpu_features import describe_cpu
    from batchscope.profiles.profile import DeviceProfile, list_profiles

    gpus = cuda_names() if gpus is None else gpus
    out = real_device_choices("cpu", f"CPU ({describe_cpu()})")
    for i, name in enumerate(gpus):
        out += real_device_choices(f"cuda:{i}", f"cuda:{i} · {name}")
    for _kind, profile in list_profiles():
        if isinstance(profile, DeviceProfile):
            out.append(
                DeviceChoice(
                    f"emulated:{profile.name}",
                    f"Emulated · {profile.name} ({profile.device})",
                    "emulated",
                    "cpu",
                    profile.name,
                    tuple(profile.covers()),
                )
            )
    return out


def choice_key(config: RunConfig) -> str:
    if config.runner == "emulated":  # in BatchScope's worker or in a serving engine
        return f"emulated:{config.profile}"
    if config.runtime == default_runtime(config.device):
        return config.device
    return f"{config.device}/{config.runtime}"


def precision_reasons(choice: DeviceChoice, resolution: tuple[int, int]) -> dict[str, str | None]:
    """precision -> None if the device can run it at ``resolution``, else why not."""
    if not choice.emulated:
        from batchscope.device.checks import supported_precisions

        reasons = supported_precisions(choice.device)
        for p, why in reasons.items():
            refusal = precision_refusal(p, choice.runtime, choice.device.partition(":")[0])
            reasons[p] = why or refusal
        return reasons
    out: dict[str, str | None] = {}
    for p in PRECISIONS:
        if (p, tuple(resolution)) in choice.covers:
            out[p] = None
        elif any(cp == p for cp, _ in choice.covers):
            out[p] = f"profile {choice.profile} has no {p} curve at {format_resolution(resolution)}"
        else:
            out[p] = f"profile {choice.profile} has no {p} measurements"
    return out


def resolution_options(choice: DeviceChoice) -> dict[tuple[int, int], str | None]:
    """resolution -> None if offered for this device, else why not (emulated: not measured)."""
    covered = sorted({tuple(r) for _, r in choice.covers})
    everything = sorted(set(RESOLUTIONS) | set(covered) if choice.emulated else RESOLUTIONS)
    if not choice.emulated:
        return dict.fromkeys(everything)
    return {
        r: None
        if r in covered
        else f"profile {choice.profile} was not measured at {format_resolution(r)}"
        for r in everything
    }


def fit(
    choice: DeviceChoice, precision: str, resolution: tuple[int, int]
) -> tuple[str, tuple[int, int]]:
    """The closest (precision, resolution) the device can run, keeping what already fits."""
    options = resolution_options(choice)
    if options.get(tuple(resolution), "absent") is not None:
        allowed = [r for r, why in options.items() if why is None]
        resolution = DEFAULT_RESOLUTION if DEFAULT_RESOLUTION in allowed else allowed[0]
    reasons = precision_reasons(choice, resolution)
    if reasons.get(precision) is not None:
        if choice.emulated:
            # the precision may exist at another resolution of the profile
            for r in options:
                if (precision, r) in choice.covers:
                    return precision, r
        preference = (
            (default_cpu_precision(), "fp32", "int8", "bf16", "fp16")
            if choice.device == "cpu" and not choice.emulated
            else _PRECISION_PREFERENCE
        )
        precision = next(p for p in preference if reasons.get(p) is None)
    return precision, tuple(resolution)
