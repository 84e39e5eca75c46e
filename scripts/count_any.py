"""Count `Any` in function signatures (parameter and return annotations) of fanout/, actors/ and pipelines/.

Rerun from the repo root: `.venv/bin/python scripts/count_any.py` (add `-v` for each file's count). A signature
counts each annotation that names `Any` once per occurrence (`dict[str, Any]` is one, `(a: Any) -> Any` two).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGES = ("fanout", "actors", "pipelines")


def _any_in(node: ast.expr | None) -> int:
    if node is None:
        return 0
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return 0
    return sum(1 for n in ast.walk(node)
               if (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any"))


def count_file(path: Path) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    total = 0
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = fn.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                  *([a.kwarg] if a.kwarg else [])]
        total += sum(_any_in(p.annotation) for p in params) + _any_in(fn.returns)
    return total


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    per_pkg: dict[str, int] = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            n = count_file(path)
            per_pkg[pkg] = per_pkg.get(pkg, 0) + n
            if "-v" in argv and n:
                print(f"{n:4d}  {path.relative_to(root)}")
    print("  ".join(f"{pkg}: {n}" for pkg, n in per_pkg.items()), f" total: {sum(per_pkg.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
