"""What a BatchScope replica and its client agree on, without Ray: the answer's shape, the
clock they compare, the batcher's size."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

#: The batcher's size when a policy has no cap (``all``), and the replica's batcher's when
#: it is built: never reached, as at most one request per session is in flight.
MAX_BATCH_SIZE = 256


@dataclass(frozen=True)
class Served:
    """One window's result as the replica ran it (times on the replica's clock, s)."""

    detection: Any
    batch_id: int
    batch_size: int
    arrived: float  # the request reached the replica
    start: float  # its batch began
    prep_end: float
    compute_end: float
    post_end: float
    device_late: float
    clock: str  # the replica machine's boot id: the same as the client's -> one clock
    pid: int


def boot_id() -> str:
    """This machine's boot id: two processes with the same one share CLOCK_MONOTONIC."""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()
    return f"pid-{os.getpid()}"  # no boot id: never assume a shared clock
