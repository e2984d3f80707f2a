"""The backend of a serving engine's config (``--backend ray|triton``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from batchscope.config import RunConfig
from batchscope.device.checks import BackendError
from batchscope.engine.serving.base import ServingBackend
from batchscope.profiles.profile import ProfileError, load_profile

#: The engines that can form the batches (RunConfig.serving; "inprocess": BatchScope's
#: worker), as the app's Engine list and its Capacity tab's Verify on name them.
ENGINE_LABELS = {
    "inprocess": "BatchScope's worker",
    "ray": "Ray Serve",
    "triton": "Triton server",
}


def serving_backend(config: RunConfig, progress: Callable[[str], None]) -> ServingBackend:
    """A deployment of ``config`` on its engine; a bad profile or curve is said before the
    engine starts (seconds)."""
    if config.runner == "emulated":
        try:
            load_profile(config.profile or "").curve(
                config.precision, config.resolution, config.runtime
            )
        except ProfileError as exc:
            raise BackendError(str(exc)) from None
    if config.serving == "triton":
        from batchscope.engine.serving.triton_backend import TritonBackend

        return TritonBackend(config, progress)
    from batchscope.engine.serving.ray_serve import ray_backend

    return ray_backend(config, progress)


def engine_availability() -> dict[str, str | None]:
    """Each engine that can serve (``plan --verify --on``): None when it can here, else
    why not (one line, with what to do). Quick: Ray is looked for, not imported (seconds)."""
    from batchscope.engine.serving.ray_serve import RAY_MISSING
    from batchscope.engine.serving.triton_server import find_triton

    try:
        find_triton()
        triton = None
    except BackendError as exc:
        triton = str(exc)
    ray = None if importlib.util.find_spec("ray") else RAY_MISSING
    return {"inprocess": None, "ray": ray, "triton": triton}
