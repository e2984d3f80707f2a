"""The torch backend: BlurBall on cpu or cuda:N, fed from a device frame pool."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from batchscope.device.checks import BackendError, check_device, check_precision
from batchscope.device.memory import MB, nvml_mb, peak_rss_mb, torch_cuda_mb
from batchscope.engine.assembly import FramePool, Staging
from batchscope.engine.backends.base import Backend, BatchResult, BuildCancelled, DeviceOutOfMemory
from batchscope.engine.backends.cuda_graphs import CapturedBatch
from batchscope.engine.session import Window

#: ImageNet statistics BlurBall's inputs are normalised with, per RGB channel (0–1 scale).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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
        cancelled: Callable[[], bool] = lambda: False,
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
        self._graphs: dict[int, CapturedBatch] | None = {} if cuda_graphs else None
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
        self.warm_up(cancelled=cancelled)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def warm_up(self, runs: int = 3, cancelled: Callable[[], bool] = lambda: False) -> None:
        """A few untimed batches (cuDNN autotuning, compilation) before the first real one.

        ``cancelled`` is asked before each run, so a stopping engine waits for one
        run at most (torch.compile's first compilation cannot be interrupted).
        """
        w, h = self.resolution
        frame = np.zeros((h, w, 3), np.uint8)
        sizes = (1, 2) if self._compiled else (1,)  # compile both graphs before timing
        for n in sizes:
            for _ in range(runs):
                if cancelled():
                    self.close()
                    raise BuildCancelled()
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
            captured = self._graphs[len(x)] = CapturedBatch.capture(self.torch, self.model, x)
            self.captured.append((len(x), (time.perf_counter() - t0) * 1000.0))
        captured.input.copy_(x)
        captured.graph.replay()
        return captured.output

    def memory(self) -> dict[str, float]:
        out = super().memory()
        if self.device.type == "cuda":
            index = self.device.index or 0
            out.update(torch_cuda_mb(index))
            out.update(nvml_mb(index))
            if "nvml_device_total_mb" in out:
                out["device_total_mb"] = out["nvml_device_total_mb"]
            else:
                props = self.torch.cuda.get_device_properties(self.device)
                out["device_total_mb"] = props.total_memory / MB
        else:
            out["peak_rss_mb"] = peak_rss_mb()
        return out

    def close(self) -> None:
        self.model = None
        self._graphs = None
        self._frames = None
        self._pool.forget()
        self._staging.release()
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()


def _detect(best_detections: Any, heatmaps: Any, windows: Sequence[Window]) -> list[Any]:
    """Detections in each window's source pixels (one device pass per distinct scale)."""
    dets: list[Any] = [None] * len(windows)
    for scale in {w.scale for w in windows}:
        idx = [i for i, w in enumerate(windows) if w.scale == scale]
        sub = heatmaps if len(idx) == len(windows) else heatmaps[idx]
        for i, d in zip(idx, best_detections(sub, scale=scale), strict=True):
            dets[i] = d
    return dets
