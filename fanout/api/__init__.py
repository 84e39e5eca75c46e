"""The public Python API (above the pipelines): `open` -> `KnowledgeBase` with index, search, batch, expand,
get, status, gaps and watch (kb.py; the `Watcher`: watcher.py); its result types (types.py); the request ->
response service the CLI and `fanout serve` share (service.py); reading notes confined to the vault
(notes.py); what a db holds (catalog.py). `fanout/__init__.py` re-exports the public names; `fanout.ray` is
the Ray Data processor.

May import the base, fanout.actors, fanout.pipelines and fanout.gaps; never the faces (cli, serve, evaluation).
"""

from fanout.api.catalog import collections
from fanout.api.kb import KnowledgeBase, open
from fanout.api.requests import SearchRequest, SubQuery
from fanout.api.types import BatchResult, Hit, Hits, Note, SearchResponse
from fanout.api.watcher import Watcher, WatchRound
from fanout.gaps.analysis import GapsResult
from fanout.pipelines.index import IndexReport

# the errors are exported by the package itself (fanout/__init__.py, from fanout/errors.py)
__all__ = ["BatchResult", "GapsResult", "Hit", "Hits", "IndexReport", "KnowledgeBase", "Note", "SearchRequest",
           "SearchResponse", "SubQuery", "WatchRound", "Watcher", "collections", "open"]
