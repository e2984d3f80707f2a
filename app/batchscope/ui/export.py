"""Export: the current numbers as a JSON report, the plots as a PNG (no dialogs here)."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtWidgets import QWidget

from batchscope.engine.engine import Engine


class ExportError(OSError):
    """A file that could not be written; ``str()`` names it and says why."""


def export_report(engine: Engine, path: str | Path) -> Path:
    """Write ``engine.report()`` (the JSON report schema) to ``path``."""
    path = Path(path)
    text = json.dumps(engine.report(), indent=2)
    try:
        path.write_text(text + "\n")
    except OSError as exc:
        raise ExportError(f"{path}: cannot write the report ({exc.strerror})") from None
    return path


def export_png(widget: QWidget, path: str | Path) -> Path:
    """Save a grab of ``widget`` as PNG."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        path = path.with_suffix(".png")
    if not widget.grab().save(str(path), "PNG"):
        raise ExportError(f"{path}: cannot write the image (folder missing or not writable?)")
    return path
