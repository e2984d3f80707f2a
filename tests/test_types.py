"""The headless core's types check: mypy, with ``[tool.mypy]`` in pyproject.toml, exits 0.

What it checks (engine, sim, models, profiles, device, scene and the top-level
modules below ``ui``) and what it leaves out (``ui/``, ``cli/``) is said in
pyproject.toml and docs/ARCHITECTURE.md. mypy's cache (``.mypy_cache/``) makes a
second run take a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_headless_core_type_checks() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
