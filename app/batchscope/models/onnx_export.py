"""BlurBall as an ONNX model: uint8 frames in, logits out, normalisation inside the graph.

The contract the ONNX Runtime backend, ``batchscope export-onnx`` and a Triton model
config rely on:

- input ``frames``: uint8 ``[batch, 9, H, W]``, three consecutive RGB frames, oldest
  first (channels R, G, B of frame 0, then of frame 1, then of frame 2);
- output ``heatmaps``: ``[batch, 3, H, W]`` logits, one per frame, float32 for an fp32
  export and float16 for fp16 (sigmoid is post-processing, as in the torch model);
  float32 for int8, the fp32 export statically quantized (``models.onnx_quantize``);
- the batch axis is dynamic; H and W are fixed at export (one file per resolution, as
  the torch backend builds one model per resolution; docs/BENCHMARKS.md has the
  measurement); opset :data:`OPSET`.

The ImageNet normalisation is the graph's first two nodes (Cast, Mul, Add), computed
with :func:`~batchscope.models.normalise.normalisation`, the very numbers the torch
backend uses on the device: the pre-processing is the same by construction, and a
quarter of the bytes cross to the runtime (uint8, not float32).

The exporter is torch's dynamo-based one (``torch.onnx.export(dynamo=True)``, the
default since torch 2.9), which needs ``onnxscript``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from batchscope.config import EXPORT_PRECISIONS
from batchscope.models.blurball import BlurBall
from batchscope.models.normalise import normalisation

INPUT = "frames"
OUTPUT = "heatmaps"
OPSET = 18
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


class ExportError(ValueError):
    """An export that cannot be made or written; ``str()`` is one line naming the input."""


class NormalisedBlurBall(nn.Module):
    """BlurBall behind its input normalisation: uint8 [B, 9, H, W] → logits [B, 3, H, W]."""

    scale: torch.Tensor  # buffers (register_buffer), typed for nn.Module's __getattr__
    shift: torch.Tensor

    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.model = model
        scale, shift = normalisation(dtype)
        self.register_buffer("scale", scale)
        self.register_buffer("shift", shift)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.model(frames.to(self.scale.dtype) * self.scale + self.shift)


def export_blurball(
    precision: str,
    resolution: tuple[int, int],
    checkpoint: str | None = None,
    lean: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> bytes:
    """The serialised ONNX model of BlurBall (with ``checkpoint``'s weights, if given).

    Raises ExportError for a precision the export cannot have, CheckpointError for a
    bad checkpoint, QuantizeError for an int8 model ONNX Runtime cannot quantize. Takes a
    few seconds (about 7 s on a 2-core CPU): the graph is traced by torch.export, then
    translated and optimised. int8: the fp32 export quantized, read from the user's cache
    when it was made before (else tens of seconds; ``progress`` hears how far).
    """
    model = exportable(precision, checkpoint, lean)
    if precision == "int8":
        from batchscope.models.onnx_quantize import int8_model

        return int8_model(
            checkpoint,
            resolution,
            lean,
            lambda: export_model(model, resolution),
            write_onnx,
            progress,
        )
    return export_model(model, resolution)


def exportable(
    precision: str, checkpoint: str | None = None, lean: bool = False
) -> NormalisedBlurBall:
    """BlurBall at ``precision`` behind its normalisation, in eval mode: what is exported
    (for int8, the fp32 model it is quantized from)."""
    from batchscope.models.weights import load_checkpoint

    if precision not in EXPORT_PRECISIONS:
        raise ExportError(
            f"precision {precision}: an ONNX export is {' or '.join(EXPORT_PRECISIONS)}"
        )
    # int8: the same function in the operators ONNX Runtime's uint8 kernels run fast
    model = BlurBall(lean=lean, for_int8=precision == "int8").eval()
    if checkpoint:
        load_checkpoint(model, checkpoint)  # CheckpointError, one line
    dtype = DTYPES.get(precision, torch.float32)
    return NormalisedBlurBall(model, dtype).to(dtype).eval()


def export_model(model: NormalisedBlurBall, resolution: tuple[int, int]) -> bytes:
    """``model`` as a serialised ONNX model with a dynamic batch axis at ``resolution``."""
    w, h = resolution
    example = torch.zeros((2, 9, h, w), dtype=torch.uint8)
    # the exporter logs one line per missing torchvision op and warns about its own
    # deprecations; none of it concerns BlurBall
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                model,
                (example,),
                input_names=[INPUT],
                output_names=[OUTPUT],
                dynamic_shapes={"frames": {0: torch.export.Dim("batch", min=1, max=1024)}},
                opset_version=OPSET,
                dynamo=True,
                verbose=False,
            )
    finally:
        quiet.setLevel(level)
    assert program is not None, "torch.onnx.export returns its ONNXProgram when dynamo=True"
    return program.model_proto.SerializeToString()


def check_writable(path: str | Path) -> Path:
    """``path`` if a file can be written there, else ExportError naming the folder.

    Asked before the export, so a bad ``--out`` costs nothing. A probe file is made and
    removed: permission bits alone say nothing when running as root.
    """
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise ExportError(f"{path}: {folder} {why}")
    if path.is_dir():
        raise ExportError(f"{path}: is a folder; give a file name such as model.onnx")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".batchscope-probe-"):
            pass
    except OSError as exc:
        raise ExportError(f"{path}: cannot write in {folder} ({exc.strerror})") from None
    return path


def _umask() -> int:
    """The process's umask (reading it means setting it: put straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_onnx(data: bytes, path: str | Path) -> Path:
    """Write ``data`` to ``path`` whole or not at all (a temporary file, then a rename)."""
    path = check_writable(path)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        # mkstemp makes a private file (0600); the model is an output like any other
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise ExportError(f"{path}: cannot write the model ({exc.strerror})") from None
    return path
