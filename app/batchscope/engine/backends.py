"""Backends: what runs a batch. The real model (torch) or a replayed batch curve (emulated).

``run(windows)`` does prep → compute → post for one batch and returns the
detections with the three stage end times (s, ``time.perf_counter``). The
worker owns the only thread that calls it (one job on the device at a time).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchscope.config import RunConfig
from batchscope.engine import devicemem
from batchscope.engine.assembly import FramePool, Staging
from batchscope.engine.session import Window
from batchscope.profiles.profile import DeviceProfile, load_profile

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class BackendError(ValueError):
    """A backend that cannot be built with this config; one line naming the setting."""


class DeviceOutOfMemory(RuntimeError):
    """The device ran out of memory for a batch of ``batch`` windows."""

    def __init__(self, batch: int, detail: str = "") -> None:
        self.batch = batch
        super().__init__(
            f"out of device memory at batch {batch}" + (f" ({detail})" if detail else "")
        )


@dataclass(frozen=True)
class BatchResult:
    detections: list[Any]  # one Detection or None per window
    prep_end: float
    compute_end: float
    post_end: float


class Backend(ABC):
    label: str  # e.g. "cuda:0 (NVIDIA H200)" or "emulated: laptop-8gb"
    resolution: tuple[int, int]  # (width, height) of the windows it accepts
    weights: str  # "untrained weights: timing only" | "checkpoint NAME" | "emulated"
    draws_detections: bool = False

    @abstractmethod
    def run(self, windows: Sequence[Window]) -> BatchResult: ...

    def memory(self) -> dict[str, float]:
        """Current memory figures in MB (keys depend on what the device can report)."""
        return {"rss_mb": devicemem.rss_mb()}

    def reset_peak(self) -> None:
        """Start a new peak-memory interval."""

    def close(self) -> None:
        """Free the device."""


class EmulatedBackend(Backend):
    """Replays a device profile's batch curve as timed waits.

    Lets a machine without a GPU show GPU behaviour. Prep is real: each
    window's new frames are copied into a staging buffer exactly as for the
    GPU (see ``assembly``), so host-side assembly costs what it would. Compute
    is a wait of the profile's ms for the batch size; what the report shows is
    still the measured time on this clock, so scheduler overhead is visible.
    ``oom_above`` injects an out-of-memory error for batches larger than it
    (fault tests, and a way to demo recovery).
    """

    weights = "emulated device: no model runs"

    def __init__(
        self,
        profile: DeviceProfile,
        precision: str,
        resolution: tuple[int, int],
        oom_above: int | None = None,
    ) -> None:
        from batchscope.profiles.profile import ProfileError

        try:
            self.curve = profile.curve(precision, resolution)
        except ProfileError as exc:
            raise BackendError(str(exc)) from None
        self.profile = profile
        self.resolution = resolution
        self.label = f"emulated: {profile.name} ({profile.device})"
        self.oom_above = oom_above
        self._peak_mb = {p.batch: p.peak_mb for p in self.curve.points if p.peak_mb}
        self._last_batch = 0
        self._lead = 0.0  # s: how early to wake to land on the deadline on average
        self._staging = Staging(resolution)
        self._pool = FramePool()

    def run(self, windows: Sequence[Window]) -> BatchResult:
        n = len(windows)
        if self.oom_above is not None and n > self.oom_above:
            raise DeviceOutOfMemory(n, "injected by the emulated device")
        plan = self._pool.plan(windows)
        if plan.uploads:
            self._staging.put(plan.uploads)
        self._pool.commit(plan)
        prep_end = time.perf_counter()
        compute_end = self.compute(n, prep_end)
        self._last_batch = n
        return BatchResult([None] * n, prep_end, compute_end, time.perf_counter())

    def compute(self, n: int, start: float) -> float:
        """Wait out the profile's time for a batch of ``n`` from ``start``; returns the end."""
        deadline = start + self.curve.ms(n) / 1000.0
        sleep_until(deadline - self._lead)
        end = time.perf_counter()
        # The OS wakes a sleeper ~0.1 ms late; learn by how much and wake that much
        # earlier, so the mean emulated batch time matches the profile.
        overshoot = end - deadline
        self._lead = min(0.002, max(0.0, self._lead + 0.1 * overshoot))
        return end

    def memory(self) -> dict[str, float]:
        out = super().memory()
        if self.profile.memory_total_mb:
            out["device_total_mb"] = float(self.profile.memory_total_mb)
        if self._last_batch in self._peak_mb:
            out["profile_peak_mb"] = float(self._peak_mb[self._last_batch])
        return out


def sleep_until(deadline: float) -> None:
    """Sleep to ``deadline`` (perf_counter s); sleeps in slices, never spins on the GIL."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left)


class TorchBackend(Backend):
    """BlurBall on cpu or cuda:N at a precision and resolution.

    Only the frames the device does not hold yet travel (one per window when
    no frame was skipped; see ``assembly``): copied as uint8 into a (pinned, on
    CUDA) staging buffer reused between batches, shipped non-blocking into a
    device frame pool, gathered into windows there, then converted and
    normalised on the device (4× less transfer than float32). Only the
    newest frame's heatmap is post-processed, on the device; just the peak
    crops come back to the host. With ``cuda_graphs`` the model runs as one
    captured CUDA graph per batch size (captured on first use), which removes
    the per-kernel launch cost of eager PyTorch.
    """

    draws_detections = True

    def __init__(
        self,
        device: str,
        precision: str,
        resolution: tuple[int, int],
        channels_last: bool = False,
        cudnn_benchmark: bool = True,
        checkpoint: str | None = None,
        lean: bool = False,
        compile_model: bool = False,
        cuda_graphs: bool = False,
    ) -> None:
        import torch

        from batchscope.models.blurball import BlurBall
        from batchscope.models.weights import load_checkpoint

        self.torch = torch
        self.device = check_device(device)
        self.dtype = check_precision(precision, self.device)
        self.resolution = resolution
        self.channels_last = channels_last
        if cuda_graphs and self.device.type != "cuda":
            raise BackendError(f"CUDA graphs: need a CUDA device (device is {device})")
        if cuda_graphs and compile_model:
            raise BackendError("use CUDA graphs or torch.compile, not both")
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = cudnn_benchmark
            name = torch.cuda.get_device_name(self.device)
            self.label = f"{device} ({name})"
        else:
            self.label = "cpu"
        model = BlurBall(lean=lean).eval()
        if checkpoint:
            load_checkpoint(model, checkpoint)  # raises CheckpointError, one line
            self.weights = f"checkpoint {checkpoint}"
        else:
            self.weights = "untrained weights: timing only"
            self.draws_detections = False
        model = model.to(self.device, self.dtype)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        if compile_model:
            # dynamic shapes: one compilation serves every batch size above 1 (batch 1 is
            # specialised once more); both are paid in warm_up, on the worker thread
            model = torch.compile(model, dynamic=True)
            self.label += " compiled"
        if cuda_graphs:
            self.label += " graphs"
        self.model = model
        self._compiled = compile_model
        self._graphs: dict[int, _CapturedBatch] | None = {} if cuda_graphs else None
        self.captured: list[tuple[int, float]] = []  # (batch size, ms to capture) per graph
        scale = [1.0 / (255.0 * s) for s in IMAGENET_STD] * 3
        shift = [-m / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True)] * 3
        self._scale = torch.tensor(scale, device=self.device, dtype=self.dtype).view(1, 9, 1, 1)
        self._shift = torch.tensor(shift, device=self.device, dtype=self.dtype).view(1, 9, 1, 1)
        pin = self.device.type == "cuda"
        self._staging = Staging(
            resolution, lambda shape: torch.empty(shape, dtype=torch.uint8, pin_memory=pin)
        )
        self._pool = FramePool()
        self._frames: Any = None  # the device frame pool: 3 frames per session
        self.warm_up()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def warm_up(self, runs: int = 3) -> None:
        w, h = self.resolution
        frame = np.zeros((h, w, 3), np.uint8)
        sizes = (1, 2) if self._compiled else (1,)  # compile both graphs before timing
        for n in sizes:
            for _ in range(runs):
                self.run([Window(i, 0, 0, (frame, frame, frame), 0.0) for i in range(n)])
        self._pool.forget()  # the sessions start with empty pool positions

    def run(self, windows: Sequence[Window]) -> BatchResult:
        from batchscope.models.postprocess import best_detections

        torch = self.torch
        n = len(windows)
        w, h = self.resolution
        try:
            with torch.inference_mode():
                x = self._assemble(windows)  # (n, 3, h, w, 3) uint8 on the device
                x = x.permute(0, 1, 4, 2, 3).reshape(n, 9, h, w).to(self.dtype)
                x = x * self._scale + self._shift
                if self.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                self._sync()
                prep_end = time.perf_counter()
                heatmaps = self.model(x)[:, 2] if self._graphs is None else self._replay(x)
                self._sync()
                compute_end = time.perf_counter()
                # post-processing runs with untrained weights too: its cost is part of
                # the timing; only drawing the (meaningless) detections is skipped
                dets = _detect(best_detections, heatmaps, windows)
                if not self.draws_detections:
                    dets = [None] * n
        except torch.OutOfMemoryError as exc:
            self._pool.forget()
            torch.cuda.empty_cache()
            raise DeviceOutOfMemory(n, str(exc).split("\n")[0][:120]) from None
        except Exception:
            self._pool.forget()  # the pool may hold half a batch: ship whole windows next
            raise
        return BatchResult(dets, prep_end, compute_end, time.perf_counter())

    def _assemble(self, windows: Sequence[Window]) -> Any:
        """Ship the frames the device pool lacks, then gather the windows from the pool."""
        torch = self.torch
        plan = self._pool.plan(windows)
        need = 3 * plan.slots_needed
        if self._frames is None or len(self._frames) < need:
            w, h = self.resolution
            grown = torch.empty(
                (3 << max(0, (plan.slots_needed - 1).bit_length()), h, w, 3),
                dtype=torch.uint8,
                device=self.device,
            )
            if self._frames is not None:
                grown[: len(self._frames)] = self._frames
            self._frames = grown
        if plan.uploads:
            m = len(plan.uploads)
            new = self._staging.put(plan.uploads)[:m].to(self.device, non_blocking=True)
            at = torch.from_numpy(plan.positions).to(self.device, non_blocking=True)
            self._frames.index_copy_(0, at, new)
        gather = torch.from_numpy(plan.gather).to(self.device, non_blocking=True)
        x = self._frames[gather]
        self._pool.commit(plan)
        return x

    def _replay(self, x: Any) -> Any:
        """The newest frame's heatmaps of ``x`` by replaying the graph captured for its size.

        The first batch of each size captures it (three warm-up runs on a side stream,
        then the capture), so that batch's compute time includes the capture.
        """
        captured = self._graphs.get(len(x))
        if captured is None:
            t0 = time.perf_counter()
            captured = self._graphs[len(x)] = _CapturedBatch.capture(self.torch, self.model, x)
            self.captured.append((len(x), (time.perf_counter() - t0) * 1000.0))
        captured.input.copy_(x)
        captured.graph.replay()
        return captured.output

    def memory(self) -> dict[str, float]:
        out = super().memory()
        if self.device.type == "cuda":
            index = self.device.index or 0
            out.update(devicemem.torch_cuda_mb(index))
            out.update(devicemem.nvml_mb(index))
            if "nvml_device_total_mb" in out:
                out["device_total_mb"] = out["nvml_device_total_mb"]
            else:
                props = self.torch.cuda.get_device_properties(self.device)
                out["device_total_mb"] = props.total_memory / devicemem.MB
        else:
            out["peak_rss_mb"] = devicemem.peak_rss_mb()
        return out

    def reset_peak(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def close(self) -> None:
        self.model = None
        self._graphs = None
        self._frames = None
        self._pool.forget()
        self._staging.release()
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()


@dataclass
class _CapturedBatch:
    """One CUDA graph of the model for one batch size, with its fixed input and output."""

    graph: Any
    input: Any
    output: Any

    @classmethod
    def capture(cls, torch: Any, model: Any, example: Any) -> _CapturedBatch:
        static_in = example.clone()
        side = torch.cuda.Stream(example.device)
        side.wait_stream(torch.cuda.current_stream(example.device))
        with torch.cuda.stream(side):  # warm-up (and cuDNN autotuning) off the capture
            for _ in range(3):
                model(static_in)
        torch.cuda.current_stream(example.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(static_in)[:, 2]
        return cls(graph, static_in, static_out)


def _detect(best_detections: Any, heatmaps: Any, windows: Sequence[Window]) -> list[Any]:
    """Detections in each window's source pixels (one device pass per distinct scale)."""
    dets: list[Any] = [None] * len(windows)
    for scale in {w.scale for w in windows}:
        idx = [i for i, w in enumerate(windows) if w.scale == scale]
        sub = heatmaps if len(idx) == len(windows) else heatmaps[idx]
        for i, d in zip(idx, best_detections(sub, scale=scale), strict=True):
            dets[i] = d
    return dets


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

    out: dict[str, str | None] = {"fp32": None, "fp16": None, "bf16": None}
    if device.startswith("cuda") and torch.cuda.is_available():
        if not torch.cuda.is_bf16_supported():
            out["bf16"] = "this GPU has no bf16 support (needs compute capability 8.0+)"
    elif device == "cpu":
        out["fp16"] = "fp16 convolutions on CPU are emulated and very slow; use fp32 or bf16"
    return out


def check_precision(precision: str, device: Any) -> Any:
    import torch

    why = supported_precisions(str(device) if device.type == "cuda" else "cpu").get(precision)
    if why and device.type == "cuda":
        raise BackendError(f"precision {precision}: {why}")
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]


def make_backend(config: RunConfig, oom_above: int | None = None) -> Backend:
    """The backend a config asks for; BackendError/ProfileError/CheckpointError if it cannot."""
    if config.backend == "emulated":
        return EmulatedBackend(
            load_profile(config.profile or ""),
            config.precision,
            config.resolution,
            oom_above=oom_above,
        )
    return TorchBackend(
        config.device,
        config.precision,
        config.resolution,
        channels_last=config.channels_last,
        cudnn_benchmark=config.cudnn_benchmark,
        checkpoint=config.checkpoint,
        lean=config.lean,
        compile_model=config.compile,
        cuda_graphs=config.cuda_graphs,
    )
