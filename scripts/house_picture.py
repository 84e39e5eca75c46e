"""The picture of the house: each package's modules and lines, the import graph between packages, and the import
circles between modules, read from the source with `ast` (nothing is imported).

    .venv/bin/python scripts/house_picture.py [--root .]

Imports are of three kinds: at module level (run at import), under `if TYPE_CHECKING:` (read by type checkers only)
and inside functions (run on first call). A circle is a strongly connected set of modules; it is listed once for the
module-level imports alone, once with the TYPE_CHECKING ones added, and once with every import.
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path

# the repo's folders that install under the one import name (pyproject's package-dir)
MAPPED = {"actors": "fanout.actors", "pipelines": "fanout.pipelines"}


def _modules(root: Path) -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for top, pkg in [("fanout", "fanout"), *MAPPED.items()]:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root / top).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, mods: dict[str, Path]) -> list[tuple[str, str]]:
    """(target module, kind) for each import of a fanout module in `path`; kind: top, typing or local."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    found: list[tuple[str, str]] = []

    def resolve(mod: str | None, level: int, names: list[str]) -> list[str]:
        if level:
            base = name.split(".") if is_pkg else name.split(".")[:-1]
            base = base[: len(base) - (level - 1)]
            mod = ".".join(base + ([mod] if mod else []))
        if not mod or not mod.startswith("fanout"):
            return []
        out = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in mods]
        return out or ([mod] if mod in mods else [])

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.body:
                    visit_stmt(sub, "typing")
                for sub in child.orelse:
                    visit_stmt(sub, kind)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "local")
            else:
                visit_stmt(child, kind)

    def visit_stmt(node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.extend((t, kind) for t in resolve(alias.name, 0, []))
        elif isinstance(node, ast.ImportFrom):
            found.extend((t, kind) for t in resolve(node.module, node.level, [a.name for a in node.names]))
        else:
            visit(node, kind)

    visit(tree, "top")
    return [(t, k) for t, k in found if t != name]


def _package(mod: str) -> str:
    parts = mod.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else mod


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
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

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=".", type=Path)
    args = ap.parse_args(argv)
    import sys

    sys.setrecursionlimit(10_000)
    mods = _modules(args.root)
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in mods.items()}
    per_pkg: dict[str, list[str]] = defaultdict(list)
    for m in mods:
        per_pkg[_package(m)].append(m)
    print("| package | modules | lines | largest module (lines) |\n|---|---|---|---|")
    for pkg in sorted(per_pkg):
        ms = per_pkg[pkg]
        big = max(ms, key=lambda m: lines[m])
        print(f"| {pkg} | {len(ms)} | {sum(lines[m] for m in ms)} | {big.rsplit('.', 1)[-1]} ({lines[big]}) |")
    print(f"| total | {len(mods)} | {sum(lines.values())} | |")

    imports = {m: _imports(m, p, mods) for m, p in mods.items()}
    pkg_edges: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for m, targets in imports.items():
        for t, kind in targets:
            a, b = _package(m), _package(t)
            if a != b:
                pkg_edges[(a, b)][kind] += 1
    print("\nImports between packages (module-level / TYPE_CHECKING / in functions):\n")
    for (a, b), kinds in sorted(pkg_edges.items()):
        print(f"  {a} -> {b}: {kinds.get('top', 0)} / {kinds.get('typing', 0)} / {kinds.get('local', 0)}")

    for label, kinds in [("module-level imports", {"top"}), ("+ TYPE_CHECKING imports", {"top", "typing"}),
                         ("+ imports in functions", {"top", "typing", "local"})]:
        edges = {m: {t for t, k in ts if k in kinds} for m, ts in imports.items()}
        circles = _circles(edges)
        print(f"\nCircles between modules, {label}: {len(circles)}")
        for c in circles:
            print("  " + " <-> ".join(c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
