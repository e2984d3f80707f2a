"""The torch backend: BlurBall on cpu or cuda:N, fed from a device frame pool."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from batchscope.config import POSTPROCESSING
from batchscope.device.checks import BackendError, check_device, check_precision
from batchscope.device.memory import gpu_sharing
from batchscope.engine.backends.base import Backend, BatchResult, DeviceOutOfMemory
from batchscope.engine.backends.cuda_graphs import CapturedBatch
from batchscope.engine.backends.torch_device import (
    DeviceFrames,
    channels_first,
    detect,
    device_memory,
    padded,
    warm_up,
)
from batchscope.engine.session import Window
from batchscope.models.normalise import IMAGENET_MEAN, IMAGENET_STD, normalisation

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "TorchBackend"]


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

    bf16 on the CPU is oneDNN's: the model stays fp32 in channels_last and runs under
    ``torch.autocast("cpu", bfloat16)``, so convolutions take bf16 (AVX512-BF16 or AMX
    dot products) and the rest stays fp32; refused where the CPU has neither
    (``check_precision``). channels_last matters: oneDNN's bf16 convolutions in NCHW
    reorder every tensor (measured 1.1-1.2x fp32 without it, docs/BENCHMARKS.md).
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
        postprocess: str = POSTPROCESSING[0],
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        import torch

        from batchscope.models.blurball import BlurBall
        from batchscope.models.postprocess import check_method
        from batchscope.models.weights import load_checkpoint, resolve_weights

        self.torch = torch
        self.device = check_device(device)
        self.dtype = check_precision(precision, self.device)
        self.resolution = resolution
        self.postprocess = check_method(postprocess)
        # bf16 on the CPU: an fp32 model under autocast, always channels_last
        self._autocast = self.device.type == "cpu" and precision == "bf16"
        self.channels_last = channels_last or self._autocast
        weights_dtype = torch.float32 if self._autocast else self.dtype
        if cuda_graphs and self.device.type != "cuda":
            raise BackendError(f"CUDA graphs: need a CUDA device (device is {device})")
        if cuda_graphs and compile_model:
            raise BackendError("use CUDA graphs or torch.compile, not both")
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = cudnn_benchmark
            name = torch.cuda.get_device_name(self.device)
            sharing = gpu_sharing(self.device.index or 0)
            self.label = f"{device} ({name})" + (f" · {sharing}" if sharing else "")
        else:
            self.label = "cpu"
        model = BlurBall(lean=lean).eval()
        path, self.weights = resolve_weights(checkpoint)
        if path:
            load_checkpoint(model, path)  # raises CheckpointError, one line
        else:
            self.draws_detections = False
        model = model.to(self.device, weights_dtype)
        if self.channels_last:
            # Module.to documents to(memory_format=...), but its overloads leave it out
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.model: Callable[[Any], Any] | None = model  # None once closed
        if compile_model:
            # dynamic shapes: one compilation serves every batch size above 1 (batch 1 is
            # specialised once more); both are paid in warm_up, on the worker thread
            self.model = torch.compile(model, dynamic=True)
            self.label += " compiled"
        if cuda_graphs:
            self.label += " graphs"
        if self._autocast:
            self.label += " bf16 (oneDNN autocast, channels_last)"
        self._compiled = compile_model
        self._graphs: dict[int, CapturedBatch] | None = {} if cuda_graphs else None
        self.captured: list[tuple[int, float]] = []  # (batch size, ms to capture) per graph
        self._scale, self._shift = normalisation(weights_dtype, self.device)
        self._input_dtype = weights_dtype
        self._frames = DeviceFrames(torch, self.device, resolution)
        self.warm_up(cancelled=cancelled)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def warm_up(self, runs: int = 3, cancelled: Callable[[], bool] = lambda: False) -> None:
        """A few untimed batches (cuDNN autotuning, compilation) before the first real one.

        ``cancelled`` is asked before each run, so a stopping engine waits for one
        run at most (torch.compile's first compilation cannot be interrupted).
        """
        sizes = (1, 2) if self._compiled else (1,)  # compile both graphs before timing
        warm_up(self.run, self.resolution, sizes, runs, cancelled, self.close)
        self._frames.forget()  # the sessions start with empty pool positions

    def run(self, windows: Sequence[Window], pad: int = 0) -> BatchResult:
        from batchscope.models.postprocess import best_detections

        torch = self.torch
        n = len(windows)
        try:
            with torch.inference_mode():
                x = padded(channels_first(self._assemble(windows)), pad).to(self._input_dtype)
                x = x * self._scale + self._shift
                if self.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                self._sync()
                prep_end = time.perf_counter()
                assert self.model is not None, "TorchBackend.run after close()"
                graphs = self._graphs
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self._autocast):
                    heatmaps = self.model(x)[:, 2] if graphs is None else self._replay(x, graphs)
                heatmaps = heatmaps[:n]  # the padding's results are dropped
                self._sync()
                compute_end = time.perf_counter()
                # post-processing runs with untrained weights too: its cost is part of
                # the timing; only drawing the (meaningless) detections is skipped
                dets = detect(partial(best_detections, method=self.postprocess), heatmaps, windows)
                if not self.draws_detections:
                    dets = [None] * n
        except torch.OutOfMemoryError as exc:
            self._frames.forget()
            torch.cuda.empty_cache()
            raise DeviceOutOfMemory(n + pad, str(exc).split("\n")[0][:120]) from None
        except Exception:
            self._frames.forget()  # the pool may hold half a batch: ship whole windows next
            raise
        return BatchResult(dets, prep_end, compute_end, time.perf_counter())

    def _assemble(self, windows: Sequence[Window]) -> Any:
        """The windows gathered from the device frame pool: (n, 3, h, w, 3) uint8."""
        return self._frames.gather(windows)

    def _replay(self, x: Any, graphs: dict[int, CapturedBatch]) -> Any:
        """The newest frame's heatmaps of ``x`` by replaying the graph captured for its size.

        The first batch of each size captures it (three warm-up runs on a side stream,
        then the capture), so that batch's compute time includes the capture.
        """
        captured = graphs.get(len(x))
        if captured is None:
            t0 = time.perf_counter()
            captured = graphs[len(x)] = CapturedBatch.capture(self.torch, self.model, x)
            self.captured.append((len(x), (time.perf_counter() - t0) * 1000.0))
        captured.input.copy_(x)
        captured.graph.replay()
        return captured.output

    def memory(self) -> dict[str, float]:
        return {**super().memory(), **device_memory(self.torch, self.device)}

    def forget_frames(self) -> None:
        self._frames.forget()

    def close(self) -> None:
        self.model = None
        self._graphs = None
        self._frames.release()
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()
