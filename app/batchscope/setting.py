"""A chosen setting for deployment: ``policy.json`` (BatchScope's) and ``config.pbtxt`` (Triton's).

``policy.json`` is a subset of :class:`~batchscope.config.RunConfig`, the fields
that say *how to serve* (not what to measure)::

    {
      "kind": "batchscope-setting",
      "version": 1,
      "policy": "dynamic", "max_batch": 4, "max_delay_ms": 5.0,
      "batch": 4, "slo_ms": 50.0,                      # every knob, used or not
      "sessions": 5, "fps": 30.0,
      "precision": "fp16", "resolution": "512x288", "profile": "server-24gb",
      "runtime": "torch",                              # the curve it was planned on
      "planned": {...}                                 # optional: what the planner measured
    }

``profile`` is a name ``load_profile`` finds, or the absolute path of a profile file
that is not in the profile folders (``plan --export`` writes the one it planned on).
``runtime`` is the runtime of the curve the setting was planned on (absent: the run's
own): the real model runs on it, an emulated device replays that curve.

:func:`load_setting` reads it back as a RunConfig (the other fields keep their
defaults); ``batchscope run --config policy.json`` and the app's File → Open
settings… use it. The engine is the run's: without ``--device`` the profile's curve is
replayed (on BatchScope's worker, Ray or Triton as ``--backend`` says); with
``--device`` the real model runs there and the file's ``profile`` stays what the plan
was made on, not applied (a profile in a serving engine's config means "replay it").
Unknown keys are refused (a typo must not run the defaults
silently); ``planned`` is kept for reading, never applied. Every error is one
line naming the file and the field (:class:`SettingError`).

:func:`triton_config` writes the same setting as a Triton Inference Server model
configuration for BlurBall's ONNX export (``batchscope export-onnx``, see
``models/onnx_export.py``: input ``frames`` uint8 ``[batch, 9, H, W]``, output
``heatmaps`` ``[batch, 3, H, W]`` in the export's precision). How each policy
maps is in :data:`TRITON_MAPPING` and in the file's comments. The export command
the file names runs as written (a test runs it): a bf16 setting has no ONNX export,
so the file serves the precision :func:`export_precision` picks and says why. A
setting measured on the CPU (a profile from ``sweep --device cpu``) is served by a
CPU instance (``KIND_CPU``), any other by one GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchscope.config import (
    EXPORT_PRECISIONS,
    KNOBS,
    POLICIES,
    POLICY_PARAMS,
    PRECISIONS,
    RUNTIMES,
    SETTING_FIELDS,
    ConfigError,
    RunConfig,
    format_resolution,
    parse_resolution,
)
from batchscope.policy_kinds import KINDS

KIND = "batchscope-setting"
VERSION = 1
#: The tensor names of the ONNX export (models/onnx_export.py INPUT and OUTPUT; a test
#: checks they agree: this module sits below models and cannot import them).
TRITON_INPUT, TRITON_OUTPUT = "frames", "heatmaps"
#: The export's output type per precision (it has no bf16: see :func:`export_precision`).
TRITON_DTYPES = {
    "fp32": "TYPE_FP32",
    "fp16": "TYPE_FP16",
    "int8": "TYPE_FP32",
}  # int8: float logits
#: The ONNX file the recommended ``export-onnx`` writes, and where Triton looks for it.
MODEL_FILE = "model.onnx"
#: The Python backend's model file in a repository (``python_backend``), beside MODEL_FILE.
PYTHON_MODEL_FILE = "model.py"

#: How each policy becomes Triton's dynamic batcher (written into config.pbtxt too).
TRITON_MAPPING = {k.name: k.triton for k in KINDS.values()}

LATEST_ONLY_CAVEAT = (
    "Triton queues every request; BatchScope keeps only the latest window per session. "
    "A client must do that itself: at most one request in flight per session, and when a "
    "new frame arrives while one is in flight, replace the pending (unsent) window "
    "instead of queueing it (drop stale frames). Otherwise, under overload, requests age "
    "in Triton's queue and latency grows without bound."
)


def export_precision(precision: str, cpu: bool) -> str:
    """The ONNX export's precision that serves a ``precision`` setting (``cpu``: on a CPU).

    fp32 and fp16 export as they are. bf16 has none (ONNX Runtime has no bf16
    convolutions; ``export-onnx`` refuses it): on a GPU fp16 stands in, the same 2
    bytes a value and the same tensor cores; on a CPU fp32, since fp16 convolutions
    there are emulated (``device/checks.py``) and slower than fp32.
    """
    if precision in EXPORT_PRECISIONS:
        return precision
    return "fp32" if cpu else "fp16"


def precision_note(precision: str, cpu: bool) -> str | None:
    """Why the export serves another precision than the setting's (None: it does not)."""
    served = export_precision(precision, cpu)
    if served == precision:
        return None
    return (
        f"the setting's {precision} has no ONNX export (ONNX Runtime has no {precision} "
        f"convolutions), so config.pbtxt serves the {served} export; the plan's figures are "
        f"{precision}'s: sweep {served} and plan again for figures of what is served"
    )


@dataclass(frozen=True)
class TritonRunner:
    """What an exported Python-backend model (``model.py``) runs, and the words that say so.

    ``name`` is model.py's ``runner`` parameter: ``onnxruntime`` (the ONNX export on the
    CPU) or ``emulated`` (a profile's curve as timed waits); ``parameters`` are its other
    parameters (threads, the curve); ``says`` goes into config.pbtxt's comments and
    ``plan --export``'s output, so that nobody serves one thing believing it another.
    """

    name: str
    says: str
    parameters: dict[str, str] = field(default_factory=dict)

    def all_parameters(self) -> dict[str, str]:
        return {"runner": self.name, **self.parameters}


#: model.py's default: the ONNX export on the CPU, threads as ``sweep`` measures them
ONNX_ON_CPU = TritonRunner(
    "onnxruntime",
    "the ONNX export through ONNX Runtime on the CPU (as many intra-op threads as the "
    "server's cores, one inter-op thread, idle threads not spinning: as `sweep` measures)",
)


class SettingError(ValueError):
    """A setting file that cannot be used; ``str()`` is one line: file, field, reason."""


def setting_json(config: RunConfig, planned: dict[str, Any] | None = None) -> dict[str, Any]:
    """``config``'s setting in the policy.json format (see the module doc)."""
    out: dict[str, Any] = {"kind": KIND, "version": VERSION}
    for name in SETTING_FIELDS:
        value = getattr(config, name)
        out[name] = format_resolution(value) if name == "resolution" else value
    if planned is not None:
        out["planned"] = planned
    return out


def save_setting(
    config: RunConfig, path: str | Path, planned: dict[str, Any] | None = None
) -> Path:
    path = Path(path)
    path.write_text(json.dumps(setting_json(config, planned), indent=2) + "\n")
    return path


def load_setting(path: str | Path, base: RunConfig | None = None) -> RunConfig:
    """The RunConfig of a policy.json: ``base`` (default: RunConfig()) with its fields.

    Raises SettingError (one line naming the file and the field) on anything wrong.
    """
    where = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SettingError(f"{where}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SettingError(f"{where}: not a text file") from None
    except json.JSONDecodeError as exc:
        raise SettingError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return setting_from_json(data, where, base)


def setting_from_json(data: Any, where: str, base: RunConfig | None = None) -> RunConfig:
    """:func:`load_setting` of a policy.json already read (``where`` names it in errors):
    a Ray Serve config (``serve_config.yaml``) carries the setting this way."""
    if not isinstance(data, dict):
        raise SettingError(f"{where}: expected a JSON object")
    if data.get("kind") != KIND:
        raise SettingError(f"{where}: kind: expected {KIND!r}, got {data.get('kind')!r}")
    if data.get("version") != VERSION:
        raise SettingError(
            f"{where}: version: expected {VERSION}, got {data.get('version')!r} "
            "(made by another BatchScope?)"
        )
    unknown = sorted(set(data) - {"kind", "version", "planned", *SETTING_FIELDS})
    if unknown:
        known = ", ".join(SETTING_FIELDS)
        raise SettingError(f"{where}: {unknown[0]}: unknown field (known: {known})")
    changes = {}
    for name in SETTING_FIELDS:
        if name in data:
            changes[name] = _field(where, name, data[name])
    if (base or RunConfig()).runner != "emulated":
        changes.pop("profile", None)  # the real model is measured, not replayed
    try:
        return (base or RunConfig()).with_changes(**changes)
    except ConfigError as exc:
        raise SettingError(f"{where}: {exc.field}: {exc.reason} (got {exc.value!r})") from None


def _field(where: str, name: str, value: Any) -> Any:
    """One field, checked as RunConfig checks it, the error naming the file."""
    try:
        if name == "policy":
            if value not in POLICIES:
                raise ConfigError(name, value, f"unknown policy; choose from {', '.join(POLICIES)}")
            return value
        if name == "precision":
            if value not in PRECISIONS:
                raise ConfigError(name, value, f"choose from {', '.join(PRECISIONS)}")
            return value
        if name == "runtime":
            if value not in RUNTIMES:
                raise ConfigError(name, value, f"choose from {', '.join(RUNTIMES)}")
            return value
        if name == "resolution":
            if not isinstance(value, str | list):
                raise ConfigError(name, value, "expected WIDTHxHEIGHT, e.g. 512x288")
            return parse_resolution(value if isinstance(value, str) else tuple(value))
        if name == "profile":
            if value is not None and not (isinstance(value, str) and value):
                raise ConfigError(name, value, "expected a profile name or path")
            return value
        return KNOBS[name].check(value)
    except ConfigError as exc:
        raise SettingError(f"{where}: {name}: {exc.reason} (got {value!r})") from None


def triton_config(
    config: RunConfig,
    settled_cap: int | None = None,
    model_name: str = "blurball",
    cpu: bool = False,
    python_backend: bool = False,
    runner: TritonRunner = ONNX_ON_CPU,
) -> str:
    """``config`` as a Triton model configuration (config.pbtxt text), the mapping in comments.

    ``settled_cap`` is the adaptive policy's cap at the end of its simulation (its
    batches' most frequent size); other policies ignore it. ``cpu``: the setting was
    measured on a CPU, so a CPU instance serves it. ``python_backend``: the model is
    Triton's Python backend running ``model.onnx`` through ONNX Runtime on the CPU (the
    generated ``model.py``, :data:`PYTHON_MODEL_FILE`): for a Triton without its ONNX
    Runtime backend, such as the server the nvidia-pytriton wheel ships; ``runner`` says
    what that model.py runs (its parameters are written into the configuration).
    """
    policy = config.policy
    cap = (settled_cap or config.max_batch) if KINDS[policy].learns_cap else config.max_batch
    max_batch, preferred, delay_us = triton_batching(
        policy, cap, config.batch, config.max_delay_ms, config.sessions
    )
    w, h = config.resolution
    precision = export_precision(config.precision, cpu)
    note = precision_note(config.precision, cpu)
    cpu = cpu or python_backend
    instance = ["    kind: KIND_CPU"] if cpu else ["    kind: KIND_GPU", "    gpus: [ 0 ]"]
    if python_backend:
        runs, platform, parameters = _python_backend_lines(runner)
    else:
        runs, platform, parameters = [], 'platform: "onnxruntime_onnx"', []
    lines = [
        *_triton_header(config, model_name, precision, "CPU" if cpu else "GPU"),
        *runs,
        *(["# Precision:", *_comment(note + ".")] if note else []),
        f'name: "{model_name}"',
        platform,
        f"max_batch_size: {max_batch}",
        "input [",
        "  {",
        f'    name: "{TRITON_INPUT}"',
        "    data_type: TYPE_UINT8",
        f"    dims: [ 9, {h}, {w} ]",
        "  }",
        "]",
        "output [",
        "  {",
        f'    name: "{TRITON_OUTPUT}"',
        f"    data_type: {TRITON_DTYPES[precision]}",
        f"    dims: [ 3, {h}, {w} ]",
        "  }",
        "]",
        "dynamic_batching {",
        *([f"  preferred_batch_size: [ {preferred} ]"] if preferred else []),
        f"  max_queue_delay_microseconds: {delay_us}",
        "}",
        "instance_group [",
        "  {",
        "    count: 1",
        *instance,
        "  }",
        "]",
        *parameters,
    ]
    return "\n".join(lines) + "\n"


def _triton_header(config: RunConfig, model_name: str, precision: str, device: str) -> list[str]:
    """The configuration's opening comments: the setting, the policy's mapping, one
    instance, the latest-only caveat and the export that makes the tensors."""
    policy = config.policy
    knobs = ", ".join(f"{k}={getattr(config, k)}" for k in POLICY_PARAMS[policy]) or "no knobs"
    return [
        "# Triton model configuration for BlurBall, made by `batchscope plan --export`",
        f"# from the setting: policy {policy} ({knobs}), {config.sessions} sessions at "
        f"{config.fps:g} fps, {config.precision} {format_resolution(config.resolution)}, "
        f"profile {config.profile}.",
        "#",
        "# Policy mapping (BatchScope -> Triton's dynamic batcher):",
        *_comment(TRITON_MAPPING[policy]),
        "#",
        f"# One model instance on one {device}: one job on the device at a time (Clockwork's",
        "# rule; what BatchScope's worker does and what its batch curves measured).",
        "#",
        "# Latest-only mailboxes:",
        *_comment(LATEST_ONLY_CAVEAT),
        "#",
        "# Tensors: BlurBall's ONNX export, made by",
        f"#   batchscope export-onnx --out {MODEL_FILE} --precision {precision} "
        f"--resolution {format_resolution(config.resolution)}",
        f"# and placed at {model_name}/1/{MODEL_FILE} in the model repository, beside",
        f"# {model_name}/config.pbtxt: uint8 frames in (the normalisation is inside the graph),",
        "# logits out in the export's precision.",
    ]


def _python_backend_lines(runner: TritonRunner) -> tuple[list[str], str, list[str]]:
    """For Triton's Python backend: the comments that say what model.py runs, the
    backend line, and ``runner``'s parameters as the configuration's ``parameters`` blocks."""
    runs = [
        "# The model: Triton's Python backend runs model.py, which serves",
        *_comment(runner.says + "."),
        "# For a GPU Triton with its own ONNX Runtime backend, use the onnxruntime_onnx",
        "# config.pbtxt exported beside this repository.",
    ]
    parameters: list[str] = []
    for key, value in runner.all_parameters().items():
        parameters += [
            "parameters {",
            f'  key: "{key}"',
            f"  value: {{ string_value: {json.dumps(value)} }}",
            "}",
        ]
    return runs, 'backend: "python"', parameters


def triton_batching(
    policy: str, cap: int | None, batch: int, max_delay_ms: float, uncapped: int
) -> tuple[int, int | None, int]:
    """A policy as Triton's dynamic batcher holds it (:data:`TRITON_MAPPING`):
    ``(max_batch_size, preferred_batch_size or None, max_queue_delay_microseconds)``.

    ``cap`` is the policy's batch cap (``max_batch``; for ``adaptive`` the cap it settled
    at), ``uncapped`` the size used when it has none (the session count in an export).
    """
    kind = KINDS[policy]
    if not kind.cap_knob:
        return 1, None, 0  # one request at a time
    if kind.waits:
        size = cap if kind.cap_knob == "max_batch" else batch
        assert size is not None, f"RunConfig: the {policy} policy needs {kind.cap_knob}"
        return size, size, round(max_delay_ms * 1000)
    return cap or uncapped, None, 0


def _comment(text: str, width: int = 86) -> list[str]:
    """``text`` wrapped into ``# `` comment lines."""
    out, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            out.append(f"#   {line}")
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        out.append(f"#   {line}")
    return out
