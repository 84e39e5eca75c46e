"""Layers point one way: base (fanout/) <- actors/ <- pipelines/ <- faces/. Walks every import statement."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANK = {"fanout": 0, "actors": 1, "pipelines": 2, "faces": 3}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def test_no_upward_import():
    bad = []
    for pkg, rank in RANK.items():
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for line, mod in _imports(f):
                top = mod.split(".")[0]
                if top in RANK and RANK[top] > rank:
                    bad.append(f"{f.relative_to(ROOT)}:{line} imports {mod} ({top} is above {pkg})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


RAY_MODULES = {"fanout/ray_runner.py"}  # the runner (fanout/ray_data.py reaches ray.data through it)


def test_only_the_runner_imports_ray():
    bad = []
    for pkg in RANK:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(f.relative_to(ROOT))
            bad += [f"{rel}:{line} imports {mod}" for line, mod in _imports(f)
                    if mod.split(".")[0] == "ray" and rel not in RAY_MODULES]
    assert not bad, "Ray imported outside the runner modules:\n" + "\n".join(bad)
