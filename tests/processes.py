"""What the serving engines' tests share: a started engine, and the processes and sockets
it started, checked by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.contract import SMALL_EMULATED, wait_for

from batchscope.config import RunConfig
from batchscope.engine.engine import Engine
from batchscope.engine.serving.reaper import descendants, start_time


def listening(pids: set[int]) -> list[tuple[int, str]]:
    """(pid, local address) of every TCP socket the ``pids`` listen on (/proc/net/tcp*)."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # TCP_LISTEN
                found.append((inodes[cols[9]], cols[1]))
    return found


def on_loopback(address: str) -> bool:
    """Whether a /proc/net/tcp* local address (hex IP:port) is a loopback one."""
    ip = address.split(":")[0]
    if len(ip) == 8:  # IPv4, little-endian: 127.x.x.x ends in 7F
        return ip.endswith("7F")
    # IPv6: ::1, or ::ffff:127.x.x.x (a v4-mapped loopback)
    return ip == "00000000000000000000000001000000" or (
        ip[:24] == "0000000000000000FFFF0000" and ip.endswith("7F")
    )


def run_then_kill(
    engine: str, marker: str, start_s: float, tmp: Path | None = None
) -> tuple[set[int], str]:
    """``batchscope run --backend ENGINE`` in a child, SIGKILLed once one of its processes'
    command lines has ``marker`` (the engine's model process is up): the processes below it
    then, and what it said on stderr. ``tmp``: the child's temporary folder (TMPDIR)."""
    cmd = [sys.executable, "-m", "batchscope", "run", "synthetic", "--backend", engine,
           "--sessions", "2", "--resolution", "256x144", "--duration", "600"]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp is not None else None
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:

        def up() -> bool:
            for pid in descendants(proc.pid):
                try:
                    if marker in Path(f"/proc/{pid}/cmdline").read_text():
                        return True
                except OSError:
                    continue
            return False

        assert wait_for(up, start_s), f"no process with {marker!r} started"
        started = descendants(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.stderr is not None
    return started, proc.stderr.read().decode(errors="replace")


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (the same processes: start times checked)."""
    return {p for p in pids if start_time(p) is not None}


def served(engine: Engine) -> int:
    """Windows delivered so far, over every session."""
    return sum(s.delivered for s in engine.snapshot().sessions)


def started_engine(backend: str, start_s: float) -> Engine:
    """Six synthetic sessions on ``backend`` (dynamic, cap 3, 20 ms), started and serving."""
    config = RunConfig(
        **{**SMALL_EMULATED, "backend": backend},
        sessions=6,
        policy="dynamic",
        max_batch=3,
        max_delay_ms=20.0,
    )
    engine = Engine(config)
    engine.open()
    engine.start()
    assert wait_for(lambda: served(engine) > 60, start_s), f"no results from {backend}"
    return engine
