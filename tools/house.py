"""The house rules that ruff, mypy and import-linter do not check
(``make lint`` runs this; docs/architecture.md says why):

- no function over ``FUNCTION_LINES_MAX`` lines (split it at its seams);
- no module over ``MODULE_LINES_MAX`` lines (give its parts their own rooms);
- LSN arithmetic only through ``logstrand/types.py`` (``compose_lsn``,
  ``lsn_epoch``, ``lsn_esn``, ``next_epoch_lsn``): no raw ``>> 32`` or
  ``<< 32`` anywhere else (a line that shifts something else says so with
  ``# not an LSN``).

Usage: python tools/house.py [PACKAGE_DIR]   (exit 1 and a line per breach)
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


def main() -> int:
    package = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("logstrand")
    found = breaches(package)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
