"""fanout: batch hybrid search over markdown knowledge bases (full text + vectors + agent fields, fused by RRF).

The public API is what this module exports; everything else is internal and may move::

    import fanout

    with fanout.open("db", collection="notes", config="local") as kb:
        kb.index("path/to/vault")
        for hit in kb.search("how do I embed a note?", n=5):
            print(hit.rank, hit.path, hit.heading, hit.score)

    import fanout.ray                       # Ray Data: add fanout's stages to your own Dataset
    ds = fanout.ray.search(ds, db="db", collection="notes", config="local")

`open` returns a `KnowledgeBase`; searches give `Hits` (a list of `Hit` with `.to_arrow()` / `.to_pandas()`);
every error fanout raises on purpose is a `FanoutError`. The names are imported on first use, so
`import fanout` stays cheap for the CLI's warm path.

Package layout (each subpackage's docstring says what it may import; tests/test_layers.py checks it):
base `fanout.config`, `fanout.store`, `fanout.exec`, `fanout.models`, `fanout.io` and the small shared modules
here (schemas, filters, errors, ...) <- `fanout.actors` (the repo's actors/) <- `fanout.pipelines` (the repo's
pipelines/) <- `fanout.api` (this API) and `fanout.ray` <- the faces: `fanout.cli`, `fanout.serve`,
`fanout.evaluation`, `fanout.gaps`.
"""

from __future__ import annotations

import warnings

# the errors are all of fanout/errors.py (no heavy import): imported at once, so `except fanout.IndexMissing`
# costs nothing more than `import fanout`
from fanout.errors import (
    BackendError,
    BenchNotFoundError,
    CollectionBusy,
    ConfigError,
    DiskFull,
    FanoutError,
    FilterError,
    GPUBackendMissing,
    IndexMissing,
    IndexStateError,
    InputMissing,
    ModelError,
    NoteError,
    PlacementError,
    RequestError,
    RoundWorkerError,
    RowError,
    StorageError,
    ToolArgError,
    UserError,
    VaultError,
)
from fanout.exec.imports import defer_unused

__version__ = "0.1.0"

defer_unused()  # before anything imports lancedb (fanout/exec/imports.py: ~0.65 s of CPU per process)
# pylance warns at every fork once it is imported (the query path imports it, the Ray runner even in a thread
# while `ray.init` forks Ray's processes); fanout never forks, and Ray starts its processes with
# subprocess.Popen(preexec_fn=...), a fork followed at once by exec, where no Lance code runs
warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
# lancedb says the same once per forked process (Ray's start forks ~5): the same fork-then-exec, so as safe
warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)

TYPE_CHECKING = False  # typing costs the CLI's warm path ~5 ms of imports
if TYPE_CHECKING:
    from fanout.api import (
        BatchResult,
        GapsResult,
        Hit,
        Hits,
        IndexReport,
        KnowledgeBase,
        Note,
        SearchRequest,
        SearchResponse,
        SubQuery,
        Watcher,
        WatchRound,
        collections,
        open,
    )

__all__ = ["BackendError", "BatchResult", "BenchNotFoundError", "CollectionBusy", "ConfigError", "DiskFull",
           "FanoutError", "FilterError", "GPUBackendMissing", "GapsResult", "Hit", "Hits", "IndexMissing",
           "IndexReport", "IndexStateError", "InputMissing", "KnowledgeBase", "ModelError", "Note",
           "NoteError", "PlacementError", "RequestError", "RoundWorkerError", "RowError", "SearchRequest", "SearchResponse",
           "StorageError", "SubQuery", "ToolArgError", "UserError", "VaultError", "WatchRound", "Watcher",
           "__version__", "collections", "open"]
_LAZY = set(__all__) - set(globals())  # the API types and `open`: imported from fanout.api on first use


def __dir__() -> list[str]:  # the lazily imported public names too (tab completion)
    return sorted(set(globals()) | set(__all__) | {"ray"})


def __getattr__(name: str):
    if name in _LAZY:
        import fanout.api

        return getattr(fanout.api, name)
    if name == "ray":  # `fanout.ray.search` after a plain `import fanout`
        import importlib

        return importlib.import_module("fanout.ray")
    raise AttributeError(f"module 'fanout' has no attribute {name!r}")
