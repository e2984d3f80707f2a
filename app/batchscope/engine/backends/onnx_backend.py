"""The ONNX Runtime backend: BlurBall's ONNX export (or a given .onnx file) in ONNX Runtime.

Fed exactly as the torch backend is (``torch_device``: the same frame pool, the same
uint8 layout, the same stages, memory figures, warm-up and detections); only the
model call differs. The export normalises inside the graph (``models.onnx_export``),
so the pre-processing is the torch backend's by construction.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from batchscope.config import POSTPROCESSING
from batchscope.device.checks import BackendError, check_device
from batchscope.device.onnx_runtime import (
    import_onnxruntime,
    open_session,
    provider_label,
    providers_for,
    run_bound,
)
from batchscope.engine.backends.base import Backend, BatchResult, BuildCancelled, DeviceOutOfMemory
from batchscope.engine.backends.torch_device import (
    DeviceFrames,
    channels_first,
    detect,
    device_memory,
    padded,
    warm_up,
)
from batchscope.engine.session import Window
from batchscope.models.weights import resolve_weights

#: The export's output type per precision (as ONNX Runtime names it); the int8 model
#: dequantizes its last convolution's output: float logits.
OUTPUT_TYPES = {"fp32": "tensor(float)", "fp16": "tensor(float16)", "int8": "tensor(float)"}


class OnnxBackend(Backend):
    """BlurBall in ONNX Runtime on cpu (CPU provider) or cuda:N (TensorRT/CUDA providers).

    ``checkpoint`` is a torch checkpoint (exported at build, a few seconds, remembered
    for the process) or an ``.onnx`` file (used as it is, after checking it has the
    export's input and output). On the CPU the gathered uint8 tensor goes to ONNX
    Runtime without a copy and the heatmaps come back as a numpy array that
    ``torch.from_numpy`` shares; on CUDA both are bound in place on the device (I/O
    binding), so the post-processing runs on the device as with torch.

    ``int8`` runs the export statically quantized (``models.onnx_quantize``), on the CPU
    only; its first build calibrates and quantizes (tens of seconds, said through
    ``said``) and keeps the model in the user's cache for the next.
    """

    draws_detections = True

    def __init__(
        self,
        device: str,
        precision: str,
        resolution: tuple[int, int],
        checkpoint: str | None = None,
        lean: bool = False,
        threads: int | None = None,
        spinning: bool = False,
        postprocess: str = POSTPROCESSING[0],
        cancelled: Callable[[], bool] = lambda: False,
        said: Callable[[str], None] = lambda _: None,
    ) -> None:
        import torch

        from batchscope.config import precision_refusal
        from batchscope.models.onnx_export import EXPORT_PRECISIONS
        from batchscope.models.postprocess import check_method

        import_onnxruntime()  # first: "not installed" is the clearest reason
        self.torch = torch
        self.device = check_device(device)
        if precision not in EXPORT_PRECISIONS:
            raise BackendError(
                f"precision {precision}: ONNX Runtime runs the {' or '.join(EXPORT_PRECISIONS)}"
                " export"
            )
        why = precision_refusal(precision, "onnxruntime", self.device.type)
        if why:
            raise BackendError(f"precision {precision} on {device}: {why}")
        self.precision = precision
        self.resolution = resolution
        self.postprocess = check_method(postprocess)
        providers_for(import_onnxruntime(), self.device)  # before the export's seconds
        if not (checkpoint and checkpoint.endswith(".onnx")) and cancelled():
            raise BuildCancelled()  # the export cannot be interrupted: ask before it
        data, self.weights, trained = onnx_model(checkpoint, precision, resolution, lean, said)
        if not trained:
            self.draws_detections = False
        origin = checkpoint if checkpoint and checkpoint.endswith(".onnx") else "the export"
        self._session, self.providers = open_session(
            data, self.device, threads or torch.get_num_threads(), spinning, origin
        )
        self._check_signature(origin)
        self.label = f"{device} onnxruntime ({provider_label(self.providers)})"
        if precision == "int8":
            self.label += " int8"
        self._out_dtype = torch.float16 if precision == "fp16" else torch.float32
        self._frames = DeviceFrames(torch, self.device, resolution)
        warm_up(self.run, resolution, (1,), 3, cancelled, self.close)
        self._frames.forget()  # the sessions start with empty pool positions

    def _check_signature(self, origin: str) -> None:
        """BackendError unless the model takes uint8 [B, 9, H, W] and gives [B, 3, H, W]."""
        from batchscope.models.onnx_export import INPUT, OUTPUT

        w, h = self.resolution
        inputs, outputs = self._session.get_inputs(), self._session.get_outputs()
        want_in = f"{INPUT}: tensor(uint8) [batch, 9, {h}, {w}]"
        want_out = f"{OUTPUT}: {OUTPUT_TYPES[self.precision]} [batch, 3, {h}, {w}]"
        got_in = [f"{i.name}: {i.type} {_dims(i.shape)}" for i in inputs]
        got_out = [f"{o.name}: {o.type} {_dims(o.shape)}" for o in outputs]
        if len(inputs) != 1 or not _matches(inputs[0], INPUT, "tensor(uint8)", (9, h, w)):
            raise BackendError(
                f"{origin}: not BlurBall's ONNX model at {w}x{h}: input {'; '.join(got_in)}, "
                f"expected {want_in} (make one with batchscope export-onnx)"
            )
        if len(outputs) != 1 or not _matches(
            outputs[0], OUTPUT, OUTPUT_TYPES[self.precision], (3, h, w)
        ):
            raise BackendError(
                f"{origin}: not BlurBall's {self.precision} ONNX model at {w}x{h}: output "
                f"{'; '.join(got_out)}, expected {want_out}"
            )

    def run(self, windows: Sequence[Window], pad: int = 0) -> BatchResult:
        from batchscope.models.onnx_export import INPUT, OUTPUT
        from batchscope.models.postprocess import best_detections

        torch = self.torch
        n = len(windows)
        try:
            with torch.inference_mode():
                # (n + pad, 9, h, w) uint8: the padding's results are dropped
                x = padded(channels_first(self._frames.gather(windows)), pad)
                if self.device.type == "cpu":
                    prep_end = time.perf_counter()
                    out = self._session.run([OUTPUT], {INPUT: x.numpy()})[0]
                    compute_end = time.perf_counter()
                    heatmaps = torch.from_numpy(out[:n, 2])  # shares out's memory
                else:
                    heatmaps, prep_end, compute_end = self._run_bound(x)
                    heatmaps = heatmaps[:n]
                dets = detect(partial(best_detections, method=self.postprocess), heatmaps, windows)
                if not self.draws_detections:
                    dets = [None] * n
        except Exception as exc:
            self._frames.forget()  # the pool may hold half a batch: ship whole windows next
            if "Failed to allocate memory" in str(exc):
                raise DeviceOutOfMemory(n + pad, _first_line(exc)[:120]) from None
            raise
        return BatchResult(dets, prep_end, compute_end, time.perf_counter())

    def _run_bound(self, x: Any) -> tuple[Any, float, float]:
        """Run on the GPU with input and output bound in place; the newest frame's heatmaps."""
        from batchscope.models.onnx_export import INPUT, OUTPUT

        n, _, h, w = x.shape
        out = self.torch.empty((n, 3, h, w), dtype=self._out_dtype, device=self.device)
        self.torch.cuda.synchronize(self.device)  # the frames' copies run on torch's stream
        prep_end = time.perf_counter()
        run_bound(self._session, INPUT, x, OUTPUT, out)
        return out[:, 2], prep_end, time.perf_counter()

    def memory(self) -> dict[str, float]:
        # on CUDA, torch's counters cover the frame pool only; NVML's process figure has all
        return {**super().memory(), **device_memory(self.torch, self.device)}

    def forget_frames(self) -> None:
        self._frames.forget()

    def close(self) -> None:
        self._session = None
        self._frames.release()


def onnx_model(
    checkpoint: str | None,
    precision: str,
    resolution: tuple[int, int],
    lean: bool = False,
    said: Callable[[str], None] = lambda _: None,
) -> tuple[bytes, str, bool]:
    """The ONNX model a run's ``checkpoint`` names: (its bytes, what reports call the
    weights, whether they are trained). An ``.onnx`` file is read as it is; a torch
    checkpoint (or the demo weights, or none: untrained) is exported (seconds, once per
    process; int8: quantized too, ``said`` hears how far). BackendError for a file that
    cannot be read, exported or quantized."""
    if checkpoint and checkpoint.endswith(".onnx"):
        return _read_onnx(checkpoint), f"ONNX file {checkpoint}", True
    path, weights = resolve_weights(checkpoint)
    data = _exported(precision, resolution, path, _stamp(path), lean, said)
    return data, weights, bool(path)


#: the newest exports, by (precision, resolution, checkpoint, stamp, lean)
_EXPORTS: dict[tuple[Any, ...], bytes] = {}
_KEPT_EXPORTS = 4


def _exported(
    precision: str,
    resolution: tuple[int, int],
    checkpoint: str | None,
    stamp: tuple[float, int] | None,
    lean: bool,
    said: Callable[[str], None],
) -> bytes:
    """The export, once per process for each setting (a live change back costs nothing).

    ``stamp`` (the checkpoint's mtime and size) makes a rewritten checkpoint export anew.
    ``said`` hears an int8 model's calibration; it is not part of the key.
    """
    from batchscope.models.onnx_export import ExportError, export_blurball
    from batchscope.models.onnx_quantize import QuantizeError

    key = (precision, resolution, checkpoint, stamp, lean)
    if key in _EXPORTS:
        return _EXPORTS[key]
    try:
        data = export_blurball(precision, resolution, checkpoint, lean, said)
    except (ExportError, QuantizeError) as exc:
        raise BackendError(str(exc)) from None
    except ImportError as exc:  # torch's exporter imports onnxscript (and onnx) on first use
        raise BackendError(
            f"runtime onnxruntime: the ONNX export needs onnxscript and onnx ({exc}); "
            "pip install onnxscript onnx, or give an exported --checkpoint FILE.onnx"
        ) from None
    while len(_EXPORTS) >= _KEPT_EXPORTS:
        _EXPORTS.pop(next(iter(_EXPORTS)))
    _EXPORTS[key] = data
    return data


def _stamp(checkpoint: str | None) -> tuple[float, int] | None:
    if not checkpoint:
        return None
    try:
        st = os.stat(checkpoint)
    except OSError:
        return None  # load_checkpoint says what is wrong with it
    return (st.st_mtime, st.st_size)


def _read_onnx(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise BackendError(f"{path}: cannot read the ONNX file ({exc.strerror})") from None


def _matches(arg: Any, name: str, kind: str, dims: tuple[int, int, int]) -> bool:
    """``arg`` is ``name`` of type ``kind`` with a dynamic batch axis, then ``dims``."""
    shape = list(arg.shape)
    dynamic_batch = len(shape) == 4 and not isinstance(shape[0], int)
    return arg.name == name and arg.type == kind and dynamic_batch and tuple(shape[1:]) == dims


def _dims(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().split("\n")[0] or type(exc).__name__)[:200]
