"""The tree shows the architecture: small folders, no prefix groups, imports one way."""

from __future__ import annotations

import ast
import os
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("actors", "runtime")
MAX_MODULES = 16

# Lower layers never import higher ones. Spark sits on the broker's client; the command
# line sits on everything.
LAYERS = {
    "actors": 0,
    "runtime.errors": 1,
    "runtime.core": 2,
    "runtime.publisher": 3,
    "runtime.broker": 4,
    "runtime.redis": 4,
    "runtime.spark": 5,
    "runtime.cli": 6,
}
# Convenience methods of the core that build a higher layer's object when called, through
# an import inside the method (never at module load).
LAZY_UPWARD = {
    ("runtime.core._topic", "runtime.publisher"),  # Topic.publisher()
    ("runtime.core._bus", "runtime.broker"),  # Bus.serve()
    ("runtime.core._bus", "runtime.redis"),  # Bus.create_topic(..., backend="redis")
}


def _folders() -> list[Path]:
    return [Path(d) for p in PACKAGES for d, _, _ in os.walk(ROOT / p) if "__pycache__" not in d]


def _modules() -> list[tuple[str, Path]]:
    found = []
    for folder in _folders():
        for path in sorted(folder.glob("*.py")):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found.append((dotted.removesuffix(".__init__"), path))
    return found


def _layer(module: str) -> int | None:
    matches = [name for name in LAYERS if module == name or module.startswith(name + ".")]
    return LAYERS[max(matches, key=len)] if matches else None


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level) for every import of ``actors``/``runtime``."""
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    # Imports under ``if TYPE_CHECKING:`` name types for annotations and never run.
    typing_only = {id(node) for block in tree.body if isinstance(block, ast.If)
                   and ast.unparse(block.test).endswith("TYPE_CHECKING") for node in ast.walk(block)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(name, id(node) in top_level) for name in names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
    return [(name, top) for name, top in found if name.split(".")[0] in PACKAGES]


def test_no_folder_holds_more_than_sixteen_modules() -> None:
    crowded = {
        str(folder.relative_to(ROOT)): count
        for folder in _folders()
        if (count := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES
    }

    assert crowded == {}


def test_no_folder_groups_three_modules_by_a_name_prefix() -> None:
    groups = []
    for folder in _folders():
        stems = [p.stem.lstrip("_") for p in folder.glob("*.py") if p.name != "__init__.py"]
        prefixes = Counter(stem.split("_")[0] for stem in stems if "_" in stem)
        groups += [f"{folder.relative_to(ROOT)}/_{prefix}_*" for prefix, n in prefixes.items()
                   if n + (prefix in stems) >= 3]

    assert groups == []


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: str(v).rsplit("/", 1)[-1])
def test_imports_run_one_way(module: str, path: Path) -> None:
    own = _layer(module)
    upward = []
    for name, top_level in _imports(path):
        if name == "runtime" and module.startswith("runtime") and module != "runtime":
            upward.append(f"{name} (the package face)")
        elif name.startswith("actors._") and module.startswith("runtime"):
            upward.append(f"{name} (actors' private modules)")
        elif (theirs := _layer(name)) is not None and own is not None and theirs > own:
            lazy_ok = not top_level and any(
                module == low and name.startswith(high) for low, high in LAZY_UPWARD)
            if not lazy_ok:
                upward.append(name)

    assert upward == []
