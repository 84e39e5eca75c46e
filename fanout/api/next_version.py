"""A KnowledgeBase's searches stay on the index version they pinned while its own round's new version is made
ready, and move to it in one step (`KnowledgeBase.index`, in-process runner).

An index round publishes its version by writing the manifest; its full-text postings and exact-search vectors
are then made by background jobs (pipelines/query_files.py `later`), and a search that pinned the new version
at once waited for them, then paid the version's first loading (row ids, per-version state): the tail of
searches beside a round (docs/performance.md#index-rounds). Instead, from the round's start until the new
version is ready, this KnowledgeBase's searches serve the manifest stored when it started (fanout/store/
served_versions.py); once the round has returned, a thread waits for the version's jobs, opens new Searchers
of every (collection, mode) open then, builds their pipelines and runs one plain search on each (no expansion,
no rerank), and swaps them in under the KnowledgeBase's lock: a search never waits for a job, and the answers
after the swap are those the new version gives any fresh search.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from fanout.store import served_versions

if TYPE_CHECKING:
    from fanout.api.service import SearchService
    from fanout.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")
WARM_QUERY = "note"  # the search each new Searcher runs before it is swapped in (what it loads is per version)


class NextVersion:
    """The manifests a KnowledgeBase's searches serve while a round's new version is being made ready, and the
    thread that makes it ready and swaps it in (`start`). One round at a time (the KnowledgeBase's `_indexing`)."""

    def __init__(self, db: str, cfg: Config, lock: threading.RLock):
        self.db, self.cfg, self.lock = db, cfg, lock
        self.serving: dict[tuple[str, str], dict[str, Any]] = {}  # (db, collection) -> the manifest searches serve
        self.swapped: dict[str, dict[str, int]] = {}  # collection -> the table versions its last swap brought in
        self._thread: threading.Thread | None = None
        self._mine = threading.local()  # `index`'s caller: its next search waits for the swap (`wait_mine`)

    @contextlib.contextmanager
    def searching(self) -> Iterator[None]:
        """A search's block: under the lock, the manifests held (`hold`) being the ones it reads; when this
        thread ran the last round, after its swap (`wait_mine`)."""
        self.wait_mine()
        with self.lock, served_versions.serving(self.serving):
            yield

    def holds(self, collection: str) -> bool:
        """Whether searches of `collection` serve an older version than the stored manifest's (a swap is due)."""
        return (self.db, collection) in self.serving

    def keeps(self, collection: str) -> bool:
        """Whether `forget` keeps the Searchers of `collection`: a swap is due (`holds`), or the last one brought
        them in at the versions its manifest pins now."""
        from fanout.store.db import Collection

        if self.holds(collection):
            return True
        tables = self.swapped.get(collection)
        return tables is not None and Collection(self.db, collection, self.cfg).read_manifest().get("tables") == tables

    def hold(self, collection: str) -> None:
        """Before a round (under the lock): searches of `collection` keep serving the manifest stored now."""
        from fanout.errors import IndexStateError
        from fanout.store.db import Collection

        try:
            found = Collection(self.db, collection, self.cfg).stored_manifest()
        except IndexStateError:
            found = None
        if found is not None and not found.get("building") and found.get("tables"):
            self.serving[(self.db, collection)] = found

    def release(self, collection: str) -> None:
        """Searches of `collection` read the stored manifest again (under the lock)."""
        self.serving.pop((self.db, collection), None)

    def round(self, collection: str, run: Callable[[], T], hold: bool, service: Callable[[], SearchService | None],
              forget: Callable[[list[str]], None]) -> T:
        """`run()` (an index round of `collection`), the searches on the version they serve meanwhile when `hold`
        (then its version is made ready after it returns: `start`); else, or when it fails, the searches reopen
        at the stored manifest's version when it returns (`forget`)."""
        if hold:  # (the last round's swap first; never under the lock, which the swap takes)
            self.wait()
            with self.lock:
                self.hold(collection)
        try:
            out = run()
        except BaseException:
            with self.lock:
                self.release(collection)
                forget([collection])
            raise
        if hold:
            self.start(collection, service(), mine=True)
        else:
            with self.lock:
                forget([collection])
        return out

    def start(self, collection: str, service: SearchService | None, mine: bool) -> None:
        """After the round returned: make its version ready and swap it in, in a thread (`mine`: the calling
        thread's next search waits for it)."""
        self._mine.pending = mine
        self._thread = threading.Thread(target=self._ready, args=(collection, service), name="fanout-next-version",
                                        daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the last round's version is what searches serve (True), or `timeout` passed (False)."""
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
            return not t.is_alive()
        return True

    def wait_mine(self) -> None:
        """Before a search: when this thread ran the last round, wait for its swap (its own next search sees what
        it indexed; other threads' searches go on on the version they serve)."""
        if getattr(self._mine, "pending", False):
            self.wait()
            self._mine.pending = False

    def _ready(self, collection: str, service: SearchService | None) -> None:
        held = self.serving.get((self.db, collection), {}).get("tables")
        got: tuple[dict[tuple[str, str], Any], dict[str, int]] | None = None
        try:
            got = ready_searchers(self.db, collection, self.cfg, service, held)
        except Exception as e:  # noqa: BLE001 - the searches then reopen at the new version, as without this
            log.warning("making the new index version of %s ready failed (%s: %s); its next search opens it",
                        collection, type(e).__name__, e)
            got = {}, {}
        with self.lock:
            if service is not None and got is not None:
                service.install(collection, got[0])  # (none prepared: its Searchers are dropped, reopened)
            self.release(collection)
            if got is not None and got[1]:
                self.swapped[collection] = got[1]


def ready_searchers(db: str, collection: str, cfg: Config, service: SearchService | None,
                    held: dict[str, int] | None = None) -> tuple[dict[tuple[str, str], Any], dict[str, int]] | None:
    """New Searchers of `collection` at the stored manifest's version, for every mode `service` has open, once
    the version's query-file jobs have ended: their pipelines built and one plain search run on each, and that
    version's tables. None when there is nothing to swap: no index, or the versions `held` (a round that
    changed nothing)."""
    from fanout.pipelines.search import SearchOptions
    from fanout.store import fts_postings, vectors_file, version_files
    from fanout.store.db import Collection

    col = Collection(db, collection, cfg)
    if col.stored_manifest() is None:
        return None
    found = col.refresh()
    if held is not None and found.get("tables") == held:
        return None
    ds = col.dataset(col.chunks_name)
    keys = (fts_postings.job_key(ds), vectors_file.job_key(ds))
    while any(version_files.pending(k) for k in keys):  # (a job may start the next one: a file's write)
        for k in keys:
            version_files.wait(k)
    out: dict[tuple[str, str], Any] = {}
    if service is None:
        return out, dict(col.pinned)
    with served_versions.serving({(db, collection): found}):
        for (name, mode), old in list(service.opened_searchers().items()):
            if name != collection:
                continue
            new = service.new_searcher(name, mode)
            for opts in old.built_options():  # (the options its searches asked for: their pipelines)
                new.pipeline(opts)
            plain = SearchOptions(expand=False, rerank=False)
            new.search([{"id": "warm", "query": WARM_QUERY}], plain)
            carry_memory(old, new)
            out[(name, mode)] = new
    return out, dict(col.pinned)


def carry_memory(old: Any, new: Any) -> None:
    """The chunk columns the old Searcher's stages had come to read whole into memory (fanout/store/
    chunk_text.py's ski-rental rule) read now for the new version, not by a search some calls after the swap."""
    from fanout.store import chunk_text

    stages = new.stage_instances()  # (by (class, kwargs): the same keys for the same config)
    for key, stage in old.stage_instances().items():
        col, twin = getattr(stage, "col", None), getattr(stages.get(key), "col", None)
        if col is not None and twin is not None:
            for columns in chunk_text.held_in_memory(col):
                chunk_text.read_whole(twin, columns)
