"""Every error fanout raises on purpose is a `FanoutError`, declared in fanout/errors.py (none elsewhere),
exported by `fanout` and listed in docs/api.md; the old import paths of the store's and the config's errors
still work."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import fanout
import fanout.errors

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = (ROOT / "fanout", ROOT / "actors", ROOT / "pipelines")
# error classes declared outside fanout/errors.py: none (issue 50)
ELSEWHERE: dict[str, str] = {}
# where the store's and the config's errors were declared until issue 50; tests and users import them from there
OLD_HOMES = {"ConfigError": ("fanout.config", "fanout.config.sections"),
             "IndexStateError": ("fanout.store.integrity",), "IndexMissing": ("fanout.store.integrity",),
             "StorageError": ("fanout.store.storage",), "DiskFull": ("fanout.store.storage",),
             "CollectionBusy": ("fanout.store.locks",)}


def _declared() -> list[type]:
    return [c for _, c in inspect.getmembers(fanout.errors, inspect.isclass) if c.__module__ == "fanout.errors"]


def _api_doc_errors() -> set[str]:
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8").split("## Errors", 1)[1]
    return {line.split("`")[1] for line in doc.splitlines() if line.startswith("| `")}


def test_every_error_class_is_a_fanout_error_exported_and_documented():
    declared = _declared()
    assert len(declared) >= 10
    documented = _api_doc_errors()
    for cls in declared:
        assert issubclass(cls, fanout.FanoutError), cls
        assert cls.__name__ in fanout.__all__ and getattr(fanout, cls.__name__) is cls, cls
        assert cls.__name__ in documented, f"{cls.__name__} is not in docs/api.md's Errors table"


def test_errors_declared_elsewhere_are_fanout_errors_exported_and_documented():
    documented = _api_doc_errors()
    for name, path in ELSEWHERE.items():
        cls = getattr(fanout, name)
        assert issubclass(cls, fanout.FanoutError) and name in fanout.__all__ and name in documented, name
        assert cls.__module__.replace(".", "/") + ".py" == path, (name, cls.__module__)


def test_old_import_paths_give_the_same_classes():
    for name, modules in OLD_HOMES.items():
        for module in modules:
            assert getattr(importlib.import_module(module), name) is getattr(fanout.errors, name), (module, name)


def test_the_errors_need_no_import_of_the_api():
    """`fanout.IndexMissing` (any error) is there after a plain `import fanout`: fanout/errors.py is cheap."""
    code = ("import inspect, sys, fanout, fanout.errors as E; names = [n for n, c in inspect.getmembers(E, "
            "inspect.isclass) if c.__module__ == 'fanout.errors']; "
            "print(all(getattr(fanout, n) is getattr(E, n) for n in names), 'fanout.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"], out


def test_no_error_class_is_declared_outside_fanout_errors():
    """A class whose base is one of fanout's errors lives in fanout/errors.py (or is one of ELSEWHERE)."""
    family = {c.__name__ for c in _declared()} | set(ELSEWHERE)
    bad = []
    for folder in FOLDERS:
        for f in sorted(folder.rglob("*.py")):
            if f == ROOT / "fanout" / "errors.py":
                continue
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                    if bases & family and node.name not in ELSEWHERE:
                        bad.append(f"{f.relative_to(ROOT)}: class {node.name}")
    assert not bad, "declare these in fanout/errors.py (and export them):\n" + "\n".join(bad)
