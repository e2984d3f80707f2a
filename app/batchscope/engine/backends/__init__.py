"""Backends: what runs a batch. The real model (torch or ONNX Runtime) or a replayed curve.

:func:`make_backend` turns a config into one; the rest of the engine sees only
:class:`Backend` (see ``base``).
"""

from __future__ import annotations

from collections.abc import Callable

from batchscope.config import RunConfig
from batchscope.device.checks import BackendError
from batchscope.device.onnx_runtime import runtime_availability
from batchscope.engine.backends.base import (
    Backend,
    BatchInterrupted,
    BatchResult,
    BuildCancelled,
    DeviceOutOfMemory,
)
from batchscope.engine.backends.emulated import EmulatedBackend, sleep_until
from batchscope.engine.backends.onnx_backend import OnnxBackend
from batchscope.engine.backends.torch_backend import TorchBackend
from batchscope.engine.neighbours import Neighbours
from batchscope.profiles.profile import load_profile

__all__ = [
    "Backend",
    "BackendError",
    "BatchInterrupted",
    "BatchResult",
    "BuildCancelled",
    "DeviceOutOfMemory",
    "EmulatedBackend",
    "OnnxBackend",
    "TorchBackend",
    "make_backend",
    "runtime_availability",
    "sleep_until",
]


def make_backend(
    config: RunConfig,
    oom_above: int | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    said: Callable[[str], None] = lambda _: None,
) -> Backend:
    """The backend a config asks for; BackendError/ProfileError/CheckpointError if it cannot.

    ``cancelled()`` is asked between warm-up runs; once true the build raises BuildCancelled.
    ``said`` hears what a slow build is doing (an int8 model's calibration).
    """
    if config.backend == "emulated":
        return EmulatedBackend(
            load_profile(config.profile or ""),
            config.precision,
            config.resolution,
            oom_above=oom_above,
            runtime=config.runtime,
            neighbours=Neighbours(config.neighbours, config.neighbour_duty, config.seed),
        )
    if config.runtime == "onnxruntime":
        return OnnxBackend(
            config.device,
            config.precision,
            config.resolution,
            checkpoint=config.checkpoint,
            lean=config.lean,
            postprocess=config.postprocess,
            cancelled=cancelled,
            said=said,
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
        postprocess=config.postprocess,
        cancelled=cancelled,
    )
