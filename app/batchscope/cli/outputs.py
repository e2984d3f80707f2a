"""Where a command writes its results, checked before it starts any work.

Why: `run --json` into a missing or read-only folder used to be refused only after the
whole run, so the run was lost (issue 44). A path is checked by making (and removing) a
probe file where the output will go: permission bits alone say nothing when running as
root, and a read-only mount has writable bits.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from batchscope.cli.args import CliError


def check_file(flag: str, target: str | None, make_folder: bool = False) -> None:
    """CliError naming ``flag`` unless a file can be written at ``target`` (None and
    ``-``, stdout, pass). ``make_folder``: the command makes a missing folder (as
    ``sweep --out`` does), so the nearest existing folder above must take it."""
    if not target or target == "-":
        return
    path = Path(target)
    where = f"{flag} {target}"
    if path.is_dir():
        raise CliError(f"{where}: is a folder; give a file name")
    folder = path.parent
    if make_folder:
        folder = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise CliError(f"{where}: the folder {folder} {why}")
    if path.exists() and not os.access(path, os.W_OK):
        raise CliError(f"{where}: the file is read-only")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".batchscope-probe-"):
            pass
    except OSError as exc:
        raise CliError(f"{where}: cannot write in {folder} ({exc.strerror})") from None


def write_each(writes: Sequence[Callable[[], None]]) -> list[str]:
    """Call every write, one failing not stopping the others (a full disk may take the
    small JSON but not the HTML); the failures' one-line messages."""
    failed = []
    for write in writes:
        try:
            write()
        except CliError as exc:
            failed.append(str(exc))
    return failed
