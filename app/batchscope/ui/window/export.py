"""Export: the numbers as a JSON report, the HTML report, the segment table, the plots as a
PNG (no dialogs)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QWidget

from batchscope.engine.engine import Engine
from batchscope.engine.report.rows import segments_csv, segments_json
from batchscope.engine.report.run_report import experiment_block
from batchscope.experiment import Experiment
from batchscope.render.page import ReportError, write_html_report
from batchscope.sim.prediction import add_predictions


class ExportError(OSError):
    """A file that could not be written; ``str()`` names it and says why."""


#: an experiment played in the run, and its segments (first, last; last None: playing)
Played = tuple[Experiment, tuple[int, int | None]]


def name_experiments(report: dict[str, Any], played: Sequence[Played]) -> dict[str, Any]:
    """``report`` naming every experiment played with the segments it played.

    ``experiments``: each one's block (``experiment_block``) with ``"segments":
    [first, last]``, in the order played. ``experiment`` (what titles the report,
    as ``run --experiment`` has it) only when one experiment played the whole run:
    a longer run is not titled by its last experiment, and its segment 0 keeps its
    own caption.
    """
    n = len(report.get("segments") or [])
    blocks = []
    for experiment, (first, last) in played:
        last = n - 1 if last is None else last
        blocks.append({**experiment_block(experiment), "segments": [first, last]})
    if blocks:
        report["experiments"] = blocks
    if len(blocks) == 1 and blocks[0]["segments"] == [0, n - 1]:
        report["experiment"] = blocks[0]
    return report


def export_report(engine: Engine, path: str | Path, played: Sequence[Played] = ()) -> Path:
    """Write ``engine.report()`` (the JSON report schema) to ``path``, naming the
    experiments ``played`` (:func:`name_experiments`)."""
    path = Path(path)
    text = json.dumps(name_experiments(engine.report(), played), indent=2)
    try:
        path.write_text(text + "\n")
    except OSError as exc:
        raise ExportError(f"{path}: cannot write the report ({exc.strerror})") from None
    return path


def html_path(path: str | Path) -> Path:
    """``path`` as the HTML report is written to it (.html added unless .html/.htm)."""
    path = Path(path)
    return path if path.suffix.lower() in (".html", ".htm") else path.with_suffix(".html")


def export_html_report(
    engine: Engine,
    path: str | Path,
    played: Sequence[Played] = (),
    buses: dict | None = None,
) -> Path:
    """Write the HTML report of ``engine.report()`` to ``path`` (.html added).

    Each segment gets the simulator's prediction, as ``run --experiment --report``
    has them, and the report names the experiments ``played`` with their segments
    (:func:`name_experiments`); ``buses`` (segment index -> its last seconds,
    ``Engine.keep_buses``) draw each segment's bus view. Takes a second or more (the
    predictions, the plots): call it off the GUI thread.
    """
    path = html_path(path)
    report = name_experiments(add_predictions(engine.report()), played)
    try:
        return write_html_report(report, path, buses)
    except ReportError as exc:
        raise ExportError(str(exc)) from None


def export_png(widget: QWidget, path: str | Path) -> Path:
    """Save a grab of ``widget`` as PNG."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        path = path.with_suffix(".png")
    if not widget.grab().save(str(path), "PNG"):
        raise ExportError(f"{path}: cannot write the image (folder missing or not writable?)")
    return path


def export_segments(segments: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write the segment table to ``path``: JSON (the report's ``segments``) for a .json
    name, CSV (the table's cells, as ``run --csv`` writes them) for anything else (.csv
    added)."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        text = segments_json(segments)
    else:
        path = path if path.suffix.lower() == ".csv" else path.with_suffix(".csv")
        text = segments_csv(segments)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ExportError(f"{path}: cannot write the segment table ({exc.strerror})") from None
    return path


#: Where Record… opens its folder dialog, under the home folder
RECORDINGS = "BatchScope recordings"


def recordings_folder(home: Path) -> Path:
    """The folder Record… offers: ``home``/``RECORDINGS``, made if missing (a dialog on a
    folder that does not exist opens in its parent with Choose greyed out until one
    clicks elsewhere); ``home`` itself where it cannot be made."""
    folder = home / RECORDINGS
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return home
    return folder
