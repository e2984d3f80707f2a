"""``BATCHSCOPE_STARTUP_LOG=PATH``: when the app's start-up milestones happened.

Why it exists (issue 16, "start-up speed"): ``benchmarks/startup.py`` launches the real
app and needs to know, from outside, when its window first painted and when the first
result reached the plots. With the variable set, the app appends one line per milestone
to PATH, each once per process::

    process_start 1764581234.120
    window_painted 1764581234.431
    first_result 1764581236.208

The number is the Unix time in seconds. ``process_start`` is when the process was
created (Linux: ``/proc/self/stat``, to the kernel's 10 ms tick); where that cannot be
read, when this module was first imported. ``window_painted``: the first paint of the
first window. ``first_result``: the first snapshot with a delivered result drawn into
the plots (on screen at the next repaint). Without the variable nothing is written.
"""

from __future__ import annotations

import os
import sys
import time

ENV = "BATCHSCOPE_STARTUP_LOG"
MILESTONES = ("process_start", "window_painted", "first_result")

_IMPORTED = time.time()
_noted: set[str] = set()


def note(milestone: str) -> None:
    """Append ``milestone`` with the time now, once per process, if the variable names a
    file (``process_start`` first, with the process's own start time)."""
    path = os.environ.get(ENV)
    if not path or milestone in _noted:
        return
    lines = []
    if not _noted:
        lines.append(f"process_start {process_start():.3f}\n")
        _noted.add("process_start")
    if milestone not in _noted:
        lines.append(f"{milestone} {time.time():.3f}\n")
        _noted.add(milestone)
    with open(path, "a", encoding="utf-8") as fh:
        fh.writelines(lines)


def process_start() -> float:
    """When this process was created (Unix time, s); where unknown, when this module loaded."""
    if not sys.platform.startswith("linux"):
        return _IMPORTED
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            # the command name (field 2) may hold spaces: count the fields after its ")"
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED
    return time.time() - age
