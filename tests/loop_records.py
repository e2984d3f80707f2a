"""The simulator loop's records on a fixed set of random runs, as digests: what
``tests/test_fast_loop.py`` holds the compiled loop to (``tests/data/loop_records.json``).

The file was made by the general Python loop (``play_devices(..., fast=False)`` on
eb72c41, before that loop was removed), and the compiled loop gave every digest: the
loop plays the rules that loop played, to the bit. A change that means to change a
rule's records makes the file again from the compiled loop and says why:

    PYTHONPATH=app:. python tests/loop_records.py --dump
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

FILE = Path(__file__).with_name("data") / "loop_records.json"


def _publications(played: Any) -> list[tuple[list[int], int]]:
    """Each schedule's windows that opened a mailbox and the windows published, by the
    run's end (a late host publishes some past it; none of them is counted)."""
    out = []
    for f in played.clock.schedules:
        by_end = int(np.searchsorted(f.times_array, played.t_end, side="right"))
        out.append(([k for k in f.opened if k < by_end], min(f.published, by_end)))
    return out


def _curve_rows(played: Any) -> set[tuple[int, int]]:
    """Device 0's (curve, rows) of its batches (None: every batch on the first curve)."""
    if played.curve_rows is not None:
        return set(played.curve_rows)
    return {(0, b.size + b.padded) for b in played.measured if b.device == 0}


def records(played: Any) -> tuple[Any, ...]:
    """What two loops must agree on: every batch, window, drop, opening, overwrite,
    segment, the sessions on each device, the curves device 0 ran and the shapes run."""
    segments = [] if played.changes is None else played.changes.segments.all()
    return (
        [tuple(b) for b in played.measured],
        (list(played.delivered.arrivals), list(played.delivered.sessions)),
        list(played.expired),
        played.clock.overwrites().tolist(),
        _publications(played),
        played.pinned,
        played.router,
        sorted(_curve_rows(played)),
        [(s.index, s.start, sorted(s.changes.items())) for s in segments],
        sorted(played.shape_rows),
    )


def digest(played: Any) -> str:
    return hashlib.sha256(repr(records(played)).encode()).hexdigest()[:20]


def expected() -> dict[str, str]:
    return dict(json.loads(FILE.read_text())["digests"])


def main() -> None:
    if sys.argv[1:] != ["--dump"]:
        raise SystemExit(__doc__)
    from tests import test_fast_loop as cases  # the runs: the tests' generators

    digests = {name: digest(play()) for name, play in cases.recorded_runs()}
    FILE.parent.mkdir(exist_ok=True)
    FILE.write_text(json.dumps({"digests": digests}, indent=1) + "\n")
    print(f"{len(digests)} runs' digests written to {FILE}")


if __name__ == "__main__":
    main()
