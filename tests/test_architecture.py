"""The architecture as a test: the import contracts in pyproject.toml hold.

`lint-imports` checks the layers (cli > ui > sim > engine > profiles > models |
device | scene | experiment > config | paths), that the headless core never
imports Qt, and that no package's children import each other in a cycle. It reads this tree's
``app/`` (not whatever ``batchscope`` the environment has installed).

Inside ``ui/`` each feature is a package (napari's ``_qt``: one per widget family): a
feature's modules import each other directly, anything else imports what the feature's
``__init__`` exports (``from batchscope.ui.capacity import CapacityView``), which
lint-imports cannot tell apart, so it is read here with ``ast``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "app" / "batchscope"
UI = PACKAGE / "ui"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_import_contracts_are_kept() -> None:
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: install the dev extra"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "app")}
    proc = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Whether the dotted ``name`` is a module or package of this tree (not a class, say)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(source: str, module: str, package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every module an import in ``source`` names, function-local too.

    ``from a.b import c`` names ``a.b``, and ``a.b.c`` too where that is a module;
    relative imports are resolved against ``module`` (a package's when ``package``).
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + package]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [
                (node.lineno, f"{base}.{alias.name}")
                for alias in node.names
                if is_module(f"{base}.{alias.name}")
            ]
    return found


def reaches_into_a_feature(importer: str, imported: str) -> str | None:
    """The feature package whose insides ``imported`` is, if ``importer`` is outside it."""
    parts = imported.split(".")
    if len(parts) < 4 or parts[:2] != ["batchscope", "ui"]:
        return None
    feature = ".".join(parts[:3])
    if not (UI / parts[2] / "__init__.py").is_file():
        return None  # a shared leaf (ui/theme.py …): anyone imports it
    inside = importer == feature or importer.startswith(feature + ".")
    return None if inside else feature


def test_ui_features_are_entered_through_their_package() -> None:
    features = sorted(init.parent.name for init in UI.glob("*/__init__.py"))
    assert len(features) >= 7, features  # the checker looks at the tree it should
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        source = path.read_text(encoding="utf-8")
        for line, imported in imported_modules(source, importer, path.name == "__init__.py"):
            feature = reaches_into_a_feature(importer, imported)
            if feature:
                where = path.relative_to(ROOT)
                wrong.append(f"{where}:{line} imports {imported}: import it from {feature}")
    assert wrong == [], "\n".join(wrong)


def test_the_feature_check_sees_every_kind_of_import() -> None:
    source = (
        "from batchscope.ui.capacity import CapacityView\n"
        "from batchscope.ui.theme import Look\n"
        "def later():\n"
        "    from batchscope.ui.capacity.view import CapacityView\n"
        "    import batchscope.ui.plots.bus\n"
        "    from batchscope.ui.capacity import planning\n"
        "    from .theme import Look\n"
        "    from ..capacity import view\n"
    )
    deep = [
        (line, imported)
        for line, imported in imported_modules(source, "batchscope.ui.controls.panel")
        if reaches_into_a_feature("batchscope.ui.controls.panel", imported)
    ]
    assert deep == [
        (4, "batchscope.ui.capacity.view"),
        (5, "batchscope.ui.plots.bus"),
        (6, "batchscope.ui.capacity.planning"),
        (8, "batchscope.ui.capacity.view"),
    ]
    importer = "batchscope.ui.capacity.presenter"  # its own feature's modules are its business
    deep = [m for _, m in imported_modules(source, importer) if reaches_into_a_feature(importer, m)]
    assert deep == ["batchscope.ui.plots.bus"]


def test_no_ui_module_is_named_as_a_module_of_another_layer() -> None:
    """``engine/segment_rows.py`` and ``ui/segment_rows.py`` were twins: a name says one room."""

    def names(paths: list[Path]) -> set[str]:
        return {p.parent.name if p.name == "__init__.py" else p.stem for p in paths}

    everything = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    ui = [p for p in everything if UI in p.parents and p != UI / "__init__.py"]
    others = [p for p in everything if UI not in p.parents and p.parent != PACKAGE]
    others += [p for p in everything if p.parent == PACKAGE and p.name != "__init__.py"]
    assert names(ui) & names(others) == set()


def test_the_cli_reports_without_the_ui() -> None:
    """One report path: run, simulate, plan and compare build their reports in the core
    (engine/report) and write HTML and plots through render/; only `gui` opens the UI."""
    wrong = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        if path.name == "gui.py":
            continue
        source = path.read_text(encoding="utf-8")
        for line, imported in imported_modules(source, module_name(path)):
            if imported == "batchscope.ui" or imported.startswith("batchscope.ui."):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert wrong == [], "\n".join(wrong)


def test_no_module_name_stands_in_two_packages_of_the_tree() -> None:
    """A name says one room: `cli/run.py` and `engine/report/run.py`, `cli/sweep.py` and
    `profiles/sweep.py` were twins across layers (within one package tree it is allowed:
    ui's features each have a `view.py`)."""
    homes: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts or path.parent == PACKAGE:
            continue
        name = path.parent.name if path.name == "__init__.py" else path.stem
        top = path.relative_to(PACKAGE).parts[0]
        homes.setdefault(name, set()).add(top)
    twins = {name: sorted(tops) for name, tops in homes.items() if len(tops) > 1}
    assert twins == {}
