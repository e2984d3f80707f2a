"""Device profiles: measured batch curves (batch size → ms per batch).

A profile is a JSON file:

```json
{
  "format": "batchscope-profile/1",
  "name": "laptop-8gb",
  "device": "Laptop-class 8 GB GPU",
  "memory_total_mb": 8192,
  "source": "how it was measured",
  "curves": [
    {"precision": "fp16", "resolution": [512, 288], "runtime": "torch",
     "points": [{"batch": 1, "ms": 9.82}, {"batch": 2, "ms": 20.36}]}
  ]
}
```

A curve's ``runtime`` says what ran the model (``torch`` or ``onnxruntime``; a file
without it means torch, as every file written before runtimes existed), and
``provider`` which ONNX Runtime execution provider did (absent for torch). ``noisy``
(absent on a clean curve) says why ``sweep`` could not settle the curve by measuring
again: it was not monotone within its noise (``plan`` warns when it plans on it).

A point may also carry ``peak_mb`` (device memory at that batch), ``best_ms`` (the
best round's median, beside ``ms``, the median of the rounds' medians) and
``error`` (the point failed to measure, e.g. out of memory; it then has no
``ms`` and is left out of the curve). Between points the time is linearly
interpolated; past the last two it is linearly extrapolated; below the first
point it is scaled proportionally from the first.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from batchscope.config import PRECISIONS, RUNTIMES, format_resolution
from batchscope.paths import assets_dir, user_profiles_dir

FORMAT = "batchscope-profile/1"


class ProfileError(ValueError):
    """A profile that cannot be used; ``str()`` names the file or profile and the reason."""


@dataclass(frozen=True)
class CurvePoint:
    batch: int
    ms: float | None
    peak_mb: float | None = None
    error: str | None = None
    best_ms: float | None = None  # the best round's median (``ms`` is the rounds' median)


@dataclass(frozen=True)
class BatchCurve:
    precision: str
    resolution: tuple[int, int]
    points: tuple[CurvePoint, ...]
    runtime: str = "torch"
    provider: str | None = None  # "CPUExecutionProvider", comma-separated if several
    noisy: str | None = None  # why its sweep flagged it (not monotone within its noise)

    @property
    def label(self) -> str:
        """``fp32 256x144 onnxruntime (CPU)``: what `profiles` and the app list."""
        names = (self.provider or "").split(",")
        short = "+".join(p.removesuffix("ExecutionProvider") for p in names if p)
        provider = f" ({short})" if short else ""
        return f"{self.precision} {format_resolution(self.resolution)} {self.runtime}{provider}"

    @property
    def measured(self) -> list[CurvePoint]:
        return [p for p in self.points if p.ms is not None]

    def ms(self, batch: float) -> float:
        """Milliseconds for one batch of ``batch`` windows (a fraction is interpolated the
        same way: a MIG slice's rule asks for n × 7/K, :func:`mig_slice`)."""
        pts = [(p.batch, p.ms) for p in self.points if p.ms is not None]
        if batch < 1:
            raise ValueError(f"batch must be ≥ 1, got {batch}")
        first_batch, first_ms = pts[0]
        if len(pts) == 1 or batch <= first_batch:
            return first_ms * batch / first_batch
        for (a_batch, a_ms), (b_batch, b_ms) in pairwise(pts):
            if batch <= b_batch:
                return a_ms + (b_ms - a_ms) * (batch - a_batch) / (b_batch - a_batch)
        (a_batch, a_ms), (b_batch, b_ms) = pts[-2], pts[-1]
        return b_ms + (b_ms - a_ms) * (batch - b_batch) / (b_batch - a_batch)

    def windows_per_s(self, batch: int) -> float:
        return batch * 1000.0 / self.ms(batch)


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    device: str
    curves: tuple[BatchCurve, ...]
    memory_total_mb: float | None = None
    source: str = ""
    path: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def curve(
        self, precision: str, resolution: tuple[int, int], runtime: str = "torch"
    ) -> BatchCurve:
        for c in self.curves:
            if (c.precision, c.resolution, c.runtime) == (precision, tuple(resolution), runtime):
                return c
        have = ", ".join(c.label for c in self.curves)
        on = "" if runtime == "torch" else f" on {runtime}"
        raise ProfileError(
            f"profile {self.name}: no curve for {precision} at {format_resolution(resolution)}"
            f"{on} (it has: {have})"
        )

    def runtime_for(self, precision: str, resolution: tuple[int, int]) -> str:
        """The runtime whose curve a plan uses when none is named: torch where the profile
        has that curve (files from before runtimes are all torch), else the one it has
        (a profile from ``sweep --runtime onnxruntime``)."""
        point = (precision, tuple(resolution))
        runtimes = [c.runtime for c in self.curves if (c.precision, c.resolution) == point]
        return "torch" if "torch" in runtimes or not runtimes else runtimes[0]

    @property
    def reference(self) -> str:
        """What a setting file names it by so that ``load_profile`` finds this profile again
        on this machine: its name where that finds it, else its file's absolute path."""
        if self.path is None or self.meta.get("mig"):
            return self.name
        try:
            found = load_profile(self.name)
        except ProfileError:
            found = None
        if (
            found is not None
            and found.path is not None
            and found.path.resolve() == self.path.resolve()
        ):
            return self.name
        return str(self.path.resolve())

    @property
    def on_cpu(self) -> bool:
        """Whether it was measured on a CPU: ``sweep`` records the ``device_id`` it ran on
        (cpu, cuda:N); the built-in profiles, without one, are GPUs."""
        return self.meta.get("device_id") == "cpu"

    def covers(self) -> list[tuple[str, tuple[int, int]]]:
        """The (precision, resolution) pairs it has a curve for, in any runtime."""
        return list(dict.fromkeys((c.precision, c.resolution) for c in self.curves))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": self.name,
            "device": self.device,
            "memory_total_mb": self.memory_total_mb,
            "source": self.source,
            **self.meta,
            "curves": [
                {
                    "precision": c.precision,
                    "resolution": list(c.resolution),
                    "runtime": c.runtime,
                    **({"provider": c.provider} if c.provider else {}),
                    **({"noisy": c.noisy} if c.noisy else {}),
                    "points": [
                        {
                            k: v
                            for k, v in (
                                ("batch", p.batch),
                                ("ms", p.ms),
                                ("peak_mb", p.peak_mb),
                                ("error", p.error),
                                ("best_ms", p.best_ms),
                            )
                            if v is not None
                        }
                        for p in c.points
                    ],
                }
                for c in self.curves
            ],
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path


def parse_profile(data: Any, origin: str) -> DeviceProfile:
    """Validate a profile's JSON; every error names ``origin`` and the field."""
    if not isinstance(data, dict):
        raise _fail(origin, "top level", "expected a JSON object")
    if data.get("memory_total_mb") is not None:
        _number(origin, data["memory_total_mb"], "memory_total_mb")
    for key in ("name", "curves"):
        if key not in data:
            raise _fail(origin, key, "missing field")
    if not isinstance(data["curves"], list) or not data["curves"]:
        raise _fail(origin, "curves", "expected a non-empty list")
    curves = [_parse_curve(origin, f"curves[{i}]", raw) for i, raw in enumerate(data["curves"])]
    known = {"format", "name", "device", "memory_total_mb", "source", "curves"}
    return DeviceProfile(
        name=str(data["name"]),
        device=str(data.get("device", data["name"])),
        curves=tuple(curves),
        memory_total_mb=data.get("memory_total_mb"),
        source=str(data.get("source", "")),
        meta={k: v for k, v in data.items() if k not in known},
    )


def _fail(origin: str, where: str, why: str) -> ProfileError:
    """A profile's error, naming its file (``origin``) and the field (``where``)."""
    return ProfileError(f"{origin}: {where}: {why}")


def _number(origin: str, value: Any, where: str, *, zero: bool = False) -> float:
    """``value`` as a finite number > 0 (≥ 0 with ``zero``). JSON as Python reads it
    also holds NaN and ±Infinity, and a NaN passes every ``<`` test, so each number
    is checked here rather than found later as a crash or a 0 fps run."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        bound = "≥ 0" if zero else "> 0"
        raise _fail(origin, where, f"must be a finite number {bound}, got {value!r}")
    return float(value)


def _parse_curve(origin: str, where: str, raw: Any) -> BatchCurve:
    """One of ``curves``: its precision, resolution, runtime, provider and note, then its
    points."""
    if not isinstance(raw, dict):
        raise _fail(origin, where, "expected an object")
    for key in ("precision", "resolution", "points"):
        if key not in raw:
            raise _fail(origin, f"{where}.{key}", "missing field")
    if raw["precision"] not in PRECISIONS:
        raise _fail(origin, f"{where}.precision", f"unknown precision {raw['precision']!r}")
    res = raw["resolution"]
    if not (
        isinstance(res, list)
        and len(res) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in res)
    ):
        raise _fail(origin, f"{where}.resolution", f"expected [width, height], got {res!r}")
    runtime = raw.get("runtime", "torch")
    if runtime not in RUNTIMES:
        raise _fail(
            origin,
            f"{where}.runtime",
            f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}",
        )
    provider = raw.get("provider")
    if provider is not None and not isinstance(provider, str):
        raise _fail(origin, f"{where}.provider", f"expected a name, got {provider!r}")
    noisy = raw.get("noisy")
    if noisy is not None and not isinstance(noisy, str):
        raise _fail(origin, f"{where}.noisy", f"expected a text, got {noisy!r}")
    points = _parse_points(origin, where, raw["points"])
    _check_measured(origin, where, points)
    return BatchCurve(raw["precision"], (res[0], res[1]), tuple(points), runtime, provider, noisy)


def _parse_points(origin: str, where: str, raw_points: Any) -> list[CurvePoint]:
    """A curve's points, each a batch size ≥ 1 with its ms (or the error that stopped it),
    peak memory and best time; anything but a list holds none."""
    points = []
    for j, p in enumerate(raw_points if isinstance(raw_points, list) else []):
        pw = f"{where}.points[{j}]"
        if not isinstance(p, dict) or "batch" not in p:
            raise _fail(origin, pw, "expected an object with batch and ms")
        batch = p["batch"]
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise _fail(origin, f"{pw}.batch", f"must be an integer ≥ 1, got {batch!r}")
        ms = p.get("ms")
        if ms is None and not p.get("error"):
            raise _fail(origin, f"{pw}.ms", "missing field")
        peak = p.get("peak_mb")  # 0 is a reading: a CPU point's RSS may not rise
        best = p.get("best_ms")
        points.append(
            CurvePoint(
                batch=batch,
                ms=None if ms is None else _number(origin, ms, f"{pw}.ms"),
                peak_mb=None if peak is None else _number(origin, peak, f"{pw}.peak_mb", zero=True),
                error=p.get("error"),
                best_ms=None if best is None else _number(origin, best, f"{pw}.best_ms"),
            )
        )
    return points


def _check_measured(origin: str, where: str, points: list[CurvePoint]) -> None:
    """A curve needs a measured point, and over its measured points batch sizes increase
    and the time never falls."""
    measured = [(p.batch, p.ms) for p in points if p.ms is not None]
    if not measured:
        raise _fail(origin, f"{where}.points", "no measured point")
    for (a_batch, a_ms), (b_batch, b_ms) in pairwise(measured):
        if b_batch <= a_batch:
            raise _fail(origin, f"{where}.points", "batch sizes must increase")
        if b_ms < a_ms:
            raise _fail(
                origin,
                f"{where}.points",
                f"time falls from {a_ms:g} ms at batch {a_batch} to {b_ms:g} ms at"
                f" batch {b_batch} (must not decrease)",
            )


def builtin_dir() -> Path:
    return assets_dir() / "profiles"


def _profile_files() -> list[tuple[str, Path]]:
    """(kind, path) of every profile on this machine: built-in first, then the user's."""
    out = [("built-in", p) for p in sorted(builtin_dir().glob("*.json"))]
    out += [("user", p) for p in sorted(user_profiles_dir().glob("*.json"))]
    return out


# An emulated MIG slice of a profile: NAME@Kg (a GPU of 7 compute slices, as the A100,
# H100 and H200 are cut): K -> the eighths of device memory that slice has
MIG_SLICES = {1: 1, 2: 2, 3: 4, 4: 4, 7: 8}
MIG_COMPUTE = 7
_MIG_NAME = re.compile(r"(?P<base>.+)@(?P<k>\d+)g")


def mig_slice(whole: DeviceProfile, k: int) -> DeviceProfile:
    """``whole`` cut to a ``k``g MIG slice, by an assumption (not a measurement):

    a batch of n windows on a ``k``g slice takes what the whole device takes for
    n × 7/k windows — the slice has k/7 of the compute and of the memory bandwidth, the
    per-batch fixed cost stays whole (launches, synchronisation), and slices do not
    slow each other (MIG isolates them). On a curve linear in the batch size
    (t = a + b·n) that is t = a + b·n·7/k. The points are that rule at every batch size
    from 1 past the whole curve's last point (between and beyond them the slice is
    linear, as the whole curve is), so the slice equals the rule at every whole batch.
    Memory: the slice's eighths (``MIG_SLICES``); no peak memory per batch is carried.
    Measure a real slice with ``sweep`` on its MIG device to replace the assumption.
    """
    name = f"{whole.name}@{k}g"
    if k not in MIG_SLICES:
        sizes = ", ".join(f"{n}g" for n in MIG_SLICES)
        raise ProfileError(f"profile {name}: MIG slices are {sizes} (of {MIG_COMPUTE} compute)")
    if whole.on_cpu:
        raise ProfileError(f"profile {name}: {whole.name} was measured on a CPU; MIG cuts a GPU")
    if whole.meta.get("mig"):
        raise ProfileError(f"profile {name}: {whole.name} is already a MIG slice")
    curves = []
    for c in whole.curves:
        last = c.measured[-1].batch
        top = max(2, math.ceil(last * k / MIG_COMPUTE) + 1)
        points = tuple(CurvePoint(n, c.ms(n * MIG_COMPUTE / k)) for n in range(1, top + 1))
        curves.append(BatchCurve(c.precision, c.resolution, points, c.runtime, c.provider, c.noisy))
    eighths = MIG_SLICES[k]
    memory = None if whole.memory_total_mb is None else whole.memory_total_mb * eighths / 8
    return DeviceProfile(
        name=name,
        device=f"{whole.device}, a MIG {k}g slice (assumed: {k}/{MIG_COMPUTE} of it)",
        curves=tuple(curves),
        memory_total_mb=memory,
        source=(
            f"scaled from {whole.name}, not measured: a batch of n on a {k}g slice takes what"
            f" the whole device takes for n × {MIG_COMPUTE}/{k} windows (compute and memory"
            " bandwidth split by slice, the per-batch fixed cost kept, no interference)"
        ),
        path=whole.path,
        meta={
            "mig": {
                "of": whole.name,
                "slice": f"{k}g",
                "compute": f"{k}/{MIG_COMPUTE}",
                "memory": f"{eighths}/8",
            }
        },
    )


def load_profile(name_or_path: str | Path) -> DeviceProfile:
    """A profile by built-in/user name (``laptop-8gb``), by path to a JSON file, or an
    emulated MIG slice of one (``server-24gb@1g``: :func:`mig_slice`)."""
    text = str(name_or_path)
    path = Path(text)
    cut = _MIG_NAME.fullmatch(text)
    if cut is not None and not path.exists():
        return mig_slice(load_profile(cut["base"]), int(cut["k"]))
    if not (text.endswith(".json") or path.exists()):
        for _kind, candidate in _profile_files():
            if candidate.stem == text or _declared_name(candidate) == text:
                path = candidate
                break
        else:
            names = ", ".join(sorted({p.stem for _, p in _profile_files()}))
            raise ProfileError(f"profile {text}: no such profile or file (known: {names})")
    if not path.is_file():
        raise ProfileError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc})") from None
    except UnicodeDecodeError:  # an image, a checkpoint: the decoder's words say nothing
        raise ProfileError(f"{path}: not a profile (a binary file, not JSON text)") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    profile = parse_profile(data, str(path))
    return DeviceProfile(
        name=profile.name,
        device=profile.device,
        curves=profile.curves,
        memory_total_mb=profile.memory_total_mb,
        source=profile.source,
        path=path,
        meta=profile.meta,
    )


def _declared_name(path: Path) -> str | None:
    """The ``name`` inside a profile file (what `profiles` and the app show), if readable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data.get("name") if isinstance(data, dict) else None


def list_profiles() -> list[tuple[str, DeviceProfile | ProfileError]]:
    """Every profile found, with its kind; a broken file is listed with its error."""
    out: list[tuple[str, DeviceProfile | ProfileError]] = []
    for kind, path in _profile_files():
        try:
            out.append((kind, load_profile(path)))
        except ProfileError as exc:
            out.append((kind, exc))
    return out
