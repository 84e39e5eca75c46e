"""Imports a fanout process pays for but does not use, deferred until first use.

`import lancedb` runs `lance_namespace_urllib3_client/__init__.py`, which imports the REST namespace client's
nine generated API modules (~0.65 s of CPU here, half of lancedb's import) although only its `models`
submodule is read at import time and the API classes serve only a LanceDB namespace server. Every process
that opens an index pays it: the CLI, the MCP server, and each Ray Data CPU actor at job start (bench
notes: "Query cost outside the models", fixed cost). `defer_package` puts the package in `sys.modules`
without running its `__init__`; its submodules import as usual, and the first attribute asked of the
package itself (e.g. `from lance_namespace_urllib3_client import ApiClient`) runs the real `__init__`
then, so nothing changes for code that uses it. Python's `importlib.util.LazyLoader` cannot do this: it
loads the module when the import system reads `__path__` to import a submodule.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types

DEFERRED = ("lance_namespace_urllib3_client",)
_lock = threading.Lock()


class _Deferred(types.ModuleType):
    def __getattr__(self, attr: str):
        if attr.startswith("__"):  # the import system's probes (__file__, __all__, ...) never load it
            raise AttributeError(attr)
        with _lock:
            if type(self) is _Deferred:
                self.__class__ = types.ModuleType
                self.__spec__.loader.exec_module(self)
        return getattr(self, attr)


def defer_package(name: str) -> bool:
    """Register package `name` unexecuted (its `__init__` runs on first attribute access); False when it is
    already imported or not installed."""
    if name in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _Deferred
    sys.modules[name] = module
    return True


def defer_unused() -> None:
    for name in DEFERRED:
        defer_package(name)
