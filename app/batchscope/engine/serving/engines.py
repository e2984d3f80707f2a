"""The backend of a serving engine's config (``--backend ray|triton``)."""

from __future__ import annotations

from collections.abc import Callable

from batchscope.config import RunConfig
from batchscope.device.checks import BackendError
from batchscope.engine.serving.base import ServingBackend
from batchscope.profiles.profile import ProfileError, load_profile


def serving_backend(config: RunConfig, progress: Callable[[str], None]) -> ServingBackend:
    """A deployment of ``config`` on its engine; a bad profile or curve is said before the
    engine starts (seconds)."""
    if config.runner == "emulated":
        try:
            load_profile(config.profile or "").curve(config.precision, config.resolution)
        except ProfileError as exc:
            raise BackendError(str(exc)) from None
    if config.serving == "triton":
        from batchscope.engine.serving.triton_backend import TritonBackend

        return TritonBackend(config, progress)
    from batchscope.engine.serving.ray_serve import ray_backend

    return ray_backend(config, progress)
