"""Every number in a device profile is checked when it is read (issue 44, item 1).

JSON as Python reads it also holds ``NaN`` and ``Infinity``; a NaN passed every ``<``
test of the validation, then `simulate` and `plan` died with an IndexError and `run`
reported 0 fps. Now each is one line naming the file and the field, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchscope.cli import main
from batchscope.profiles.profile import ProfileError, load_profile

LAPTOP = Path(__file__).parents[1] / "assets/profiles/laptop-8gb.json"


def _laptop_with(tmp_path: Path, change) -> Path:
    """laptop-8gb with ``change(data)`` applied, written as Python's json writes NaN."""
    data = json.loads(LAPTOP.read_text())
    change(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return path


def _set_point(index: int, key: str, value: object):
    def change(data: dict) -> None:
        data["curves"][0]["points"][index][key] = value

    return change


def _set_top(key: str, value: object):
    def change(data: dict) -> None:
        data[key] = value

    return change


BAD = {
    "nan-ms": (_set_point(1, "ms", float("nan")), "curves[0].points[1].ms"),
    "inf-ms": (_set_point(5, "ms", float("inf")), "curves[0].points[5].ms"),
    "minus-inf-ms": (_set_point(0, "ms", float("-inf")), "curves[0].points[0].ms"),
    "zero-ms": (_set_point(0, "ms", 0), "curves[0].points[0].ms"),
    "nan-peak": (_set_point(2, "peak_mb", float("nan")), "curves[0].points[2].peak_mb"),
    "negative-peak": (_set_point(2, "peak_mb", -1.0), "curves[0].points[2].peak_mb"),
    "text-peak": (_set_point(2, "peak_mb", "12"), "curves[0].points[2].peak_mb"),
    "bool-batch": (_set_point(0, "batch", True), "curves[0].points[0].batch"),
    "nan-memory": (_set_top("memory_total_mb", float("nan")), "memory_total_mb"),
    "zero-memory": (_set_top("memory_total_mb", 0), "memory_total_mb"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_every_number_is_finite_and_positive(tmp_path: Path, case: str) -> None:
    change, field = BAD[case]
    path = _laptop_with(tmp_path, change)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert str(path) in str(exc.value) and field in str(exc.value)


def test_zero_peak_memory_is_a_reading(tmp_path: Path) -> None:
    """A CPU point's RSS may not rise at all: 0 MB is kept, not refused."""
    path = _laptop_with(tmp_path, _set_point(0, "peak_mb", 0.0))
    assert load_profile(path).curves[0].points[0].peak_mb == 0.0


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--sessions", "4", "--duration", "2"],
        ["plan", "--fps", "30", "--p99-ms", "50"],
        ["run", "--backend", "emulated", "--sessions", "2", "--duration", "1", "synthetic"],
    ],
    ids=["simulate", "plan", "run"],
)
def test_a_nan_in_a_curve_is_one_line_exit_2(tmp_path: Path, capsys, command: list[str]) -> None:
    path = _laptop_with(tmp_path, _set_point(1, "ms", float("nan")))
    argv = [*command, "--profile", str(path), "--precision", "fp16", "--resolution", "512x288"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in captured.err, captured.err
    assert str(path) in errors[0] and "curves[0].points[1].ms" in errors[0]
