"""The devices of a run on several devices, as the terminal prints them (the report's
``devices`` entries are :func:`~batchscope.engine.stats.device_entries`')."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_devices(reports: Sequence[dict[str, Any]]) -> str:
    """The devices of each report, one line each: sessions, busy share, mean batch."""
    lines = []
    for r in reports:
        config = r["config"]
        lines.append(f"{config['sessions']} sessions, {r['policy_label']}, router {r['router']}:")
        for d, device in enumerate(r["devices"]):
            sizes = {int(k): n for k, n in device["batch_sizes"].items()}
            batches = sum(sizes.values())
            mean = sum(k * n for k, n in sizes.items()) / batches if batches else 0.0
            lines.append(
                f"  device {d}  {device['device']:<24} {device['sessions']:>4} sessions  "
                f"busy {100 * device['busy']:5.1f}%  mean batch {mean:5.2f}"
            )
    return "\n".join(lines)
