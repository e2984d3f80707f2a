"""`batchscope profiles`: list built-in and user device profiles with what they cover."""

from __future__ import annotations

import argparse
from typing import Any

from batchscope.config import format_resolution
from batchscope.profiles.profile import DeviceProfile, list_profiles


def add_profile_commands(sub: Any) -> None:
    p = sub.add_parser("profiles", help="list device profiles (built-in and user)")
    p.set_defaults(handler=cmd_profiles)


def describe(profile: DeviceProfile) -> list[str]:
    lines = []
    for c in profile.curves:
        pts = "  ".join(f"b{p.batch} {p.ms:g} ms" for p in c.measured)
        failed = [p for p in c.points if p.ms is None]
        lines.append(f"    {c.precision} {format_resolution(c.resolution):>9}:  {pts}"
                     + (f"  ({len(failed)} failed point(s))" if failed else ""))
    return lines


def cmd_profiles(args: argparse.Namespace) -> int:
    for kind, item in list_profiles():
        if isinstance(item, DeviceProfile):
            mem = f", {item.memory_total_mb:g} MB" if item.memory_total_mb else ""
            print(f"{item.name}  [{kind}]  {item.device}{mem}  ({item.path})")
            print("\n".join(describe(item)))
        else:
            print(f"[{kind}] unusable: {item}")
    return 0
