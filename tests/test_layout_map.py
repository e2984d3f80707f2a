"""docs/ARCHITECTURE.md's layout map matches the tree: every package it names exists, and
every package of app/batchscope is named there (a newcomer finds the room in one look)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "app" / "batchscope"


def mapped_packages(text: str) -> set[str]:
    """The packages in the map's code block under ``app/batchscope/``, as dotted paths.

    A line ``<indent>name/  what it owns`` is a package; its depth is its indent in
    steps of two spaces below ``app/batchscope/``.
    """
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    found, parents = set(), []
    inside = False
    for line in block.splitlines():
        if line.startswith("app/batchscope/"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break  # the next top-level folder (assets/, tests/ …)
        m = re.match(r"( +)([a-z_]+)/(\s|$)", line)
        if not inside or not m:
            continue
        depth = len(m.group(1)) // 2 - 1
        parents[depth:] = [m.group(2)]
        found.add(".".join(parents))
    return found


def tree_packages() -> set[str]:
    return {
        ".".join(init.parent.relative_to(PACKAGE).parts)
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE and "__pycache__" not in init.parts
    }


def test_the_layout_map_names_every_package_and_only_those() -> None:
    mapped = mapped_packages((ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    tree = tree_packages()
    assert tree - mapped == set(), "packages missing from docs/ARCHITECTURE.md's map"
    assert mapped - tree == set(), "the map names packages that do not exist"


def test_the_map_reader_sees_nesting() -> None:
    text = "## Layout\n\n```\napp/batchscope/\n  ui/   x\n    bus/   y\n  engine/  z\nassets/\n```"
    assert mapped_packages(text) == {"ui", "ui.bus", "engine"}
