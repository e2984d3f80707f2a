"""The architecture as a test: the import contracts in pyproject.toml hold.

`lint-imports` checks the layers (cli > ui > sim > engine > profiles > models |
device | scene | experiment > config | paths), that the headless core never
imports Qt, and that no package's children import each other in a cycle. It reads this tree's
``app/`` (not whatever ``batchscope`` the environment has installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_import_contracts_are_kept() -> None:
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: install the dev extra"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "app")}
    proc = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
