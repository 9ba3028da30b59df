"""The package's shape: no import cycles (type-only and function-level imports
count), no module over 500 lines, and the import contracts of
docs/architecture.md (pyproject.toml, ``lint-imports`` in ``make lint``),
shown to fail on a violation."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "logstrand"
LINES_MAX = 500
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module ``source`` imports, wherever the import statement is."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for mod, path in files.items():
        imports = _imports(path.read_text(), mod, is_package=path.name == "__init__.py")
        targets = {t for t in imports if t in files and t != mod}
        if path.name == "__init__.py":  # a package exposing its own modules
            targets = {t for t in targets if not t.startswith(mod + ".")}
        # Going through a package's __init__ is how packages expose names.
        graph[mod] = {t for t in targets if files[t].name != "__init__.py"}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_sees_type_only_imports() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _cycles(graph) == [["a", "b"]]
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .b import X\n"
        "def f():\n    from ..y import z\n"
    )
    assert {"logstrand.x.b", "logstrand.y.z"} <= _imports(source, "logstrand.x.a")


def test_no_module_is_over_500_lines() -> None:
    sizes = {_module(p): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {m: n for m, n in sizes.items() if n > LINES_MAX} == {}


def _lint_imports(cwd: Path, package_parent: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_the_import_contracts_hold_and_catch_a_violation(tmp_path: Path) -> None:
    assert _lint_imports(ROOT, ROOT).returncode == 0
    # The same contracts over a copy of the package in which a pure core
    # imports trio, and the client imports LogsDB: both contracts break.
    shutil.copytree(PACKAGE, tmp_path / "logstrand", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    records = tmp_path / "logstrand" / "records.py"
    records.write_text(records.read_text() + "\nimport trio  # noqa\n")
    admin = tmp_path / "logstrand" / "client" / "_admin.py"
    admin.write_text(admin.read_text() + "\nfrom ..logsdb import LogsDB  # noqa\n")
    done = _lint_imports(tmp_path, tmp_path)
    assert done.returncode != 0, done.stdout
    assert "Pure cores import no trio" in done.stdout
    assert "logstrand.records -> trio" in done.stdout
    assert "The client never imports storage or LogsDB BROKEN" in done.stdout


def test_the_house_rules_hold_and_catch_a_breach(tmp_path: Path) -> None:
    """``tools/house.py`` (in ``make lint``): no long function, no raw LSN shift."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import house  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert house.breaches(PACKAGE) == []
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "types.py").write_text("def lsn_epoch(lsn):\n    return lsn >> 32\n")
    body = "".join(f"    x = {i}\n" for i in range(house.FUNCTION_LINES_MAX))
    (pkg / "bad.py").write_text(
        f"def long():\n{body}\n\ndef epoch(lsn):\n    return lsn >> 32\n\n"
        "def fine(h):\n    return h >> 32  # not an LSN\n"
    )
    found = house.breaches(pkg)
    assert len(found) == 2, found
    assert "long is" in found[0]
    assert "raw 32-bit shift" in found[1]
