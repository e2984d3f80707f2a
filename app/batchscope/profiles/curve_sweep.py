"""Measure BlurBall's batch curve on this device, the study's way, as a device profile.

Why: the best policy depends on the batch curve, and the curve depends on
the GPU (PRODUCT.md: the laptop GPU loses throughput past batch 1 at
512×288, the server GPU gains a little), so it must be re-measured on each
device. The method is the study's, so the numbers can be compared with it:

- the bare model (no pre/post-processing), in ``eval()`` and
  ``torch.inference_mode()`` at the precision, cuDNN benchmark on;
- the input made once, on the device, before timing;
- ``warmup`` runs per point (cuDNN autotunes per input shape), then
  ``rounds`` × ``repeat`` timed runs; the quoted time is the median of the
  rounds' medians (CUDA events on CUDA; ``perf_counter`` otherwise);
- peak memory per point: ``torch.cuda.max_memory_allocated`` over the timed
  runs on CUDA (model + input + activations); on CPU the rise of the
  process's resident-set high-water mark above its size before the input
  was made.

A point that fails (out of memory or otherwise) is kept in the curve with
its ``error`` and no ``ms``; the sweep goes on with the next point.

Each runtime in ``runtimes`` gets its own curves. ``onnxruntime`` times the ONNX
export (``models.onnx_export``) the same way: the uint8 input made once (its
normalisation is inside the graph, two elementwise nodes), ONNX Runtime with the
provider the device has (``device.onnx_runtime``), as many intra-op threads as torch
has, idle threads not spinning, wall time per run (the GPU run waits for its outputs).
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from itertools import pairwise
from typing import Any

from batchscope.config import (
    RUNTIMES,
    ConfigError,
    format_resolution,
    parse_resolution,
    precision_refusal,
)
from batchscope.device.checks import check_device, check_precision, supported_precisions
from batchscope.device.onnx_runtime import (
    import_onnxruntime,
    open_session,
    providers_for,
    run_bound,
)
from batchscope.profiles.machine import PeakMemory
from batchscope.profiles.profile import BatchCurve, CurvePoint, DeviceProfile

DEFAULT_BATCHES = (1, 2, 3, 4, 8, 16)


@dataclass(frozen=True)
class SweepPlan:
    """What to measure; validated here so that every error names the flag."""

    device: str
    precisions: tuple[str, ...]
    resolutions: tuple[tuple[int, int], ...]
    batches: tuple[int, ...] = DEFAULT_BATCHES
    warmup: int = 10  # untimed runs per point
    repeat: int = 30  # timed runs per round
    rounds: int = 3
    channels_last: bool = False
    lean: bool = False
    runtimes: tuple[str, ...] = ("torch",)
    #: the (runtime, precision) curves to measure, if not every pair the two lists make
    curves: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for runtime, precision in self.curves:
            if runtime not in self.runtimes or precision not in self.precisions:
                raise ConfigError(
                    "curves", f"{runtime}:{precision}", "not in --runtime/--precision"
                )
            why = precision_refusal(precision, runtime, _kind(self.device))
            if why:
                raise ConfigError("curves", f"{runtime}:{precision}", why)
        for runtime in self.runtimes:
            if runtime not in RUNTIMES:
                raise ConfigError("runtime", runtime, f"choose from {', '.join(RUNTIMES)}")
        if not self.runtimes or len(set(self.runtimes)) != len(self.runtimes):
            raise ConfigError("runtime", list(self.runtimes), "give each runtime once")
        if "onnxruntime" in self.runtimes and self.channels_last:
            raise ConfigError("channels_last", True, "is a torch option; not for onnxruntime")
        if not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ConfigError("device", self.device, "expected cpu or cuda:N")
        for precision in self.precisions:
            whys = [precision_refusal(precision, rt, _kind(self.device)) for rt in self.runtimes]
            if all(whys):
                raise ConfigError("precision", precision, str(whys[0]))
        if not self.precisions:
            raise ConfigError("precision", "", "give at least one precision")
        if not self.resolutions:
            raise ConfigError("resolution", "", "give at least one resolution")
        for res in self.resolutions:
            parse_resolution(res)
        if not self.batches or min(self.batches) < 1:
            raise ConfigError("batch", list(self.batches), "batch sizes must be at least 1")
        if list(self.batches) != sorted(set(self.batches)):
            raise ConfigError("batch", list(self.batches), "batch sizes must increase")
        if self.warmup < 0:
            raise ConfigError("warmup", self.warmup, "must be 0 or more runs")
        if self.repeat < 1:
            raise ConfigError("repeat", self.repeat, "must be at least 1 run")
        if self.rounds < 1:
            raise ConfigError("rounds", self.rounds, "must be at least 1 round")

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(runtime, precision) of each curve per resolution: every runtime with every
        precision it runs (``sweep --runtime onnxruntime,torch --precision fp32,int8,bf16``
        measures fp32 in both, int8 in ONNX Runtime, bf16 in torch)."""
        kind = _kind(self.device)
        if self.curves:
            return list(self.curves)
        return [
            (rt, p)
            for rt in self.runtimes
            for p in self.precisions
            if precision_refusal(p, rt, kind) is None
        ]

    @property
    def points(self) -> list[tuple[str, str, tuple[int, int], int]]:
        """(runtime, precision, resolution, batch) in the order they are measured: each
        resolution and batch in turn, all curves' points of it side by side."""
        return [
            (rt, p, r, b) for r in self.resolutions for b in self.batches for rt, p in self.pairs
        ]

    def method(self) -> str:
        layout = ", channels_last" if self.channels_last else ""
        lean = ", lean head" if self.lean else ""
        cudnn = ", cuDNN benchmark on" if self.device.startswith("cuda") else ""
        ort = (
            "; onnxruntime: the ONNX export (uint8 input, normalised in the graph), "
            "intra-op threads as torch's, no spinning"
            if "onnxruntime" in self.runtimes
            else ""
        )
        int8 = (
            "; int8: the demo weights' export statically quantized (models/onnx_quantize.py)"
            if ("onnxruntime", "int8") in self.pairs
            else ""
        )
        bf16 = (
            "; bf16 on cpu: fp32 model in channels_last under torch.autocast(bfloat16)"
            if ("torch", "bf16") in self.pairs and self.device == "cpu"
            else ""
        )
        side = (
            " (each point's curves side by side, rounds interleaved)" if len(self.pairs) > 1 else ""
        )
        return (
            f"batchscope sweep: bare BlurBall (3-frame window{layout}{lean}), eval + "
            f"inference_mode{cudnn}, input made on the device{ort}{int8}{bf16}; median of "
            f"{self.rounds}x{self.repeat} runs (median of round medians; best_ms: the best "
            f"round's) after {self.warmup} warm-ups per point{side}"
        )


def _kind(device: str) -> str:
    """``cpu`` or ``cuda``: what :func:`~batchscope.config.precision_refusal` asks."""
    return "cpu" if device == "cpu" else "cuda"


def time_round(model: Any, x: Any, repeat: int) -> float:
    """Median ms of ``repeat`` forward passes of ``model`` on ``x`` (inside inference_mode)."""
    import torch

    if x.is_cuda:
        marks = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(repeat)
        ]
        for begin, end in marks:
            begin.record()
            model(x)
            end.record()
        torch.cuda.synchronize(x.device)
        return statistics.median(begin.elapsed_time(end) for begin, end in marks)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        model(x)
        times.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(times)


class _PointRun:
    """One curve's point being measured: its input, its round medians, or what failed."""

    def __init__(self, model: Any, batch: int) -> None:
        self.model = model
        self.batch = batch
        self.x: Any = None
        self.medians: list[float] = []
        self.peak_mb: float | None = None
        self.error: str | None = None

    def fail(self, exc: BaseException) -> None:
        import torch

        self.x = None
        if isinstance(exc, torch.OutOfMemoryError):
            self.error = f"out of memory: {_first_line(exc)}"
        else:
            self.error = f"{type(exc).__name__}: {_first_line(exc)}"

    def point(self) -> CurvePoint:
        if self.error is not None:
            return CurvePoint(self.batch, None, error=self.error)
        median = round(statistics.median(self.medians), 4)
        return CurvePoint(self.batch, median, self.peak_mb, best_ms=round(min(self.medians), 4))


def measure_points(
    models: list[tuple[Any, Any]],
    plan: SweepPlan,
    device: Any,
    resolution: tuple[int, int],
    batch: int,
    memory: PeakMemory,
) -> list[CurvePoint]:
    """The point at ``batch`` of each of ``models`` ((model, input dtype) pairs), side by side.

    Each model's input, warm-up and first round come alone (its peak memory is taken over
    that round); the other rounds are interleaved over the models, so that a load coming
    and going on a shared machine falls on every curve alike and their ratios hold. A
    failure becomes a point with ``error`` (never raises).
    """
    import torch

    w, h = resolution
    runs = [_PointRun(model, batch) for model, _ in models]
    with torch.inference_mode():
        for run, (model, dtype) in zip(runs, models, strict=True):
            try:
                memory.before_input()
                if isinstance(model, OnnxModel):
                    run.x = torch.randint(
                        0, 256, (batch, 9, h, w), dtype=torch.uint8, device=device
                    )
                else:
                    run.x = torch.randn(batch, 9, h, w, device=device, dtype=dtype)
                if plan.channels_last or getattr(model, "channels_last", False):
                    run.x = run.x.contiguous(memory_format=torch.channels_last)
                for _ in range(plan.warmup):
                    model(run.x)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                memory.reset()
                run.medians.append(time_round(model, run.x, plan.repeat))
                run.peak_mb = round(memory.peak_mb(), 1)
            except Exception as exc:  # one bad point must not end the sweep
                run.fail(exc)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        for _ in range(plan.rounds - 1):
            for run in runs:
                if run.error is not None:
                    continue
                try:
                    run.medians.append(time_round(run.model, run.x, plan.repeat))
                except Exception as exc:
                    run.fail(exc)
    points = [run.point() for run in runs]
    del runs
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return points


def measure_point(
    model: Any,
    plan: SweepPlan,
    device: Any,
    dtype: Any,
    resolution: tuple[int, int],
    batch: int,
    memory: PeakMemory,
) -> CurvePoint:
    """One point of one curve (a re-measured one: :func:`_settle`)."""
    return measure_points([(model, dtype)], plan, device, resolution, batch, memory)[0]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().split("\n")[0]
    return text[:160] or type(exc).__name__


def run_sweep(plan: SweepPlan, progress: Callable[[str], None]) -> list[BatchCurve]:
    """Measure every point of ``plan``; ``progress`` gets one line per point.

    Per resolution, every curve (runtime, precision) is built first, then each batch size
    is measured on all of them side by side (:func:`measure_points`). Raises BackendError
    (one line) if the device or a precision is not available.
    """
    import torch

    device = check_device(plan.device)
    precisions = {p for _, p in plan.pairs}
    dtypes = {p: check_precision(p, device) for p in precisions if p != "int8"}
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    else:
        for p in sorted(precisions):
            why = supported_precisions("cpu").get(p)
            if why:
                progress(f"note: {p} on cpu: {why}")
    if "onnxruntime" in plan.runtimes:
        providers_for(import_onnxruntime(), device)  # BackendError, one line, before any work
    memory = PeakMemory(device)
    total = sum(_cost(r, b) for _, _, r, b in plan.points)
    done_cost, done, t0 = 0.0, 0, time.perf_counter()
    torch_models = {
        p: _torch_model(plan, device, p, dtypes[p]) for rt, p in plan.pairs if rt == "torch"
    }
    curves = []
    for resolution in plan.resolutions:
        models: list[tuple[Any, Any]] = []
        for runtime, precision in plan.pairs:
            if runtime == "torch":
                models.append((torch_models[precision], _input_dtype(device, precision, dtypes)))
                continue
            where = f"onnxruntime {precision} {format_resolution(resolution)}"
            progress(f"{where}: exporting…")
            say = partial(_prefixed, progress, where)
            models.append((OnnxModel.export(plan, device, precision, resolution, say), None))
        rows: list[list[CurvePoint]] = [[] for _ in plan.pairs]
        for batch in plan.batches:
            points = measure_points(models, plan, device, resolution, batch, memory)
            done_cost += _cost(resolution, batch) * len(plan.pairs)
            elapsed = time.perf_counter() - t0
            left = elapsed * (total - done_cost) / done_cost
            for (runtime, precision), row, point in zip(plan.pairs, rows, points, strict=True):
                row.append(point)
                done += 1
                where = f"{runtime} {precision} {format_resolution(resolution)}"
                progress(
                    f"[{done}/{len(plan.points)}] {where} batch {batch}: {_describe(point)} · "
                    f"{elapsed:.1f} s elapsed, ~{left:.0f} s left"
                )
        for (runtime, precision), row, (model, dtype) in zip(plan.pairs, rows, models, strict=True):
            measure = partial(measure_point, model, plan, device, dtype, resolution, memory=memory)
            where = f"{runtime} {precision} {format_resolution(resolution)}"
            points, noisy = _settle(row, measure, partial(_prefixed, progress, where))
            provider = model.provider if isinstance(model, OnnxModel) else None
            curves.append(
                BatchCurve(precision, resolution, tuple(points), runtime, provider, noisy)
            )
        del models
    return curves


def _torch_model(plan: SweepPlan, device: Any, precision: str, dtype: Any) -> Any:
    """BlurBall as the torch backend runs it at ``precision`` (bf16 on the CPU: fp32
    weights in channels_last under autocast, ``TorchBackend``'s way)."""
    import torch

    from batchscope.models.blurball import BlurBall

    if device.type == "cpu" and precision == "bf16":
        return CpuAutocast(BlurBall(lean=plan.lean).eval().to(device))
    model = BlurBall(lean=plan.lean).eval().to(device, dtype)
    if plan.channels_last:
        # Module.to documents to(memory_format=...), but its overloads leave it out
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model


def _input_dtype(device: Any, precision: str, dtypes: dict[str, Any]) -> Any:
    import torch

    return torch.float32 if device.type == "cpu" and precision == "bf16" else dtypes[precision]


class CpuAutocast:
    """An fp32 model in channels_last called under ``torch.autocast("cpu", bfloat16)``."""

    channels_last = True

    def __init__(self, model: Any) -> None:
        import torch

        self.model = model.to(memory_format=torch.channels_last)

    def __call__(self, x: Any) -> Any:
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.model(x)


class OnnxModel:
    """BlurBall's ONNX export in an ONNX Runtime session, called like the torch model.

    ``model(x)`` takes the uint8 input as a torch tensor on the device (on the CPU
    ONNX Runtime reads its memory in place; on CUDA both ends are bound on the device).
    """

    def __init__(self, session: Any, providers: list[str], device: Any, dtype: Any) -> None:
        self.session = session
        self.provider = ",".join(providers)
        self.device = device
        self.dtype = dtype

    @classmethod
    def export(
        cls,
        plan: SweepPlan,
        device: Any,
        precision: str,
        resolution: tuple[int, int],
        progress: Callable[[str], None],
    ) -> OnnxModel:
        """The export at ``precision`` (untrained weights: timing only), opened in ONNX
        Runtime. int8 quantizes the demo weights' export instead (the model the app runs,
        made once and cached; untrained weights would be quantized anew in each sweep)."""
        import torch

        from batchscope.device.checks import BackendError
        from batchscope.models.onnx_export import DTYPES, ExportError, export_blurball
        from batchscope.models.onnx_quantize import QuantizeError
        from batchscope.models.weights import resolve_weights

        checkpoint = resolve_weights(None)[0] if precision == "int8" else None
        try:
            data = export_blurball(precision, resolution, checkpoint, plan.lean, progress)
        except (ExportError, QuantizeError) as exc:
            raise BackendError(str(exc)) from None
        session, providers = open_session(
            data, device, torch.get_num_threads(), spinning=False, origin="the export"
        )
        return cls(session, providers, device, DTYPES.get(precision, torch.float32))

    def __call__(self, x: Any) -> Any:
        from batchscope.models.onnx_export import INPUT, OUTPUT

        if self.device.type == "cpu":
            return self.session.run([OUTPUT], {INPUT: x.numpy()})[0]
        import torch

        n, _, h, w = x.shape
        out = torch.empty((n, 3, h, w), dtype=self.dtype, device=self.device)
        run_bound(self.session, INPUT, x, OUTPUT, out)
        return out


def _prefixed(progress: Callable[[str], None], prefix: str, line: str) -> None:
    progress(f"{prefix}: {line}")


def _falls(points: list[CurvePoint]) -> list[tuple[CurvePoint, CurvePoint]]:
    """Consecutive measured points whose time decreases with the batch size."""
    measured = [(p, p.ms) for p in points if p.ms is not None]
    return [(a, b) for (a, a_ms), (b, b_ms) in pairwise(measured) if b_ms < a_ms]


def _settle(
    points: list[CurvePoint], measure: Callable[[int], CurvePoint], progress: Callable[[str], None]
) -> tuple[list[CurvePoint], str | None]:
    """Make the curve one that profiles accept: time must not fall as the batch grows.
    Returns the points and, for a curve that is not monotone within its noise, why (the
    profile's ``noisy``: ``plan`` warns on such a curve), else None.

    Why: a larger batch cannot really run faster than a smaller one, so a fall is
    noise (another process on the device, a cold first point); ``parse_profile``
    rejects such curves. Both points of each fall are measured once more, and each then
    has two readings, either of which may be the noisy one: on a loaded machine a fresh
    reading can be far off too (batch 4: 173.7 ms, then 3,468 ms). The curve keeps, of
    all the ways to take one reading or none per point, the one that is monotone and keeps
    the most points; then the most fresh readings; then the earliest points. A curve that
    needed an old reading or to leave a point out is flagged: re-measuring did not
    settle it. A point left out keeps its readings in its ``error`` and has no ``ms`` (the
    curve interpolates over it).
    """
    falls = _falls(points)
    if not falls:
        return points, None
    again = sorted({p.batch for pair in falls for p in pair})
    seen = ", ".join(f"b{a.batch} {a.ms:.2f} ms > b{b.batch} {b.ms:.2f} ms" for a, b in falls)
    progress(f"time falls ({seen}); measuring batch {', '.join(map(str, again))} again")
    fresh = {b: measure(b) for b in again}
    # each point's readings, the preferred first: (point, is it the fresh reading)
    options: list[list[tuple[CurvePoint, bool]]] = []
    for p in points:
        if p.batch in fresh:
            options.append([(fresh[p.batch], True), (p, False)])
        else:
            options.append([(p, False)])
    chosen = _monotone_choice(options)
    kept: list[CurvePoint] = []
    notes: list[str] = []
    for i, p in enumerate(points):
        readings = [q.ms for q, _ in options[i] if q.ms is not None]
        pick = chosen.get(i)
        if pick is not None:
            point, is_fresh = options[i][pick]
            if p.batch in fresh and not is_fresh and fresh[p.batch].ms is not None:
                notes.append(
                    f"b{p.batch} read {p.ms:.2f} then {fresh[p.batch].ms:.2f} ms (the first kept)"
                )
            kept.append(point)
        elif not readings:
            kept.append(options[i][0][0])  # failed to measure (its error says why)
        else:
            shown = ", then ".join(f"{ms:.2f} ms" for ms in reversed(readings))
            error = f"measured {shown}, out of line with its neighbours twice: left out as noise"
            notes.append(f"b{p.batch} left out ({shown})")
            kept.append(CurvePoint(p.batch, None, p.peak_mb, error=error))
            progress(f"batch {p.batch}: {error}")
    if not notes:
        return kept, None
    noisy = "not monotone within its noise: " + "; ".join(notes)
    progress(f"flagged: {noisy}")
    return kept, noisy


def _monotone_choice(options: list[list[tuple[CurvePoint, bool]]]) -> dict[int, int]:
    """Point index -> which of its readings to keep, for the monotone choice that keeps
    the most points, then the most fresh readings, then the earliest points (a longest
    non-decreasing chain over the readings; a few points, two readings each)."""
    # best[(i, k)]: the score of the best chain ending with reading k of point i, and the
    # reading before it; a score adds (1, fresh, -i) per point kept: compared as tuples
    best: dict[tuple[int, int], tuple[tuple[int, int, int], tuple[int, int] | None]] = {}
    for i, readings in enumerate(options):
        for k, (point, is_fresh) in enumerate(readings):
            if point.ms is None:
                continue
            own = (1, int(is_fresh), -i)
            score, before = own, None
            for (j, m), (prior, _) in best.items():
                if j < i and options[j][m][0].ms <= point.ms:  # type: ignore[operator]
                    total = (prior[0] + own[0], prior[1] + own[1], prior[2] + own[2])
                    if total > score:
                        score, before = total, (j, m)
            best[(i, k)] = (score, before)
    if not best:
        return {}
    end: tuple[int, int] | None = max(best, key=lambda key: best[key][0])
    chosen: dict[int, int] = {}
    while end is not None:
        chosen[end[0]] = end[1]
        end = best[end][1]
    return chosen


def _cost(resolution: tuple[int, int], batch: int) -> float:
    """Relative time a point takes, for the estimate of what is left (pixels pushed)."""
    return float(batch * resolution[0] * resolution[1])


def _describe(point: CurvePoint) -> str:
    if point.ms is None:
        return f"FAILED ({point.error})"
    return (
        f"{point.ms:.2f} ms, {point.batch * 1000.0 / point.ms:.1f} windows/s, "
        f"peak {point.peak_mb:g} MB"
    )


def build_profile(
    plan: SweepPlan,
    name: str,
    curves: list[BatchCurve],
    device_label: str,
    memory_total_mb: float | None,
    facts: dict[str, Any],
    memory_metric: str,
) -> DeviceProfile:
    return DeviceProfile(
        name=name,
        device=device_label,
        curves=tuple(curves),
        memory_total_mb=None if memory_total_mb is None else round(memory_total_mb),
        source=plan.method(),
        meta={
            "device_id": plan.device,
            **facts,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "peak_mb_metric": memory_metric,
        },
    )


def markdown_table(profile: DeviceProfile) -> str:
    """The study's table per resolution: ms per batch, then windows/s, per precision.

    A sweep that kept each point's best round (``best_ms``) adds the best rounds'
    windows/s, and with several curves each one's ratio to the first (medians).
    """
    blocks = []
    resolutions = list(dict.fromkeys(c.resolution for c in profile.curves))
    for res in resolutions:
        curves = [c for c in profile.curves if c.resolution == res]
        named = any(c.runtime != "torch" for c in curves)  # one runtime: the old header
        precs = [c.precision.upper() + (f" {c.runtime}" if named else "") for c in curves]
        best = any(p.best_ms is not None for c in curves for p in c.points)
        batches = sorted({p.batch for c in curves for p in c.points})
        head = ["batch"] + [f"{p} ms" for p in precs] + [f"{p} windows/s" for p in precs]
        if best:
            head += [f"{p} best windows/s" for p in precs]
            head += [f"{p} × {precs[0]}" for p in precs[1:]]
        lines = [
            f"{profile.device}, {format_resolution(res)}:",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        for b in batches:
            pts = [next((p for p in c.points if p.batch == b), None) for c in curves]
            ms = [_cell(p, lambda _, ms: f"{ms:.2f}") for p in pts]
            wps = [_cell(p, lambda batch, ms: f"{batch * 1000.0 / ms:.1f}") for p in pts]
            cells = [str(b), *ms, *wps]
            if best:
                cells += [_best_cell(p) for p in pts]
                cells += [_ratio_cell(pts[0], p) for p in pts[1:]]
            lines.append("| " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _best_cell(point: CurvePoint | None) -> str:
    if point is None or point.best_ms is None:
        return "–"
    return f"{point.batch * 1000.0 / point.best_ms:.1f}"


def _ratio_cell(first: CurvePoint | None, point: CurvePoint | None) -> str:
    """``point``'s windows/s over ``first``'s (the same batch: the ratio of their times)."""
    if first is None or point is None or first.ms is None or point.ms is None:
        return "–"
    return f"{first.ms / point.ms:.2f}×"


def _cell(point: CurvePoint | None, fmt: Callable[[int, float], str]) -> str:
    """``fmt(batch, ms)`` of a measured point; what stopped the others."""
    if point is None:
        return "–"
    if point.ms is None:
        return "OOM" if (point.error or "").startswith("out of memory") else "failed"
    return fmt(point.batch, point.ms)
