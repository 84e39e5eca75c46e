"""Imports a fanout process pays for but does not use, deferred until first use; and imports it will need,
warmed in a thread while it waits for something else (`warm_in_thread`).

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

import contextlib
import importlib
import importlib.util
import logging
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
                self.__class__ = types.ModuleType  # type: ignore[assignment]  # the module turns plain as it loads
                spec = self.__spec__
                assert spec is not None and spec.loader is not None  # defer_package made it from a found spec
                spec.loader.exec_module(self)
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


def warm_in_thread(names: tuple[str, ...], first: tuple[str, ...] = ()) -> threading.Thread:
    """Import `names` in a daemon thread while the caller waits on something else (a failure is only logged:
    the caller's own import raises it where it is needed). `first`: modules the caller's wait imports too,
    imported here before the thread starts, so the two threads never import one module at once (two threads
    inside one circular import can deadlock)."""
    for name in first:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)

    def run() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as e:  # noqa: BLE001 - imported again where it is needed, which says why
                logging.getLogger(__name__).debug("warm import of %s failed: %s", name, e)

    thread = threading.Thread(target=run, name="fanout-warm-imports", daemon=True)
    thread.start()
    return thread
