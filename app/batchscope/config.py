"""RunConfig: one validated, immutable description of a run.

Validated once at the edge (CLI, UI); every error names the field and the
value, so the CLI can print it as one line and the UI can show it on the
control that caused it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

POLICIES = ("oldest", "round-robin", "all", "dynamic", "fixed", "adaptive")
PRECISIONS = ("fp32", "fp16", "bf16")
BACKENDS = ("torch", "emulated")

#: Which policy flags each policy reads; the others are ignored (the UI greys them out).
POLICY_PARAMS: dict[str, tuple[str, ...]] = {
    "oldest": (),
    "round-robin": (),
    "all": ("max_batch",),
    "dynamic": ("max_batch", "max_delay_ms"),
    "fixed": ("batch", "max_delay_ms"),
    "adaptive": ("max_batch", "slo_ms"),
}

#: Fields whose change needs a new backend (model rebuilt, warm-up repeated).
BACKEND_FIELDS = (
    "backend",
    "device",
    "profile",
    "precision",
    "resolution",
    "channels_last",
    "cudnn_benchmark",
    "checkpoint",
    "lean",
    "compile",
    "cuda_graphs",
)

DEFAULT_RESOLUTION = (512, 288)


class ConfigError(ValueError):
    """A setting that cannot be used; ``str()`` is one line naming field and value."""

    def __init__(self, field_name: str, value: Any, reason: str) -> None:
        self.field = field_name
        self.value = value
        self.reason = reason
        super().__init__(f"{field_name} = {value!r}: {reason}")


def parse_resolution(text: str | tuple[int, int]) -> tuple[int, int]:
    """'512x288' -> (512, 288).

    Both sides must be multiples of 8: BlurBall halves the resolution three
    times and upsamples back by 2^k, so anything else cannot line up. (The
    design notes call 32×16 "safe"; 8 is the actual constraint, and it admits
    the small 128×72 used for CPU tests.)
    """
    if isinstance(text, tuple):
        w, h = text
    else:
        m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", str(text))
        if not m:
            raise ConfigError("resolution", text, "expected WIDTHxHEIGHT, e.g. 512x288")
        w, h = int(m.group(1)), int(m.group(2))
    if w <= 0 or h <= 0 or w % 8 or h % 8:
        raise ConfigError(
            "resolution",
            f"{w}x{h}",
            "width and height must be multiples of 8 (the model downsamples 3 times by 2)",
        )
    if w > 4096 or h > 4096:
        raise ConfigError("resolution", f"{w}x{h}", "larger than 4096 pixels")
    return (w, h)


def format_resolution(res: tuple[int, int]) -> str:
    return f"{res[0]}x{res[1]}"


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run. Times in ms or s as the name says."""

    sources: tuple[str, ...] = ()
    sessions: int = 4
    fps: float | None = 30.0  # None: each source's own fps
    policy: str = "all"
    max_batch: int | None = None
    max_delay_ms: float = 10.0
    batch: int = 4
    slo_ms: float = 50.0
    backend: str = "emulated"
    device: str = "cpu"
    profile: str | None = "laptop-8gb"
    precision: str = "fp16"
    resolution: tuple[int, int] = DEFAULT_RESOLUTION
    channels_last: bool = False
    cudnn_benchmark: bool = True
    checkpoint: str | None = None
    lean: bool = False
    compile: bool = False  # torch.compile the model (torch backend; slow first build)
    cuda_graphs: bool = False  # replay each batch size as a captured CUDA graph (CUDA only)
    duration_s: float = 20.0
    seed: int = 0
    skip_bad_sources: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError("policy", self.policy, f"unknown policy; choose from {_or(POLICIES)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                "precision", self.precision, f"unknown precision; choose from {_or(PRECISIONS)}"
            )
        if self.backend not in BACKENDS:
            raise ConfigError("backend", self.backend, f"choose from {_or(BACKENDS)}")
        if not isinstance(self.sessions, int) or self.sessions < 1:
            raise ConfigError("sessions", self.sessions, "must be at least 1")
        if self.sessions > 256:
            raise ConfigError("sessions", self.sessions, "at most 256 sessions")
        if self.fps is not None and not (0 < self.fps <= 1000 and math.isfinite(self.fps)):
            raise ConfigError("fps", self.fps, "must be greater than 0 and at most 1000")
        if self.max_batch is not None and self.max_batch < 1:
            raise ConfigError("max_batch", self.max_batch, "must be at least 1")
        if self.batch < 1:
            raise ConfigError("batch", self.batch, "must be at least 1")
        if not (0 <= self.max_delay_ms <= 10_000):
            raise ConfigError("max_delay_ms", self.max_delay_ms, "must be between 0 and 10000")
        if not (0 < self.slo_ms <= 100_000):
            raise ConfigError("slo_ms", self.slo_ms, "must be greater than 0")
        if self.policy == "dynamic" and self.max_batch is None:
            raise ConfigError("max_batch", None, "the dynamic policy needs --max-batch")
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise ConfigError("duration", self.duration_s, "must be a positive number of seconds")
        parse_resolution(self.resolution)
        if self.backend == "emulated" and not self.profile:
            raise ConfigError("profile", self.profile, "the emulated backend needs a profile")
        if self.compile and self.backend != "torch":
            raise ConfigError("compile", self.compile, "torch.compile needs the torch backend")
        if self.cuda_graphs and self.backend != "torch":
            raise ConfigError("cuda_graphs", True, "CUDA graphs need the torch backend on a GPU")
        if self.cuda_graphs and self.compile:
            raise ConfigError(
                "cuda_graphs", True, "use CUDA graphs or torch.compile, not both in one run"
            )
        if self.backend == "torch" and not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ConfigError("device", self.device, "expected cpu or cuda:N")

    def with_changes(self, **changes: Any) -> RunConfig:
        return replace(self, **changes)

    def diff(self, other: RunConfig) -> dict[str, tuple[Any, Any]]:
        """Fields that differ: name -> (self's value, other's value)."""
        out = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                out[f.name] = (a, b)
        return out

    @property
    def device_label(self) -> str:
        if self.backend == "emulated":
            return f"emulated:{self.profile}"
        return self.device

    def policy_phrase(self) -> str:
        """The policy in one phrase, for status bars and tables."""
        p = self.policy
        cap = f" (max {self.max_batch})" if self.max_batch else ""
        if p == "oldest":
            return "oldest first, one at a time"
        if p == "round-robin":
            return "round robin, one at a time"
        if p == "all":
            return f"batch all waiting{cap}"
        if p == "dynamic":
            return f"dynamic: up to {self.max_batch}, wait ≤ {self.max_delay_ms:g} ms"
        if p == "fixed":
            return f"fixed batch of {self.batch}, wait ≤ {self.max_delay_ms:g} ms"
        return f"adaptive (AIMD) under {self.slo_ms:g} ms{cap}"

    def policy_label(self) -> str:
        """The policy and the parameters it reads, short enough for a table cell (≤ 20 chars)."""
        p = self.policy
        cap = f" ≤{self.max_batch}" if self.max_batch else ""
        if p == "all":
            return f"all{cap}"
        if p == "dynamic":
            return f"dynamic{cap}, {self.max_delay_ms:g} ms"
        if p == "fixed":
            return f"fixed {self.batch}, {self.max_delay_ms:g} ms"
        if p == "adaptive":
            return f"adaptive {self.slo_ms:g} ms{cap}"
        return p

    def to_json(self) -> dict[str, Any]:
        """The ``config`` object of the JSON report."""
        return {
            "policy": self.policy,
            "sessions": self.sessions,
            "precision": self.precision,
            "resolution": list(self.resolution),
            "fps": self.fps,
            "duration_s": self.duration_s,
            "backend": self.backend,
            "device": self.device_label,
            "profile": self.profile if self.backend == "emulated" else None,
            "max_batch": self.max_batch,
            "max_delay_ms": self.max_delay_ms,
            "batch": self.batch,
            "slo_ms": self.slo_ms,
            "channels_last": self.channels_last,
            "cudnn_benchmark": self.cudnn_benchmark,
            "checkpoint": self.checkpoint,
            "weights": "checkpoint" if self.checkpoint else "untrained",
            "lean": self.lean,
            "compile": self.compile,
            "cuda_graphs": self.cuda_graphs,
            "sources": list(self.sources),
            "seed": self.seed,
            **self.extra,
        }


def _or(items: tuple[str, ...]) -> str:
    return ", ".join(items)
