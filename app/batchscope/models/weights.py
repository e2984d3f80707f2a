"""Load a BlurBall checkpoint safely, or say in one line why it cannot be loaded.

Checkpoints are read with ``weights_only=True``: a file that would need arbitrary
unpickling is refused rather than executed. The one exception is what training
scripts commonly store beside the weights: numpy scalars in the metadata (an
epoch as ``np.int64``, a loss as ``np.float32``); exactly numpy's scalar
constructor and its numeric dtypes are allowed, nothing else. Every failure
surfaces as :class:`CheckpointError`, so callers (CLI, UI) need to handle one
exception type only. torch is imported when a file is read, not with this
module, so the error type costs nothing to import (``batchscope simulate``
never loads torch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from batchscope.config import UNTRAINED
from batchscope.paths import assets_dir

if TYPE_CHECKING:
    from torch import Tensor, nn

_WRAPPER_KEYS = ("model_state_dict", "state_dict")
"""Keys under which training scripts nest the model's state dict."""

_DATA_PARALLEL_PREFIX = "module."
_REFUSED_MARKER = "WeightsUnpickler error:"
"""Where torch's weights_only refusal message states what it refused."""
_SHOWN_NAMES = 3
"""How many offending names an error message lists before summarising the rest."""
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTOCOL = b"\x80"
"""The first bytes of what torch.save writes: a zip archive, or (its legacy format) a pickle."""


DEMO_WEIGHTS = "weights/blurball_synthetic_demo.pt"
"""The demo weights, under assets/: BlurBall trained on the synthetic scene
(``training/train_demo_weights.py``; model card in docs/DEMO_WEIGHTS.md)."""

UNTRAINED_LABEL = "untrained weights: timing only"


def demo_weights() -> Path:
    return assets_dir() / DEMO_WEIGHTS


def resolve_weights(checkpoint: str | None) -> tuple[str | None, str]:
    """(file to load or None, what the status bar and reports call the weights).

    ``checkpoint`` is RunConfig's: None for the demo weights (the default), ``UNTRAINED``
    for PyTorch's initial weights (timing only), else a path.
    """
    if checkpoint == UNTRAINED:
        return None, UNTRAINED_LABEL
    if checkpoint is None:
        demo = demo_weights()
        if not demo.is_file():
            return None, f"{UNTRAINED_LABEL} (the demo weights {DEMO_WEIGHTS} are missing)"
        return str(demo), "demo weights (synthetic scene)"
    return checkpoint, f"checkpoint {checkpoint}"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded into the model; ``str()`` is one line."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = " ".join(reason.split())
        super().__init__(f"cannot load checkpoint {path}: {self.reason}")


def load_checkpoint(model: nn.Module, path: str | Path) -> None:
    """Load the weights in ``path`` into ``model`` with strict key and shape checking.

    Accepts a bare state dict, one nested under ``model_state_dict`` (or ``state_dict``),
    and keys saved from ``DataParallel`` (``module.`` prefix). Raises
    :class:`CheckpointError` for any problem; ``model`` is left untouched in that case.
    """
    path = Path(path)
    state = _state_dict(path, _read(path))
    expected = model.state_dict()
    problems = []
    missing = [k for k in expected if k not in state]
    if missing:
        problems.append(f"{len(missing)} missing keys: {_first_few(missing)}")
    unexpected = [k for k in state if k not in expected]
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected keys: {_first_few(unexpected)}")
    mismatched = [
        f"{k} expected {tuple(v.shape)} got {tuple(state[k].shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    if mismatched:
        problems.append(f"{len(mismatched)} shape mismatches: {_first_few(mismatched)}")
    if problems:
        raise CheckpointError(path, "; ".join(problems))
    try:
        model.load_state_dict(state, strict=True)
    except Exception as error:  # e.g. a dtype that cannot be copied into the parameter
        raise CheckpointError(path, f"{type(error).__name__}: {error}") from error


def _read(path: Path) -> object:
    if not path.exists():
        raise CheckpointError(path, "file not found")
    if not path.is_file():
        raise CheckpointError(path, "not a file")
    if path.stat().st_size == 0:
        raise CheckpointError(path, "file is empty")
    import torch

    try:
        with torch.serialization.safe_globals(_numpy_metadata_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types; all mean an unreadable file
        message = str(error)
        detail = _first_sentence(message.split(_REFUSED_MARKER, 1)[-1])
        if not _starts_like_torch_save(path):  # an image, a text: the unpickler says nothing
            reason = (
                "not a torch checkpoint (torch.save writes a zip archive, or a pickle in its "
                "legacy format; this file is neither)"
            )
        elif _REFUSED_MARKER in message and "Unsupported operand" in detail:
            # a plain (non-torch) pickle: the unpickler met an opcode it does not read
            reason = "not a torch checkpoint: a plain pickle, refused by weights_only loading"
        elif _REFUSED_MARKER in message:
            reason = f"holds objects other than tensors, refused by weights_only loading ({detail})"
        else:
            reason = f"not a torch checkpoint or corrupt ({type(error).__name__}: {detail})"
        raise CheckpointError(path, reason) from error


def _starts_like_torch_save(path: Path) -> bool:
    """Whether the file starts as torch.save's files do: a zip archive or a pickle (its
    protocol opcode), so that its failure to load is worth torch's own words."""
    with path.open("rb") as fh:
        return fh.read(4).startswith((_ZIP_MAGIC, _PICKLE_PROTOCOL))


def _numpy_metadata_globals() -> list[Any]:
    """numpy's scalar constructor and its numeric dtypes: what np.int64(3) unpickles from."""
    import numpy as np

    try:
        from numpy._core.multiarray import scalar
    except ImportError:  # numpy < 2: the same function under its old module name
        from numpy.core.multiarray import scalar  # type: ignore[no-redef]
    kinds = (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
    return [scalar, np.dtype, *(type(np.dtype(k)) for k in kinds)]


def _state_dict(path: Path, loaded: object) -> dict[str, Tensor]:
    """Unwrap the nesting and ``module.`` prefix, and check it is a dict of tensors."""
    from torch import Tensor

    if isinstance(loaded, Mapping):
        for key in _WRAPPER_KEYS:
            if key in loaded:
                loaded = loaded[key]
                break
    if not isinstance(loaded, Mapping):
        raise CheckpointError(path, f"not a dict of tensors (found {type(loaded).__name__})")
    bad = [str(k) for k, v in loaded.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if bad:
        raise CheckpointError(
            path, f"not a dict of tensors ({len(bad)} non-tensor entries: {_first_few(bad)})"
        )
    return {k.removeprefix(_DATA_PARALLEL_PREFIX): v for k, v in loaded.items()}


def _first_few(names: Iterable[str]) -> str:
    names = list(names)
    shown = ", ".join(names[:_SHOWN_NAMES])
    rest = len(names) - _SHOWN_NAMES
    return f"{shown} (+{rest} more)" if rest > 0 else shown


def _first_sentence(text: str) -> str:
    """First non-empty line of a (often multi-paragraph) torch error, up to its first period."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0].split(". ")[0] if lines else ""
