"""What the real-model backends share: the device frame pool, memory, warm-up, detections.

The torch backend and the ONNX Runtime backend feed BlurBall the same way (the same
frames shipped, the same uint8 layout, the same memory figures, the same warm-up
with its ``cancelled`` check), so that a runtime comparison compares runtimes and
nothing else. ONNX Runtime on the CPU reads the gathered uint8 tensor in place
(``Tensor.numpy()`` shares its memory); on CUDA it reads it through an I/O binding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from batchscope.device.memory import MB, nvml_mb, peak_rss_mb, torch_cuda_mb
from batchscope.engine.assembly import FramePool, Staging
from batchscope.engine.backends.base import BatchResult, BuildCancelled
from batchscope.engine.session import Window


class DeviceFrames:
    """Every session's current three frames in a uint8 pool on ``device``; batches gather.

    Only the frames the pool does not hold yet travel (one per window when no frame
    was skipped; see ``assembly``): copied into a (pinned, on CUDA) staging buffer
    reused between batches, shipped non-blocking, ``index_copy_``'d into the pool.
    """

    def __init__(self, torch: Any, device: Any, resolution: tuple[int, int]) -> None:
        self.torch = torch
        self.device = device
        self.resolution = resolution
        pin = device.type == "cuda"
        self._staging = Staging(
            resolution, lambda shape: torch.empty(shape, dtype=torch.uint8, pin_memory=pin)
        )
        self._pool = FramePool()
        self._frames: Any = None  # (3 × slots, h, w, 3) uint8 on the device

    def gather(self, windows: Sequence[Window]) -> Any:
        """The windows as one (n, 3, h, w, 3) uint8 tensor on the device, oldest frame first."""
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

    def forget(self) -> None:
        """Drop the bookkeeping: the next batch ships whole windows (after a failed batch)."""
        self._pool.forget()

    def release(self) -> None:
        self._frames = None
        self._pool.forget()
        self._staging.release()


def padded(x: Any, pad: int) -> Any:
    """``x`` with ``pad`` rows of zeros after its own (a fixed batch shape's padding)."""
    if not pad:
        return x
    out = x.new_zeros((len(x) + pad, *x.shape[1:]))
    out[: len(x)] = x
    return out


def channels_first(x: Any) -> Any:
    """(n, 3, h, w, 3) frames → (n, 9, h, w), BlurBall's layout (a copy, contiguous)."""
    n, _, h, w, _ = x.shape
    return x.permute(0, 1, 4, 2, 3).reshape(n, 9, h, w)


def device_memory(torch: Any, device: Any) -> dict[str, float]:
    """MB figures of ``device``: torch's CUDA counters and NVML on a GPU, peak RSS on CPU."""
    out: dict[str, float] = {}
    if device.type == "cuda":
        index = device.index or 0
        out.update(torch_cuda_mb(index))
        out.update(nvml_mb(index))
        if "nvml_device_total_mb" in out:
            out["device_total_mb"] = out["nvml_device_total_mb"]
        else:
            out["device_total_mb"] = torch.cuda.get_device_properties(device).total_memory / MB
    else:
        out["peak_rss_mb"] = peak_rss_mb()
    return out


def warm_up(
    run: Callable[[list[Window]], BatchResult],
    resolution: tuple[int, int],
    sizes: Sequence[int],
    runs: int,
    cancelled: Callable[[], bool],
    close: Callable[[], None],
) -> None:
    """``runs`` untimed batches of each size in ``sizes``, of black frames.

    ``cancelled`` is asked before each run, so a stopping engine waits for one run at
    most; once true, ``close()`` frees the device and BuildCancelled is raised.
    """
    w, h = resolution
    frame = np.zeros((h, w, 3), np.uint8)
    for n in sizes:
        for _ in range(runs):
            if cancelled():
                close()
                raise BuildCancelled()
            run([Window(i, 0, 0, (frame, frame, frame), 0.0) for i in range(n)])


def detect(best_detections: Any, heatmaps: Any, windows: Sequence[Window]) -> list[Any]:
    """Detections in each window's source pixels (one device pass per distinct placement).

    ``best_detections`` maps heatmap pixels to the source by each window's scale; the
    letterbox bars (the window's offset, model pixels) are then taken off.
    """
    dets: list[Any] = [None] * len(windows)
    for scale, (ox, oy) in {(w.scale, w.offset) for w in windows}:
        idx = [i for i, w in enumerate(windows) if (w.scale, w.offset) == (scale, (ox, oy))]
        sub = heatmaps if len(idx) == len(windows) else heatmaps[idx]
        for i, d in zip(idx, best_detections(sub, scale=scale), strict=True):
            if d is not None and (ox or oy):
                d = replace(d, x=d.x - ox * scale[0], y=d.y - oy * scale[1])
            dets[i] = d
    return dets
