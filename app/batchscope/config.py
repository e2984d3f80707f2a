"""RunConfig: one validated, immutable description of a run.

Validated once at the edge (CLI, UI); every error names the field and the
value, so the CLI can print it as one line and the UI can show it on the
control that caused it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from batchscope.policy_kinds import KINDS
from batchscope.urls import mask_credentials

#: The built-in batch policies, in the order the app lists them (policy_kinds.py has each
#: one's facts, engine/policies.py its rule)
POLICIES = tuple(KINDS)
#: How windows go to devices when there are several (engine/routing.py has the rules)
ROUTERS = ("pinned", "least-loaded")
#: The router unless one is given: Ray Serve's rule, the one a Ray run can have
DEFAULT_ROUTER = "least-loaded"
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
"""int8 is the ONNX export statically quantized (models/onnx_quantize.py), run by ONNX
Runtime on the CPU; bf16 on the CPU is torch's (channels_last, autocast, oneDNN), where
the CPU has AVX512-BF16 or AMX (cpu_features.py)."""
#: Precisions an ONNX export can have: ONNX Runtime's CPU provider has no bf16 convolutions;
#: int8 is the fp32 export quantized.
EXPORT_PRECISIONS = ("fp32", "fp16", "int8")
BACKENDS = ("torch", "emulated", "ray", "triton")
"""What runs the batches: BatchScope's own worker on the real model (torch) or on a profile's
curve (emulated), or a real Ray Serve deployment (ray) that forms its own batches and runs
either of them in its replica: the curve with a profile, the real model on ``device``
without one (``RunConfig.runner``)."""
SERVING_ENGINES = ("ray", "triton")
#: Policies a serving engine cannot hold, and why (refused by RunConfig; greyed in the app).
SERVING_REFUSALS: dict[str, dict[str, str]] = {
    "ray": {},
    "triton": {k.name: k.triton_refusal for k in KINDS.values() if k.triton_refusal},
}
FITS = ("letterbox", "stretch")
"""How a source frame of another aspect becomes a model frame: scaled to fit and padded
(the default, so a portrait clip keeps its shape), or stretched to the model's size."""
#: What runs the real model: torch itself, or its ONNX export in ONNX Runtime. An emulated
#: device replays the profile's curve measured on that runtime (curves carry it).
RUNTIMES = ("torch", "onnxruntime")
STREAM_TRANSPORTS = ("tcp", "udp", "auto")
"""How an RTSP stream's packets travel: interleaved in the RTSP connection (the default: no
packet loss, passes firewalls and NAT), as UDP datagrams (lower latency on a clean
network; lost packets smear frames), or FFmpeg's own choice (UDP, then TCP when none
arrive). Other stream kinds ignore it."""
POSTPROCESSING = ("weighted", "reference")
"""How a heatmap blob becomes a detection (models/postprocess.py): BatchScope's way (the
default: blur angle and length from the probability-weighted blob, positions on pixel
centres; measured closer to the drawn angle), or the authors' reference code exactly (angle
from the binary mask's moments, 0 where mu20 = mu02; length from the PCA of its pixels;
positions ``x * scale``), to compare with the authors' numbers."""

#: Which policy flags each policy reads; the others are ignored (the UI greys them out).
POLICY_PARAMS: dict[str, tuple[str, ...]] = {k.name: k.knobs for k in KINDS.values()}

#: What a field's change does, or who reads it: the roles a RunConfig field carries
#: (its ``metadata["roles"]``); each list of fields below is derived from them.
BACKEND = "backend"  # its change needs a new backend (model rebuilt, warm-up repeated)
WORKER = "worker"  # the worker takes it live between two batches (for every policy)
DEVICE_LOAD = "device_load"  # the device changes it live, without a new backend
SESSIONS = "sessions"  # its change re-makes the sessions (sources re-opened, or re-paced)
CONTROL = "control"  # the app's controls set it, and remember it for the next start
SETTING = "setting"  # a setting file (policy.json, ``plan --export``) carries it


def _field(default: Any, *roles: str) -> Any:
    """A RunConfig field with its default and its roles."""
    return field(default=default, metadata={"roles": frozenset(roles)})


DEFAULT_RESOLUTION = (512, 288)


UNTRAINED = "untrained"
"""``checkpoint`` value for PyTorch's initial weights (``--no-weights``: timing only);
``checkpoint=None`` runs the shipped demo weights (see models/weights.py)."""


def weights_kind(checkpoint: str | None) -> str:
    """What a report's ``config.weights`` says: demo, untrained or checkpoint."""
    if checkpoint is None:
        return "demo"
    return "untrained" if checkpoint == UNTRAINED else "checkpoint"


def onnxruntime_installed() -> bool:
    """Whether ONNX Runtime and the exporter's onnxscript import (asked without importing)."""
    from importlib.util import find_spec

    return all(find_spec(m) is not None for m in ("onnxruntime", "onnxscript"))


def default_runtime(device: str, precision: str | None = None) -> str:
    """The runtime the real model uses on ``device`` (at ``precision``) when none is asked for.

    A precision only one runtime has picks it: int8 is ONNX Runtime's, bf16 on the CPU
    torch's. Otherwise, on the CPU, ONNX Runtime when it is installed: measured 1.8–2.9×
    the windows/s of torch eager at 256×144, batch 1–4, and 0.9–2.0× at 128×72
    (docs/BENCHMARKS.md, "Runtimes": two runs, best rounds; torch.compile is faster at
    128×72 but builds for 30–100 s).
    On a GPU, torch (ONNX Runtime's CUDA provider is not measured yet).
    """
    if precision == "int8":
        return "onnxruntime"
    if device == "cpu" and precision != "bf16" and onnxruntime_installed():
        return "onnxruntime"
    return "torch"


def default_cpu_precision() -> str:
    """The precision of the fastest measured CPU path on this CPU (int8 with VNNI, else
    fp32; ``cpu_features.fastest_cpu_path`` says why)."""
    from batchscope.cpu_features import fastest_cpu_path

    return fastest_cpu_path(onnxruntime_installed())[1]


def precision_refusal(precision: str, runtime: str, device: str) -> str | None:
    """Why the real model cannot run at ``precision`` in ``runtime`` on ``device`` (None:
    it can, as far as the config can tell; the CPU's own features are the backend's)."""
    if precision == "int8" and runtime != "onnxruntime":
        return "int8 is the ONNX export statically quantized: use --runtime onnxruntime"
    if precision == "int8" and device != "cpu":
        return "int8 runs on the CPU (ONNX Runtime's CPU provider): use --device cpu"
    if precision == "bf16" and runtime == "onnxruntime":
        return "ONNX Runtime has no bf16 convolutions: use --runtime torch"
    return None


class ConfigError(ValueError):
    """A setting that cannot be used; ``str()`` is one line naming field and value."""

    def __init__(self, field_name: str, value: Any, reason: str) -> None:
        self.field = field_name
        self.value = value
        self.reason = reason
        super().__init__(f"{field_name} = {value!r}: {reason}")


@dataclass(frozen=True)
class Knob:
    """One numeric setting: its type, unit, valid range and default, in one place.

    The RunConfig validator, the CLI's argument types, the UI's widgets and the
    policies' setters all check values with :meth:`check`, so a knob cannot have
    two ranges. ``slider`` is the range a slider offers by default; a value
    outside it (still valid) is shown as it is, never clamped.
    """

    name: str  # the RunConfig field
    kind: type  # int or float
    unit: str  # "ms", "s", "fps", "windows", "sessions"
    lo: float  # smallest valid value
    hi: float  # largest valid value
    default: Any
    lo_open: bool = False  # lo itself is not valid (e.g. fps > 0)
    optional: bool = False  # None is valid (e.g. max_batch: no cap)
    slider: tuple[float, float] | None = None
    help: str = ""
    none_word: str = "none"  # what None is called on the command line ("source" for fps)

    @property
    def flag(self) -> str:
        return "--" + self.name.removesuffix("_s").replace("_", "-")

    @property
    def dest(self) -> str:
        """Where argparse keeps the flag's value (``--max-batch`` -> ``max_batch``)."""
        return self.flag[2:].replace("-", "_")

    def check(self, value: Any) -> Any:
        """``value`` if valid for this knob, else ConfigError naming the knob and the range."""
        if value is None and self.optional:
            return None
        if self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)
        if not ok:
            raise ConfigError(self.name, value, f"expected {self._kind_words()}")
        low_ok = value > self.lo if self.lo_open else value >= self.lo
        if not low_ok or value > self.hi:
            raise ConfigError(self.name, value, f"must be {self.range_text()}")
        return self.kind(value)

    def clip(self, value: float) -> Any:
        """``value`` moved into the valid range (past an open ``lo``: the next number above
        it), for a value derived from another (the planner's objectives from a budget)."""
        low = math.nextafter(self.lo, math.inf) if self.lo_open else self.lo
        return self.check(self.kind(min(max(value, low), self.hi)))

    def parse(self, text: str) -> Any:
        """``check`` of a command-line string (``none_word`` means None where allowed)."""
        if self.optional and text.strip().lower() in (self.none_word, "none", "unlimited"):
            return None
        try:
            value = int(text) if self.kind is int else float(text)
        except ValueError:
            raise ConfigError(self.name, text, f"expected {self._kind_words()}") from None
        return self.check(value)

    def range_text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        low = f"greater than {self.lo:g}" if self.lo_open else f"at least {self.lo:g}"
        return f"{low} and at most {self.hi:g}{unit}"

    def _kind_words(self) -> str:
        return "a whole number" if self.kind is int else "a number"


#: When ``drop_after_ms`` can drop anything at all (:func:`drop_after_warning` applies it).
DROP_AFTER_RULE = (
    "it acts only below one frame interval, 1000/fps ms (33.3 ms at 30 fps): each new "
    "frame replaces the window waiting"
)

#: Every numeric knob of a run; the one place for its range and default.
KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("sessions", int, "sessions", 1, 256, 4, slider=(1, 32), help="client sessions"),
        Knob(
            "fps",
            float,
            "fps",
            0,
            1000,
            30.0,
            lo_open=True,
            optional=True,
            slider=(1, 120),
            help="frames per second each session sends",
            none_word="source",
        ),
        Knob(
            "max_batch",
            int,
            "windows",
            1,
            1024,
            None,
            optional=True,
            slider=(1, 64),
            help="largest batch (all, dynamic, adaptive)",
        ),
        Knob(
            "max_delay_ms",
            float,
            "ms",
            0,
            10_000,
            10.0,
            slider=(0, 200),
            help="longest wait for a fuller batch (dynamic, fixed)",
        ),
        Knob(
            "batch",
            int,
            "windows",
            1,
            1024,
            4,
            slider=(1, 32),
            help="fixed batch shape (a short batch is padded to it)",
        ),
        Knob(
            "slo_ms",
            float,
            "ms",
            0,
            100_000,
            50.0,
            lo_open=True,
            slider=(5, 500),
            help="latency objective (adaptive)",
        ),
        Knob(
            "duration_s",
            float,
            "s",
            0,
            7 * 24 * 3600,
            20.0,
            lo_open=True,
            help="measured seconds",
        ),
        Knob(
            "drop_after_ms",
            float,
            "ms",
            0,
            100_000,
            None,
            lo_open=True,
            optional=True,
            help="discard a window that has waited longer (every policy; counted as expired); "
            + DROP_AFTER_RULE,
        ),
        Knob(
            "stream_timeout_s",
            float,
            "s",
            0.1,
            600,
            5.0,
            help="network streams: the longest wait for a connection (a URL that never "
            "answers fails after it; a reconnect attempt gives up after it)",
        ),
        Knob(
            "stream_read_timeout_s",
            float,
            "s",
            0.1,
            600,
            5.0,
            help="network streams: the longest wait for the next frame before the stream "
            "counts as stalled and reconnects",
        ),
        Knob(
            "neighbours",
            int,
            "jobs",
            0,
            16,
            0,
            slider=(0, 8),
            help="other busy jobs sharing the device (modelled when emulated, real processes "
            "on cpu/cuda)",
        ),
        Knob(
            "devices",
            int,
            "devices",
            1,
            256,
            1,
            slider=(1, 8),
            help="devices serving the sessions in BatchScope's worker: emulated devices of "
            "the profile, or instances of the real model on the device; or Ray Serve "
            "replicas (--backend ray)",
        ),
        Knob(
            "neighbour_duty",
            float,
            "",
            0,
            1,
            1.0,
            help="share of time each neighbour keeps the GPU busy, 0 to 1",
        ),
    )
}


def drop_after_warning(
    drop_after_ms: float | None, fps: float | None, source_fps: Sequence[float] = ()
) -> str | None:
    """Why ``drop_after_ms`` cannot drop any window at this frame rate, in one line; None
    when it can (or is off).

    Why (docs/FINDINGS.md, "Deadline drop"): a session's mailbox is latest-only, so
    each new frame replaces the window waiting there with a fresh one, and no window
    waits a whole frame interval (1000/fps ms). A limit at or above it never fires
    while frames come on time (a late frame, a stalled session, a CPU too busy to run
    the source threads can still leave a window waiting longer).
    ``fps`` None is each source at its own rate: ``source_fps`` are the opened sources'
    rates, the slowest of which has the longest interval; with none known, the line
    says that it cannot tell.
    """
    if drop_after_ms is None:
        return None
    head = f"drop_after_ms = {drop_after_ms:g}"
    if fps is None and not source_fps:
        return f"{head}: the sources' frame rates are not known yet; {DROP_AFTER_RULE}"
    slowest = fps if fps is not None else min(source_fps)
    interval_ms = 1000.0 / slowest
    if drop_after_ms < interval_ms:
        return None
    rate = (
        f"{fps:g} fps" if fps is not None else f"the sources' own rates (slowest {slowest:g} fps)"
    )
    return (
        f"{head}: cannot take effect at {rate}: a new frame replaces the waiting window "
        f"every {interval_ms:.1f} ms, so only a late frame lets one wait longer; use a limit "
        f"below {interval_ms:.1f} ms"
    )


#: The cap the dynamic policy uses when none is set (it needs one to know when a batch is full).
DYNAMIC_DEFAULT_MAX_BATCH = 8


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


EMULATED = "emulated:"  # a device list's prefix for a profile (--devices emulated:NAME,…)
SIMULATED_ONLY = "the simulator plays device profiles (a count, or emulated:NAME for each)"
_REAL_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
_MIG = ("mig-", "MIG-")  # a MIG slice's UUID


def is_real_device(name: str) -> bool:
    """Whether ``name`` is a device the real model runs on (``cpu``, ``cuda``, ``cuda:N``)."""
    return _REAL_DEVICE.fullmatch(name) is not None


def parse_real_devices(text: str | int) -> list[str] | None:
    """``--devices LIST`` naming at least one real device (``cpu,cpu``, ``cuda:0,cuda:1``,
    ``cuda:0,emulated:laptop-8gb``): each device's name, an emulated one as
    ``emulated:NAME`` (a bare profile name gains the prefix); None for a count or a list
    of profiles only. An empty name or a MIG UUID is a ConfigError."""
    text = str(text).strip()
    names = [part.strip() for part in text.split(",")]
    if text.isdigit() or not any(is_real_device(n) or n.startswith(_MIG) for n in names):
        return None
    out = []
    for name in names:
        if not name:
            raise ConfigError("devices", text, "an empty name in the list")
        if name.startswith(_MIG):
            raise ConfigError(
                "devices",
                text,
                f"{name}: BatchScope does not open a MIG slice by its UUID; start it with "
                f"CUDA_VISIBLE_DEVICES={name} and the slice is cuda:0",
            )
        out.append(name if is_real_device(name) or name.startswith(EMULATED) else EMULATED + name)
    KNOBS["devices"].check(len(out))
    return out


def parse_devices(text: str | int, profile: str, real: str = SIMULATED_ONLY) -> list[str]:
    """``--devices N|LIST`` as profile names: N copies of ``profile``, or the list's names
    (``emulated:NAME`` or ``NAME``). ConfigError names the input and the reason (``real``:
    why a real device in the list is refused)."""
    text = str(text).strip()
    if text.isdigit():
        return [profile] * KNOBS["devices"].check(int(text))
    names = [part.strip() for part in text.split(",")]
    if not text or any(not name for name in names):
        raise ConfigError("devices", text, "give a count (2) or a list (emulated:NAME,…)")
    out = []
    for name in names:
        if name.startswith(EMULATED):
            name = name[len(EMULATED) :]
        elif name == "cpu" or name.startswith(("cuda", *_MIG)):
            raise ConfigError(
                "devices",
                text,
                f"{name} is a real device: {real}",
            )
        out.append(name)
    KNOBS["devices"].check(len(out))
    return out


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run. Times in ms or s as the name says."""

    sources: tuple[str, ...] = _field((), SESSIONS)
    sessions: int = _field(KNOBS["sessions"].default, SESSIONS, CONTROL, SETTING)
    # None: each source's own fps
    fps: float | None = _field(KNOBS["fps"].default, SESSIONS, CONTROL, SETTING)
    policy: str = _field("all", CONTROL, SETTING)
    max_batch: int | None = _field(KNOBS["max_batch"].default, CONTROL, SETTING)
    max_delay_ms: float = _field(KNOBS["max_delay_ms"].default, CONTROL, SETTING)
    batch: int = _field(KNOBS["batch"].default, CONTROL, SETTING)
    slo_ms: float = _field(KNOBS["slo_ms"].default, CONTROL, SETTING)
    backend: str = _field("emulated", BACKEND, CONTROL)
    device: str = _field("cpu", BACKEND, CONTROL)
    profile: str | None = _field("laptop-8gb", BACKEND, CONTROL, SETTING)
    precision: str = _field("fp16", BACKEND, CONTROL, SETTING)
    resolution: tuple[int, int] = _field(DEFAULT_RESOLUTION, BACKEND, SESSIONS, CONTROL, SETTING)
    fit: str = _field(FITS[0], SESSIONS)  # letterbox or stretch (sources of another aspect)
    # network streams (urls.is_stream): how they connect (sources re-opened on a change)
    stream_transport: str = _field(STREAM_TRANSPORTS[0], SESSIONS)
    stream_timeout_s: float = _field(KNOBS["stream_timeout_s"].default, SESSIONS)
    stream_read_timeout_s: float = _field(KNOBS["stream_read_timeout_s"].default, SESSIONS)
    postprocess: str = _field(POSTPROCESSING[0], BACKEND)  # weighted or reference
    channels_last: bool = _field(False, BACKEND, CONTROL)
    cudnn_benchmark: bool = _field(True, BACKEND, CONTROL)
    checkpoint: str | None = _field(None, BACKEND)
    lean: bool = _field(False, BACKEND)
    # torch.compile the model (torch backend; slow first build)
    compile: bool = _field(False, BACKEND)
    # replay each batch size as a captured CUDA graph (CUDA only)
    cuda_graphs: bool = _field(False, BACKEND)
    # torch or onnxruntime (the exported model) runs the real model; an emulated device
    # replays the profile's curve of that runtime (a setting file carries it: the curve
    # it was planned on, the runtime its export serves)
    runtime: str = _field("torch", BACKEND, CONTROL, SETTING)
    # the Ray cluster to serve on (ray backend): None starts a local one on loopback
    ray_address: str | None = _field(None, BACKEND)
    #: devices serving the sessions: emulated devices of ``profile`` or the real model on
    #: ``device`` (or on each of ``device_list``) in BatchScope's worker (one worker thread
    #: and policy each), or Ray Serve replicas
    devices: int = _field(KNOBS["devices"].default, BACKEND)
    #: where each window goes on several devices (ROUTERS); Ray's router is least-loaded
    router: str = _field(DEFAULT_ROUTER, WORKER)
    #: several emulated devices of differing profiles, one per device, device 0's first
    #: (it is ``profile``); empty: ``devices`` devices of ``profile``
    profiles: tuple[str, ...] = _field((), BACKEND)
    #: the real model on several devices (torch backend), one per device, device 0's first
    #: (it is ``device``); empty: ``devices`` instances of the model on ``device``
    device_list: tuple[str, ...] = _field((), BACKEND)
    # None: never drop
    drop_after_ms: float | None = _field(KNOBS["drop_after_ms"].default, WORKER, CONTROL)
    # busy jobs sharing the GPU (time-slicing)
    neighbours: int = _field(KNOBS["neighbours"].default, DEVICE_LOAD, CONTROL)
    neighbour_duty: float = _field(KNOBS["neighbour_duty"].default, DEVICE_LOAD, CONTROL)
    duration_s: float = KNOBS["duration_s"].default
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
        for knob in KNOBS.values():
            knob.check(getattr(self, knob.name))
        kind = KINDS[self.policy]
        for name in kind.knobs:
            if getattr(self, name) is None and name not in kind.optional:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(name, None, f"the {self.policy} policy needs {flag}")
        parse_resolution(self.resolution)
        if self.ray_address is not None and self.backend != "ray":
            raise ConfigError("ray_address", self.ray_address, "needs the ray backend")
        if self.router not in ROUTERS:
            raise ConfigError("router", self.router, f"unknown router; choose from {_or(ROUTERS)}")
        if self.devices > 1:
            self._validate_devices()
        if self.profiles and (
            len(self.profiles) != self.devices
            or self.profiles[0] != self.profile
            or self.backend != "emulated"
        ):
            raise ConfigError(
                "profiles",
                ",".join(self.profiles),
                "one profile per emulated device in BatchScope's worker, the first the run's "
                "profile",
            )
        if self.device_list:
            self._validate_device_list()
        if self.backend == "emulated" and not self.profile:
            raise ConfigError("profile", self.profile, "the emulated backend needs a profile")
        if self.compile and self.runner != "torch":
            raise ConfigError("compile", self.compile, "torch.compile needs the torch backend")
        if self.cuda_graphs and self.runner != "torch":
            raise ConfigError("cuda_graphs", True, "CUDA graphs need the torch backend on a GPU")
        if self.cuda_graphs and self.compile:
            raise ConfigError(
                "cuda_graphs", True, "use CUDA graphs or torch.compile, not both in one run"
            )
        if self.fit not in FITS:
            raise ConfigError("fit", self.fit, f"choose from {_or(FITS)}")
        if self.stream_transport not in STREAM_TRANSPORTS:
            raise ConfigError(
                "stream_transport", self.stream_transport, f"choose from {_or(STREAM_TRANSPORTS)}"
            )
        if self.runtime not in RUNTIMES:
            raise ConfigError("runtime", self.runtime, f"choose from {_or(RUNTIMES)}")
        if self.postprocess not in POSTPROCESSING:
            raise ConfigError("postprocess", self.postprocess, f"choose from {_or(POSTPROCESSING)}")
        if self.runtime != "torch":
            for name in ("compile", "cuda_graphs", "channels_last"):
                if getattr(self, name):
                    raise ConfigError(name, True, f"is a torch option; runtime is {self.runtime}")
        why = precision_refusal(self.precision, self.runtime, self.device)
        if why and self.runner == "torch" and self.backend != "triton":
            raise ConfigError("precision", self.precision, why)
        if (self.checkpoint or "").endswith(".onnx") and self.runtime != "onnxruntime":
            raise ConfigError(
                "checkpoint", self.checkpoint, "an ONNX file needs --runtime onnxruntime"
            )
        if self.runner == "torch" and not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ConfigError("device", self.device, "expected cpu or cuda:N")
        if self.backend == "triton":
            self._validate_triton()

    def _validate_devices(self) -> None:
        """Who can run several devices: BatchScope's worker (emulated devices, the real
        model on each of several devices), Ray."""
        if self.backend == "triton":
            raise ConfigError(
                "devices",
                self.devices,
                "BatchScope's Triton serves one model instance; several devices: the emulated "
                "backend or --backend ray",
            )
        if self.backend == "ray" and self.router != "least-loaded":
            raise ConfigError(
                "router",
                self.router,
                "Ray Serve's router places each request itself (least-loaded, the power of "
                "two choices); pinned needs BatchScope's worker",
            )
        if self.backend == "emulated" and self.neighbours:
            raise ConfigError(
                "neighbours",
                self.neighbours,
                "neighbours share one emulated device; with several devices run none",
            )

    def _validate_device_list(self) -> None:
        """A list of devices naming a real one, each real or ``emulated:NAME``, in
        BatchScope's worker; device 0 is the run's own (``device`` on the torch backend,
        ``emulated:profile`` on the emulated one)."""
        names = self.device_list
        first = {"torch": self.device, "emulated": f"{EMULATED}{self.profile}"}.get(self.backend)
        if (
            len(names) != self.devices
            or names[0] != first
            or not any(map(is_real_device, names))
            or not all(is_real_device(n) or n.startswith(EMULATED) for n in names)
        ):
            raise ConfigError(
                "device_list",
                ",".join(names),
                "one device per device of BatchScope's worker (cpu, cuda:N or emulated:NAME, "
                "one real at least), the first the run's own device",
            )

    def _validate_triton(self) -> None:
        """What BatchScope's Triton (the pytriton wheel's server, Python backend on the CPU)
        can serve: the reason, said before the server starts."""
        why = SERVING_REFUSALS["triton"].get(self.policy)
        if why:
            raise ConfigError("policy", self.policy, why)
        if self.runner == "emulated" and self.neighbours:
            raise ConfigError(
                "neighbours",
                self.neighbours,
                "Triton's emulated model has no neighbours to stretch its batches: run them on "
                "BatchScope's worker or Ray, or with the real model (real processes)",
            )
        if self.runner == "torch" and self.device != "cpu":
            raise ConfigError(
                "device",
                self.device,
                "BatchScope's Triton runs the model on the CPU (Python backend, ONNX Runtime); "
                "for a GPU, serve plan --export's onnxruntime_onnx config.pbtxt in your Triton",
            )
        if self.runner == "torch" and self.precision not in EXPORT_PRECISIONS:
            raise ConfigError(
                "precision",
                self.precision,
                f"Triton runs the ONNX export: choose {_or(EXPORT_PRECISIONS)}",
            )

    @property
    def runner(self) -> str:
        """What runs a batch, in the worker or in a serving engine's replica: "emulated"
        (a profile's curve) or "torch" (the real model on ``device``)."""
        if self.backend in SERVING_ENGINES:
            return "emulated" if self.profile else "torch"
        return self.backend

    @property
    def serving(self) -> str | None:
        """The serving engine that forms the batches (ray, triton), or None: BatchScope's
        worker."""
        return self.backend if self.backend in SERVING_ENGINES else None

    def device_profile(self, device: int) -> RunConfig:
        """The config device ``device`` builds its backend from (its own profile, or its
        own real device: a config of that one device)."""
        if self.device_list:
            name = self.device_list[device]
            one = replace(self, device_list=(), devices=1)
            if is_real_device(name):
                return replace(one, backend="torch", device=name, profile=None)
            return replace(  # the torch-only options off: a curve has none
                one,
                backend="emulated",
                profile=name[len(EMULATED) :],
                runtime="torch",
                compile=False,
                cuda_graphs=False,
            )
        if not self.profiles:
            return self
        return replace(self, profile=self.profiles[device], profiles=(), devices=1)

    def device_names(self) -> list[str]:
        """Each device's name, as the simulator and the report's ``devices`` list say it."""
        if self.device_list:
            return list(self.device_list)
        if self.runner != "emulated":
            return list(self.device_list or [self.device_label] * self.devices)
        return [f"{EMULATED}{p}" for p in self.profiles or [self.profile or ""] * self.devices]

    def in_replica(self) -> RunConfig:
        """The config a serving engine's replica builds its runner from: this one with
        ``backend`` its runner (the emulated curve or the real model)."""
        return replace(
            self,
            backend=self.runner,
            ray_address=None,
            devices=1,
            router=DEFAULT_ROUTER,
            profiles=(),
            device_list=(),
        )

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
        inner = f"emulated:{self.profile}" if self.runner == "emulated" else self.device
        return f"{self.backend}: {inner}" if self.serving else inner

    def policy_phrase(self) -> str:
        """The policy in one phrase, for status bars and tables."""
        kind = KINDS[self.policy]
        return kind.text(kind.phrase, self._policy_knobs(), " (max {})")

    def policy_label(self) -> str:
        """The policy and the parameters it reads, short enough for a table cell (≤ 20 chars)."""
        kind = KINDS[self.policy]
        return kind.text(kind.short, self._policy_knobs(), " ≤{}")

    def _policy_knobs(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in KINDS[self.policy].knobs}

    def to_json(self) -> dict[str, Any]:
        """The ``config`` object of the JSON report: every field (tuples as lists) but
        ``skip_bad_sources`` and ``extra``, with ``device`` as its label, ``profile`` only
        where a profile runs, ``weights`` (which kind) and ``extra``'s keys."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("skip_bad_sources", "extra"):
                continue
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["sources"] = [mask_credentials(s) for s in self.sources]  # never a password
        out["device"] = self.device_label
        out["profile"] = self.profile if self.runner == "emulated" else None
        out["weights"] = weights_kind(self.checkpoint)
        return {**out, **self.extra}


def fields_with(role: str) -> tuple[str, ...]:
    """The RunConfig fields that carry ``role``, in the dataclass's order."""
    return tuple(f.name for f in fields(RunConfig) if role in f.metadata.get("roles", ()))


BACKEND_FIELDS = fields_with(BACKEND)
WORKER_FIELDS = fields_with(WORKER)
DEVICE_LOAD_FIELDS = fields_with(DEVICE_LOAD)
SESSION_FIELDS = fields_with(SESSIONS)
CONTROL_FIELDS = fields_with(CONTROL)
SETTING_FIELDS = fields_with(SETTING)


def _or(items: tuple[str, ...]) -> str:
    return ", ".join(items)
