"""The processes and sockets a test started: what a serving engine's tests check by PID."""

from __future__ import annotations

import os
from pathlib import Path


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
