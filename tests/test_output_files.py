"""Outputs are ordinary files: made with the mode every other output has (issue 44)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from batchscope.models.onnx_export import write_onnx


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_the_onnx_file_has_the_mode_of_any_other_output(tmp_path: Path, mask: int) -> None:
    """export-onnx wrote model.onnx 0600 (mkstemp's private mode) where every other
    output is 0666 less the umask, as ``open()`` makes it."""
    with umask(mask):
        model = write_onnx(b"bytes of a model", tmp_path / "model.onnx")
        assert os.umask(mask) == mask  # reading the umask put it back as it was
        other = tmp_path / "report.json"
        other.write_text("{}")
    assert stat.S_IMODE(model.stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(model.stat().st_mode) == stat.S_IMODE(other.stat().st_mode)
    assert model.read_bytes() == b"bytes of a model"
