"""The dashboard's first config: the last-used settings (QSettings) or the demo default.

The demo default is the real model on the first CUDA GPU (fp16, 512×288),
or, without one, the study's laptop GPU replayed from its profile, with 4
sessions batching all waiting windows over the bundled sample videos.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

from batchscope.config import (
    CONTROL_FIELDS,
    DEFAULT_RESOLUTION,
    ConfigError,
    RunConfig,
    parse_resolution,
)
from batchscope.urls import is_stream

#: RunConfig fields the dashboard remembers between launches.
NO_CUDA_NOTE = (
    "No CUDA GPU: emulating laptop-8gb. For the CPU and the real model, use the Device list"
)


def demo_config(sources: Sequence[str], cuda: bool) -> RunConfig:
    device = (
        {"backend": "torch", "device": "cuda:0", "profile": None}
        if cuda
        else {"backend": "emulated", "device": "cpu", "profile": "laptop-8gb"}
    )
    return RunConfig(
        sources=tuple(sources),
        sessions=4,
        policy="all",
        precision="fp16",
        resolution=DEFAULT_RESOLUTION,
        skip_bad_sources=True,
        **device,
    )


def check_available(config: RunConfig) -> None:
    """Raise (ConfigError, ProfileError, BackendError) if this machine cannot run ``config``."""
    if config.backend == "emulated":
        from batchscope.profiles.profile import load_profile

        load_profile(config.profile or "").curve(
            config.precision, config.resolution, config.runtime
        )
    else:
        from batchscope.device.checks import check_device

        check_device(config.device)


def initial_config(
    settings: QSettings | None, cli_sources: Sequence[str], cuda: bool
) -> tuple[RunConfig, str | None]:
    """(config, a note for the status bar or None)."""
    from batchscope.device.checks import BackendError
    from batchscope.engine.roster import default_sources
    from batchscope.profiles.profile import ProfileError

    saved_sources = _existing(_load_list(settings, "sources")) if settings else []
    sources = tuple(cli_sources) or tuple(saved_sources) or default_sources()
    demo = demo_config(sources, cuda)
    default_note = None if cuda else NO_CUDA_NOTE
    saved = _load_controls(settings) if settings else {}
    if not saved:
        return demo, default_note
    try:
        config = demo.with_changes(**saved)
        check_available(config)
    except (ConfigError, ProfileError, BackendError, TypeError, ValueError) as exc:
        return demo, f"Last settings not usable ({exc}); using the demo defaults. " + (
            default_note or ""
        )
    if not cuda and config.backend == "emulated":
        return config, NO_CUDA_NOTE.replace("laptop-8gb", str(config.profile))
    return config, None


def on_engine(
    config: RunConfig, note: str | None, engine: str | None, ray_address: str | None = None
) -> tuple[RunConfig, str | None]:
    """``config`` served by ``engine`` (``gui --backend ray|triton``; None: as it is): the
    device stays what runs a batch. A setting the engine cannot hold (Triton and the
    adaptive policy, say) falls back to the demo's batching, said in the note; ConfigError
    when even that cannot be served."""
    if engine is None:
        return config, note
    changes = {"backend": engine, "ray_address": ray_address}
    if config.runner == "emulated" and not config.profile:
        changes["profile"] = demo_config(config.sources, False).profile
    try:
        return config.with_changes(**changes), note
    except ConfigError as exc:
        demo = demo_config(config.sources, False)
        fallback = config.with_changes(
            **changes, **{k: getattr(demo, k) for k in ("policy", "max_batch", "max_delay_ms")}
        )
        why = f"{engine}: {exc.field} {exc.value!r}: {exc.reason}"
        return fallback, f"{why}; batching as the demo's"


def save_config(settings: QSettings, config: RunConfig) -> None:
    controls = {k: getattr(config, k) for k in CONTROL_FIELDS}
    controls["resolution"] = list(config.resolution)
    settings.setValue("controls", json.dumps(controls))
    settings.setValue("sources", json.dumps(list(config.sources)))


def _load_controls(settings: QSettings) -> dict[str, Any]:
    try:
        data = json.loads(str(settings.value("controls", "") or "{}"))
    except json.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    out = {k: v for k, v in data.items() if k in CONTROL_FIELDS}
    if "resolution" in out:
        try:
            out["resolution"] = parse_resolution(tuple(out["resolution"]))
        except (ConfigError, TypeError, ValueError):
            out.pop("resolution")
    return out


def _load_list(settings: QSettings, key: str) -> list[str]:
    try:
        data = json.loads(str(settings.value(key, "") or "[]"))
    except json.JSONDecodeError:
        return []
    return [str(v) for v in data] if isinstance(data, list) else []


def _existing(specs: list[str]) -> list[str]:
    """Saved sources that can still be opened: files that still exist, cameras, synthetic,
    network streams (whether a stream answers is told when it opens)."""
    return [
        s
        for s in specs
        if s.startswith(("camera:", "synthetic")) or is_stream(s) or Path(s).is_file()
    ]
