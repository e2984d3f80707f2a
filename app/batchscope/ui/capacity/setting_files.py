"""File → Export setting… and File → Open settings…: setting.py's files, from and into the app.

The formats are :mod:`batchscope.setting`'s (``policy.json`` and Triton's
``config.pbtxt``, as ``batchscope plan --export`` writes them); this module only
says which config goes out and which live changes a file asks for. No dialogs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from batchscope.config import RunConfig
from batchscope.device.checks import BackendError
from batchscope.engine.serving.triton_backend import export_runner, write_repository
from batchscope.profiles.profile import ProfileError, load_profile
from batchscope.setting import ONNX_ON_CPU, SettingError, load_setting, save_setting, triton_config

POLICY_FILE, TRITON_FILE = "policy.json", "config.pbtxt"
TRITON_REPOSITORY = "triton"  # the Python-backend model repository (model.onnx to be added)


def export_setting(
    config: RunConfig,
    folder: str | Path,
    planned: dict[str, Any] | None = None,
    settled_cap: int | None = None,
) -> Path:
    """Write ``config``'s setting as policy.json and config.pbtxt into ``folder``, and
    Triton's Python-backend model repository in ``folder/triton`` (as ``plan --export``).

    ``planned`` (what the planner measured for it) goes into policy.json, and
    ``settled_cap`` (an adaptive setting's cap in the simulation) into config.pbtxt,
    served by a CPU instance when the setting was measured on a CPU (:func:`_on_cpu`). The
    repository serves what ``plan --export``'s does (``triton_backend.export_runner``): an
    emulated run's curve unless its profile was measured on a CPU; a real run's model.
    Raises SettingError, one line naming the folder, when it cannot be written.
    """
    folder = Path(folder)
    if config.fps is None:
        raise SettingError(
            f"{folder}: fps: a deployment needs a frame rate (this run plays each source at "
            "its own); choose one under Controls first"
        )
    triton = triton_config(config, settled_cap, cpu=_on_cpu(config, folder))
    runner = ONNX_ON_CPU
    if config.backend == "emulated":
        try:
            runner = export_runner(config, load_profile(config.profile or ""))
        except (ProfileError, BackendError) as exc:
            raise SettingError(f"{folder}: profile: {exc}") from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        save_setting(config, folder / POLICY_FILE, planned)
        (folder / TRITON_FILE).write_text(triton)
        write_repository(folder / TRITON_REPOSITORY, config, None, settled_cap, runner)
    except OSError as exc:
        raise SettingError(f"{folder}: cannot write ({exc.strerror or exc})") from None
    return folder


def _on_cpu(config: RunConfig, folder: Path) -> bool:
    """Whether ``config``'s figures come from a CPU: the device it runs on, or on the
    emulated backend the device its profile was measured on."""
    if config.backend != "emulated":
        return config.device == "cpu"
    try:
        return load_profile(config.profile or "").on_cpu
    except ProfileError as exc:
        raise SettingError(f"{folder}: profile: {exc}") from None


def changes_from_file(path: str | Path, current: RunConfig) -> dict[str, Any]:
    """The live changes that put ``current`` on the setting in ``path`` (a policy.json).

    Off the emulated backend the file's ``profile`` is left out: the real device is
    measured, not replayed. Raises SettingError (one line: the file, the field).
    """
    new = load_setting(path, base=current)
    changes = {name: value for name, (_, value) in current.diff(new).items()}
    if current.backend != "emulated":
        changes.pop("profile", None)
    return changes
