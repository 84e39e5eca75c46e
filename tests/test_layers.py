"""Layers point one way, module by module, across the whole `fanout` package (the repo's actors/ and pipelines/
are fanout.actors and fanout.pipelines). Walks every import statement.

    base: errors, config, schemas < models, filters, explain, text < store < io, exec, agent_fields
    < fanout.actors < fanout.pipelines < fanout.api, fanout.ray < the faces (cli, serve, evaluation, gaps)
    < the front door (fanout/__init__.py's lazy re-exports, fanout/__main__.py)
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"fanout": ROOT / "fanout", "fanout.actors": ROOT / "actors", "fanout.pipelines": ROOT / "pipelines"}
RANK = {  # the longest matching prefix wins
    "fanout.errors": 0, "fanout.defaults": 0, "fanout.config": 0, "fanout.schemas": 0,
    "fanout.models": 1, "fanout.safe_text": 1, "fanout.filters": 1, "fanout.explain": 1, "fanout.text": 1,
    "fanout.store": 2,
    "fanout.io": 3, "fanout.exec": 3, "fanout.agent_fields": 3,
    "fanout.actors": 4,
    "fanout.pipelines": 5,
    "fanout.api": 6, "fanout.ray": 6, "fanout.gaps": 6,
    "fanout.cli": 7, "fanout.serve": 7, "fanout.evaluation": 7,
    "fanout": 8, "fanout.__main__": 8,
}


def rank(mod: str) -> int:
    parts = mod.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in RANK:
            return RANK[".".join(parts[:i])]
    raise AssertionError(f"{mod} has no layer: add its subpackage to RANK")


def _files() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    mods = {}
    for pkg, folder in PACKAGES.items():
        for f in sorted(folder.rglob("*.py")):
            rel = f.relative_to(folder).with_suffix("").parts
            mods[".".join((pkg, *rel)).removesuffix(".__init__")] = f
    return mods


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per worker for all the tests here (read only)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def test_no_upward_import():
    bad = []
    for mod, f in _files().items():
        for line, other in _imports(f):
            if other.split(".")[0] in ("fanout", "actors", "pipelines", "faces") and rank(other) > rank(mod):
                bad.append(f"{f.relative_to(ROOT)}:{line} imports {other} (above {mod})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_only_fanout_imports_its_own_names():
    """One import name: no module imports the old top-level names (actors, pipelines, faces)."""
    bad = [f"{f.relative_to(ROOT)}:{line} imports {other}" for mod, f in _files().items()
           for line, other in _imports(f) if other.split(".")[0] in ("actors", "pipelines", "faces")]
    assert not bad, "\n".join(bad)


RAY_MODULES = {"fanout/exec/ray_runner.py"}  # the runner (fanout/exec/ray_data.py reaches ray.data through it)


def test_only_the_runner_imports_ray():
    bad = []
    for f in _files().values():
        rel = str(f.relative_to(ROOT))
        bad += [f"{rel}:{line} imports {mod}" for line, mod in _imports(f)
                if mod.split(".")[0] == "ray" and rel not in RAY_MODULES]
    assert not bad, "Ray imported outside the runner modules:\n" + "\n".join(bad)


def _runtime_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules a file imports at run time (function-level imports too; `if TYPE_CHECKING:`
    blocks left out: they never run)."""
    tree = _tree(path)
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
            for b in node.body for n in ast.walk(b)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        out |= {n for n in names if n in known}
    return out


def _modules() -> dict[str, Path]:
    return _files()


def test_no_import_circle():
    """No two modules reach each other through imports (a circle hides which one is the base)."""
    mods = _modules()
    graph = {m: _runtime_imports(f, set(mods)) - {m} for m, f in mods.items()}
    circles = []
    for start, first in graph.items():  # a path back to `start` from its own imports
        seen, todo = set(), [(n, [start, n]) for n in first]
        while todo:
            node, path = todo.pop()
            if node == start:
                circles.append(" -> ".join(path))
                break
            if node in seen:
                continue
            seen.add(node)
            todo += [(n, [*path, n]) for n in graph[node]]
    assert not circles, "import circles:\n" + "\n".join(sorted(circles))


COMPOSITIONS = {"fanout.pipelines.search", "fanout.pipelines.index", "fanout.pipelines.batch", "fanout.pipelines.precompute"}


def test_no_stage_imports_another_stage():
    """A stage module (one that defines a stage class: a class with `__call__`) imports shared helper modules,
    never another stage's module; compositions list stages and may import them all."""
    mods = _modules()
    stages = {m for m, f in mods.items() if m.startswith("fanout.pipelines.") and m not in COMPOSITIONS and any(
        isinstance(n, ast.ClassDef) and any(isinstance(b, ast.FunctionDef) and b.name == "__call__" for b in n.body)
        for n in ast.walk(_tree(f)))}
    bad = [f"{m} imports {o}" for m in sorted(stages) for o in sorted(_runtime_imports(mods[m], stages) - {m})]
    assert not bad, "stage modules importing stage modules:\n" + "\n".join(bad)


def test_a_model_stage_holds_no_index():
    """Constructing a model stage (what a model actor does: the embedder's, the expander's, the reranker's)
    imports no lancedb: the caches and the index are read in the CPU pool (LookupVectors, LookupExpansions,
    LookupRerank), so a process that holds a model does not pay for the index."""
    import subprocess
    import sys

    code = ("import sys; from fanout.config import load_config; cfg = load_config('fake'); "
            "from fanout.pipelines.retrieve_variants import EmbedVariants; EmbedVariants(cfg); "
            "from fanout.pipelines.expand_queries import ExpandQueries; ExpandQueries(cfg); "
            "from fanout.pipelines.rerank_candidates import RerankCandidates; RerankCandidates(cfg); "
            "print(sorted(m for m in ('lancedb', 'pandas', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.slow
def test_lancedb_import_defers_the_namespace_client():
    """`import fanout` first (as every fanout process does) leaves the REST namespace client's API modules
    unimported by `import lancedb` (fanout/exec/imports.py), and they still load when asked for."""
    import subprocess
    import sys
    import tempfile

    code = ("import sys, fanout, lancedb; db = lancedb.connect(sys.argv[1]); db.create_table('t', [{'a': 1}]); "
            "print('lance_namespace_urllib3_client.api' in sys.modules, db.open_table('t').count_rows()); "
            "from lance_namespace_urllib3_client import ApiClient; "
            "print('lance_namespace_urllib3_client.api' in sys.modules, ApiClient.__name__)")
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", code, d], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "1", "True", "ApiClient"], out.stdout + out.stderr


def _all_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules a file names in any import: module level, in functions and under TYPE_CHECKING."""
    out = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        out |= {n for n in names if n in known}
    return out


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    m = stack.pop()
                    on.discard(m)
                    group.add(m)
                    if m == node:
                        break
                if len(group) > 1:
                    out.append(frozenset(group))
    return out


def test_no_import_circle_even_for_type_checkers():
    """No module reaches itself through imports, `if TYPE_CHECKING:` blocks included: a circle a type checker
    follows still means two modules are one idea split, or one of them names the other's class where it
    needs only a few of its arrays (the store's full-text and vector searches take the pinned dataset, the row
    keys and their settings, not the Collection)."""
    mods = _modules()
    graph = {m: _all_imports(f, set(mods)) - {m} for m, f in mods.items()}
    found = set(_circles(graph))
    new = sorted(" <-> ".join(sorted(c)) for c in found)
    assert not new, "import circles (TYPE_CHECKING imports included):\n" + "\n".join(new)
