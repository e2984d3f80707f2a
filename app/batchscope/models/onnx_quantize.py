"""BlurBall's int8 ONNX model: the fp32 export statically quantized for ONNX Runtime's CPU.

How it is made (:func:`quantize`):

- the model is BlurBall's int8 arrangement (``BlurBall(for_int8=True)``: the same function,
  its SE gating and fuse upsampling in operators whose uint8 kernels are fast; at 256x144
  batch 4 it ran 101 ms a batch against 127 ms for the plain graph quantized the same
  way, docs/BENCHMARKS.md);
- the fp32 export (``models.onnx_export``: uint8 frames in, normalisation in the graph)
  is pre-processed by ONNX Runtime (shape inference, BatchNorm folded into the
  convolutions, so each convolution's weights are quantized with their BatchNorm scale);
- ``quantize_static`` in the QDQ format: weights signed int8 **per output channel**
  (the stem's and the fuse layers' channels differ in range by two orders of magnitude:
  one scale per tensor would flatten the small ones), activations unsigned int8 per tensor
  (MinMax); ONNX Runtime fuses each QuantizeLinear→Conv→DequantizeLinear into a
  QLinearConv whose u8×s8 products run as VNNI dot products (``vpdpbusd``) on a CPU that
  has them. Without VNNI the u8×s8 pair may saturate in ``vpmaddubsw``: weights then use
  7 bits (``reduce_range``), the recipe ONNX Runtime documents for AVX2/AVX-512;
- calibration: :data:`CALIBRATION_WINDOWS` windows of the synthetic scene at the model's
  resolution, evenly spaced over the loop of each of seeds :data:`CALIBRATION_SEEDS`
  (16 each; a loop is 20-30 s, one rally): seeds the demo weights never trained on (training used
  10 000 and above) and that ``benchmarks/accuracy.py`` does not score (0, 1), the ball
  in view in most of them and out of view in some, as in a rally.

Made once per checkpoint, resolution and recipe, and kept in the user's cache folder
(:func:`batchscope.paths.user_cache_dir`, ``onnx/``) beside nothing of the repository:
the calibration runs the fp32 model on every calibration window (tens of seconds on two
cores; about four times that at 512x288), so a second start reads the file instead.
Untrained weights (timing only) are PyTorch's random initial ones, different in each
process: their model is made in memory and not kept on disk.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

#: synthetic scene seeds the calibration windows come from (none trained on or scored)
CALIBRATION_SEEDS = (5000, 5001)
#: windows in the calibration set: 16 per seed
CALIBRATION_WINDOWS = 32
#: what a change of the recipe must change in the cache key
RECIPE = (
    "blurball for_int8 arrangement; "
    f"qdq u8 activations minmax, s8 weights per-channel, bn folded; seeds {CALIBRATION_SEEDS} "
    f"evenly spaced, windows {CALIBRATION_WINDOWS}"
)


class QuantizeError(ValueError):
    """An int8 model that cannot be made; ``str()`` is one line."""


def calibration_windows(resolution: tuple[int, int]) -> Iterator[np.ndarray]:
    """The calibration set: uint8 windows [1, 9, H, W] (three frames, oldest first) of the
    synthetic scene, each frame fitted into ``resolution`` as a source does (scaled to fit,
    centred on black: the default letterbox; the same as a plain resize at 16:9)."""
    import cv2

    from batchscope.scene.synthetic import SCENE_SIZE, SyntheticScene

    per_seed = CALIBRATION_WINDOWS // len(CALIBRATION_SEEDS)
    w, h = resolution
    scale = min(w / SCENE_SIZE[0], h / SCENE_SIZE[1])
    fw, fh = round(SCENE_SIZE[0] * scale), round(SCENE_SIZE[1] * scale)
    x, y = (w - fw) // 2, (h - fh) // 2
    for seed in CALIBRATION_SEEDS:
        scene = SyntheticScene(*SCENE_SIZE, seed=seed)
        n = scene.period_frames
        for k in range(per_seed):
            i = 2 + k * (n - 2) // per_seed
            window = np.zeros((3, h, w, 3), np.uint8)
            for j in range(3):
                rgb = scene.render(i - 2 + j)[0]
                window[j, y : y + fh, x : x + fw] = cv2.resize(
                    rgb, (fw, fh), interpolation=cv2.INTER_AREA
                )
            yield np.ascontiguousarray(window.transpose(0, 3, 1, 2).reshape(1, 9, h, w))


class _Reader(CalibrationDataReader):
    """The calibration windows as ONNX Runtime's CalibrationDataReader asks for them,
    saying how far the calibration is (each window is one fp32 run of the model)."""

    def __init__(
        self, resolution: tuple[int, int], progress: Callable[[str], None], input_name: str
    ) -> None:
        self._windows = calibration_windows(resolution)
        self._input = input_name
        self._done = 0
        self._progress = progress

    def get_next(self) -> dict[str, np.ndarray] | None:
        window = next(self._windows, None)
        if window is None:
            return None
        self._done += 1
        if self._done % 4 == 1 or self._done == CALIBRATION_WINDOWS:
            self._progress(f"int8: calibrating, window {self._done}/{CALIBRATION_WINDOWS}")
        return {self._input: window}


def quantize(
    fp32: bytes,
    resolution: tuple[int, int],
    progress: Callable[[str], None] = lambda _: None,
    reduce_range: bool | None = None,
) -> bytes:
    """The int8 QDQ model of the fp32 export ``fp32`` (see the module doc)."""
    import logging

    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from batchscope.cpu_features import has_fast_int8

    if reduce_range is None:
        reduce_range = not has_fast_int8()
    import onnx

    graph_input = onnx.load_from_string(fp32).graph.input[0].name  # the export's "frames"
    reader = _Reader(resolution, progress, graph_input)
    quiet = logging.getLogger()  # quantize_static logs each tensor at INFO on the root
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory(prefix="batchscope-int8-") as folder:
            src, pre, out = (Path(folder) / n for n in ("fp32.onnx", "pre.onnx", "int8.onnx"))
            src.write_bytes(fp32)
            progress("int8: folding BatchNorm and inferring shapes")
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
            quantize_static(
                str(pre),
                str(out),
                reader,
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                reduce_range=reduce_range,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                # MinMax keeps each window's per-tensor min and max (ReduceMin/ReduceMax
                # outputs added to the graph), not the activations: little memory at any size
                calibrate_method=CalibrationMethod.MinMax,
            )
            progress("int8: quantized")
            return out.read_bytes()
    except Exception as exc:
        line = (str(exc).strip().split("\n")[0] or type(exc).__name__)[:200]
        raise QuantizeError(
            f"precision int8: ONNX Runtime's quantization failed ({line})"
        ) from None
    finally:
        quiet.setLevel(level)


def cache_path(checkpoint: str, resolution: tuple[int, int], lean: bool) -> Path:
    """Where the int8 model of ``checkpoint`` at ``resolution`` is kept: named by a hash
    of the checkpoint's bytes, the recipe and the versions that make it."""
    import onnxruntime
    import torch

    from batchscope.cpu_features import has_fast_int8
    from batchscope.paths import user_cache_dir

    digest = hashlib.sha256()
    digest.update(Path(checkpoint).read_bytes())
    facts = (RECIPE, resolution, lean, onnxruntime.__version__, torch.__version__)
    digest.update(repr((*facts, not has_fast_int8())).encode())
    w, h = resolution
    name = f"blurball-int8-{w}x{h}{'-lean' if lean else ''}-{digest.hexdigest()[:16]}.onnx"
    return user_cache_dir() / "onnx" / name


def int8_model(
    checkpoint: str | None,
    resolution: tuple[int, int],
    lean: bool,
    export: Callable[[], bytes],
    keep: Callable[[bytes, Path], object],
    progress: Callable[[str], None] = lambda _: None,
) -> bytes:
    """The int8 model of ``checkpoint`` (None: untrained) at ``resolution``: read from the
    cache, else ``export()`` (the fp32 export) quantized, and kept in the cache by
    ``keep(data, path)`` (a whole-or-nothing write) when the weights are a file. A cache
    that cannot be written (OSError or ValueError) costs the next start, not this one."""
    path = cache_path(checkpoint, resolution, lean) if checkpoint else None
    if path is not None and path.is_file():
        progress(f"int8: the quantized model from {path}")
        return path.read_bytes()
    progress("int8: exporting the fp32 model to quantize")
    data = quantize(export(), resolution, progress)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            keep(data, path)
            progress(f"int8: kept in {path}")
        except (OSError, ValueError) as exc:
            progress(f"int8: not kept ({exc})")
    return data
