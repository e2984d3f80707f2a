"""A watchdog that takes the processes a serving engine started down with BatchScope.

Why: Ray ties its GCS server and raylet to the process that started them, but the agents
the raylet starts (dashboard agent, runtime-env agent: each listens on a port) outlive a
BatchScope killed with SIGKILL by about a minute (they try to report the raylet's death
to the GCS that died with it, with a fixed 60 s timeout). The reaper is a child process
that reads PIDs from a pipe; when the pipe closes — BatchScope closed it, or died, even
by SIGKILL — it kills every listed process that is still the one listed (same start
time), with the processes below them, removes the temporary folders listed (a Triton
server's workspace and model repository: only BatchScope's own, named ``batchscope-…``),
and ends. By PID, never by name.

    python -m batchscope.engine.serving.reaper      # reads "PID START" and "rm PATH" lines
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REMOVE = "rm "  # a line naming a folder to remove
FOLDER_PREFIX = "batchscope-"  # the only folders the reaper removes


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


def descendants(*roots: int) -> set[int]:
    """Every live process below the ``roots`` (one walk of /proc; zombies left out)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class Reaper:
    """The parent's side: ``watch(pids)`` hands processes over; ``close()`` (or our death)
    has them killed if they are still running."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "batchscope.engine.serving.reaper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.pid = self._proc.pid
        self.watched: set[int] = set()

    def watch(self, pids: set[int]) -> None:
        assert self._proc.stdin is not None, "made with a pipe"
        for pid in sorted(pids - self.watched - {self.pid}):
            started = start_time(pid)
            if started is not None:
                self._proc.stdin.write(f"{pid} {started}\n")
                self.watched.add(pid)
        self._proc.stdin.flush()

    def remove(self, folder: Path) -> None:
        """Have ``folder`` (a temporary one of BatchScope's, ``batchscope-…``) removed when
        the pipe closes, after the kills."""
        assert self._proc.stdin is not None, "made with a pipe"
        self._proc.stdin.write(f"{REMOVE}{folder}\n")
        self._proc.stdin.flush()

    def close(self, timeout: float = 5.0) -> None:
        """Close the pipe: what is still running of the watched processes is killed."""
        assert self._proc.stdin is not None, "made with a pipe"
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl+C in the terminal is the parent's
    watched: dict[int, int] = {}
    folders: list[Path] = []
    for line in sys.stdin:  # until the pipe closes: closed by the parent, or its death
        if line.startswith(REMOVE):
            folders.append(Path(line[len(REMOVE) :].rstrip("\n")))
            continue
        with contextlib.suppress(ValueError):
            pid, started = (int(x) for x in line.split())
            watched[pid] = started
    alive = [pid for pid, started in watched.items() if start_time(pid) == started]  # not reused
    # and what they started since they were handed over (a process being born then)
    for pid in sorted(descendants(*alive)) + alive:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for folder in folders:
        if folder.name.startswith(FOLDER_PREFIX):  # never a folder of the user's
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
