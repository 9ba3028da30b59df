"""The house rules that ruff, mypy and import-linter do not check
(``make lint`` runs this; docs/architecture.md says why):

- no function over ``FUNCTION_LINES_MAX`` lines (split it at its seams);
- no module over ``MODULE_LINES_MAX`` lines (give its parts their own rooms);
- no new import of another package's private module (``..pkg._mod``):
  across packages, through the package's ``__init__``; the ones there are
  today are listed in ``tools/private_imports.txt``, which may only shrink
  (an entry no longer in the code is a breach too, so that it is struck);
- LSN arithmetic only through ``logstrand/types.py`` (``compose_lsn``,
  ``lsn_epoch``, ``lsn_esn``, ``next_epoch_lsn``): no raw ``>> 32`` or
  ``<< 32`` anywhere else (a line that shifts something else says so with
  ``# not an LSN``).

Usage: python tools/house.py [PACKAGE_DIR]   (exit 1 and a line per breach)
       python tools/house.py --table         (docs/architecture.md's floors)

``--table`` prints the floors of the import-linter ``layers`` contract in
pyproject.toml as a markdown table, with what each package imports from the
others (grimp's graph of the code as it is): docs/architecture.md holds
this output between its ``floors`` markers, and a test says when it differs.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

FUNCTION_LINES_MAX = 70
MODULE_LINES_MAX = 500
LSN_HOME = "types.py"
_SHIFT = re.compile(r"(>>|<<)\s*32\b")


def breaches(package: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > MODULE_LINES_MAX:
            out.append(f"{path}: {len(lines)} lines (at most {MODULE_LINES_MAX})")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > FUNCTION_LINES_MAX:
                    out.append(
                        f"{path}:{node.lineno}: {node.name} is {n} lines "
                        f"(at most {FUNCTION_LINES_MAX})"
                    )
        if path.name == LSN_HOME and path.parent == package:
            continue
        for i, line in enumerate(lines, 1):
            code = line.split("#", 1)[0]
            if _SHIFT.search(code) and "# not an LSN" not in line:
                out.append(f"{path}:{i}: a raw 32-bit shift: use the LSN helpers of types.py")
    return out


BASELINE = Path(__file__).with_name("private_imports.txt")


def private_imports(package: Path) -> set[str]:
    """``importer -> imported`` for every import of another package's
    private module (``from ..pkg._mod import x``, ``from ..pkg import _mod``,
    type-only and function-level imports included)."""
    out: set[str] = set()
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        here = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        home = rel.parts[1] if len(rel.parts) > 2 else ""
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or (node.module is None and not node.level):
                continue
            if node.level:
                # A package's __init__ is its own level: ``..`` climbs one less.
                up = node.level - (rel.name == "__init__")
                base = here.split(".")[: len(here.split(".")) - up]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            parts = target.split(".")
            if parts[0] != package.name or len(parts) < 2 or parts[1] == home:
                continue
            names = [parts[2:]] if len(parts) > 2 else [[a.name] for a in node.names]
            for tail in names:
                if any(p.startswith("_") for p in tail):
                    out.add(f"{here} -> {'.'.join(parts[:2] + tail)}")
    return out


def private_breaches(package: Path) -> list[str]:
    known = {
        line for line in BASELINE.read_text().splitlines() if line and not line.startswith("#")
    }
    found = private_imports(package)
    new = [f"{x}: another package's private module (use its __init__)" for x in found - known]
    gone = [f"{x}: no longer in the code: strike it from {BASELINE.name}" for x in known - found]
    return sorted(new) + sorted(gone)


def floors(root: Path) -> list[list[str]]:
    """The ``layers`` contract's floors, top first, each its packages."""
    import tomllib

    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [[p.strip() for p in re.split(r"[|:]", floor)] for floor in contract["layers"]]


def table(root: Path) -> str:
    """The floors as a markdown table (see the module docstring)."""
    import grimp

    graph = grimp.build_graph("logstrand")
    levels = floors(root)
    top = [p for floor in levels for p in floor]

    def package(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else ""

    uses: dict[str, set[str]] = {p: set() for p in top}
    for module in graph.modules:
        here = package(module)
        for imported in graph.find_modules_directly_imported_by(module):
            there = package(imported)
            if imported.startswith("logstrand.") and here in uses and there != here:
                uses[here].add(there)
    rows = ["| floor | package | imports from logstrand's |", "|---|---|---|"]
    for n, floor in enumerate(levels):
        for p in floor:
            used = ", ".join(f"`{u}`" for u in sorted(uses[p], key=top.index)) or "nothing"
            rows.append(f"| {len(levels) - n} | `{p}` | {used} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    if sys.argv[1:] == ["--table"]:
        print(table(Path(__file__).resolve().parents[1]), end="")
        return 0
    package = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("logstrand")
    found = breaches(package) + private_breaches(package)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
