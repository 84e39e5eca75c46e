"""LanceDB layout of one collection: tables, FTS columns per language, the manifest, indexes, batched searches.

A collection lives at any LanceDB location (`fanout.store.storage`: a local folder, `file://`, `s3://`, `gs://`,
`az://`); the manifest is read and written through pyarrow filesystems, never pathlib.

Vectors and indexes (Matryoshka truncation, scalar and vector indexes): `fanout/store/vectors.py`. Query vectors are
cut to the searched dimension here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

os.environ.setdefault("LANCEDB_LOG", "error")  # Lance warns on stderr for every query without _score

import pyarrow as pa

from fanout.store import manifest, process_memory, served_versions, storage
from fanout.store.collection_search import Searches
from fanout.store.integrity import (
    IndexMissing,
    IndexStateError,
    bad_vector_rows,
    describe_error,
    rebuild_hint,
)
from fanout.store.stamps import INDEX_VERSIONS, content_digest, content_key, index_stamp, pin_batch, tag_batch
from fanout.store.table_writes import WriteGuard

if TYPE_CHECKING:
    from fanout.config import Config, StorageConfig

log = logging.getLogger(__name__)

FTS_FIELDS = ("body", "title", "heading")  # each gets one column per language: body_en, body_ru, ...
SCHEMA_VERSION = 1


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def check_collection_name(name: str) -> None:
    """A collection name names files in the db folder (`<name>.manifest.json`, `<name>_chunks.lance`): letters,
    digits, `_`, `-` and `.`, starting with a letter or digit, at most 100 characters. "" is the db itself
    (optimize over every table), never a collection that is written."""
    if name == "":
        return
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:60] + "..."
        raise ValueError(f"collection name {shown} is not allowed: use letters, digits, '_', '-' and '.', "
                         "starting with a letter or digit, at most 100 characters (e.g. notes, work-2026)")


def fts_columns(languages: tuple[str, ...]) -> list[str]:
    return [f"{f}_{lang}" for f in FTS_FIELDS for lang in languages]


@dataclass
class Collection(WriteGuard, Searches):
    """Handles to one collection's tables at a LanceDB location (local folder or object-store URI).

    `cfg` supplies storage options (`storage:`) and query-time vector-index parameters (`index:`); None uses
    the defaults and the environment.
    """

    db_dir: str
    name: str
    cfg: Config | None = None

    def __post_init__(self) -> None:
        check_collection_name(self.name)
        self.db_dir = storage.normalize_uri(self.db_dir)
        scfg = self.cfg.storage if self.cfg is not None else None
        self.storage_options = storage.storage_options(self.db_dir, scfg)
        self._db: Any = None  # the lancedb connection, made on first use (`db`)
        self._tables: dict[str, Any] = {}  # lancedb handles (`table`)
        self._datasets: dict[str, Any] = {}  # chunks / documents as Lance datasets at the pinned versions
        self._pinned: dict[str, int] = {}  # table -> version this reader is on (refresh())
        self.vault_hint: str | None = None  # the vault, for the rebuild hint in messages
        self._lock = threading.Lock()
        self.derived: dict[Hashable, Any] = {}  # state built from the pinned tables (alias map, ...); see memo()

    @property
    def db(self):
        """The lancedb connection, for writes, index builds and maintenance. The query path (searches, cache
        reads and the cache writer) goes through Lance itself (`dataset`, `read`) and never imports lancedb:
        its import costs ~0.8 CPU-s in every process that does (a Ray Data job's retrieval actors and driver;
        bench/query_cost.py)."""
        if self._db is None:
            import lancedb

            self._db = lancedb.connect(self.db_dir, storage_options=self.storage_options or None)
        return self._db

    @property
    def uri(self) -> str:
        return self.db_dir

    @property
    def chunks_name(self) -> str:
        return f"{self.name}_chunks"

    @property
    def documents_name(self) -> str:
        return f"{self.name}_documents"

    def table_names(self) -> list[str]:
        res = self.db.list_tables()
        return list(getattr(res, "tables", res))

    def table_uri(self, name: str) -> str:
        """Where table `name` lives (`<db>/<name>.lance`, a folder or an object-store prefix)."""
        return storage.join(self.db_dir, f"{name}.lance")

    def has(self, name: str) -> bool:
        """Whether table `name` exists (its folder or prefix is there; what lancedb lists as a table)."""
        return storage.exists(self.table_uri(name), self.storage_cfg)

    def table(self, name: str):
        """The lancedb handle of table `name` (chunks and documents at the pinned versions, once pinned)."""
        if name not in self._tables:
            tbl = self.db.open_table(name)
            if (version := self._pinned.get(name)) is not None and tbl.version != version:
                tbl.checkout(version)
            self._tables[name] = tbl
        return self._tables[name]

    def dataset(self, name: str):
        """Table `name` as a Lance dataset: chunks and documents at the pinned versions (`pin`; the latest,
        kept, before anything is pinned), any other table (the caches) at its latest version, opened anew so
        that another process's commits are seen."""
        if name in self._datasets:
            return self._datasets[name]
        ds = self._open(name)
        if name in (self.chunks_name, self.documents_name):
            self._datasets[name] = ds
        return ds

    def open_version(self, name: str, version: int | None = None):
        """Table `name` as a Lance dataset at `version` (None: the latest), opened anew, not kept."""
        return self._open(name, version)

    def _open(self, name: str, version: int | None = None):
        import lance

        return lance.dataset(self.table_uri(name), version=version, storage_options=self.storage_options or None)

    def read(self, name: str, columns: list[str] | None = None, where: str | None = None,
             limit: int | None = None, with_row_id: bool = False) -> pa.Table:
        """Rows of table `name` (`dataset`): `columns`, those passing the SQL filter `where`, at most `limit`;
        a read error names the table and the fix (`guard`)."""
        with self.guard(name):
            return self.dataset(name).to_table(columns=columns, filter=where, limit=limit, with_row_id=with_row_id)

    def forget(self, name: str) -> None:
        """Close this collection's open handles of table `name` (the next read opens it again): after the
        table was replaced or dropped behind them."""
        self._tables.pop(name, None)
        self._datasets.pop(name, None)

    def drop(self, name: str) -> None:
        self.forget(name)
        if self.has(name):
            self.db.drop_table(name)

    def exists(self) -> bool:
        return self.has(self.chunks_name) and manifest.exists(self.db_dir, self.name, self.storage_cfg)

    @property
    def storage_cfg(self) -> StorageConfig | None:
        """The storage section this collection's files are reached with (None: the defaults)."""
        return self.cfg.storage if self.cfg is not None else None

    # -- manifest (fanout/store/manifest.py) ------------------------------------------------------------
    @property
    def manifest_path(self) -> str:
        """The manifest's location (a path or URI string, next to the tables)."""
        return manifest.path(self.db_dir, self.name)

    def read_manifest(self) -> dict[str, Any]:
        """The manifest as stored, unchecked ({} when missing or not a JSON object); `require` checks it."""
        return manifest.read(self.db_dir, self.name, self.storage_cfg)

    def stored_manifest(self) -> dict[str, Any] | None:
        """The manifest, checked, or None when there is none (IndexStateError when it is damaged); unlike
        `require`, a manifest of a rebuild in progress or one without tables is returned as it is."""
        return manifest.read_checked(self.db_dir, self.name, self.hint(), self.storage_cfg)

    def write_manifest(self, data: dict[str, Any]) -> None:
        """One whole-object write (local: temporary file + atomic rename)."""
        manifest.write(self.db_dir, self.name, data, self.storage_cfg)

    def remove_manifest(self) -> bool:
        """Delete the manifest; True when there was one."""
        return manifest.remove(self.db_dir, self.name, self.storage_cfg)

    def missing_message(self) -> str:
        """No index of this name: the collections the db has (the closest name first) and how to build one."""
        import difflib

        build = f"build it with `fanout index VAULT --db {self.db_dir} --collection {self.name}`"
        try:
            names = [n for n in manifest.names(self.db_dir, self.storage_cfg) if n != self.name]
        except OSError:
            names = []
        if not names:
            return f"no index {self.name!r} in {str(self.db_dir)!r} (the db has no collection yet); {build}"
        close = difflib.get_close_matches(self.name, names, n=1, cutoff=0.5)
        ask = f"did you mean {close[0]!r}? " if close else ""
        return (f"no index {self.name!r} in {str(self.db_dir)!r}; {ask}its collections: {names} (pass one as "
                f"`collection=` / `-c`), or {build}")

    def require(self) -> dict[str, Any]:
        """The manifest of an existing index, checked (IndexStateError names the file and the fix)."""
        found = self.stored_manifest()
        if found is None:
            raise IndexMissing(self.missing_message())
        self.vault_hint = found["vault"]
        if found.get("building"):
            raise IndexStateError(f"index {self.name!r} in {self.db_dir} is being rebuilt by `fanout index` (or a "
                                  f"rebuild was killed: run it again); search it when that run has finished")
        if not self.has(self.chunks_name):
            raise IndexMissing(self.missing_message())
        return found

    # -- readers: one consistent set of table versions per request --------------------------------------
    def hint(self) -> str:
        """How to rebuild this collection (for error messages)."""
        return rebuild_hint(self.db_dir, self.name, self.vault_hint)

    @contextlib.contextmanager
    def guard(self, name: str):
        """Turn a Lance/Arrow read error on table `name` into one IndexStateError line naming it and the fix."""
        try:
            yield
        except IndexStateError:
            raise
        except (OSError, RuntimeError, ValueError, pa.ArrowException) as e:
            raise IndexStateError(f"table {name} in {self.db_dir} cannot be read ({describe_error(e)}); it is "
                                  f"damaged or missing: rebuild the index with {self.hint()}") from None

    def refresh(self) -> dict[str, Any]:
        """Start of a request: read the manifest and check out the table versions it names.

        `fanout index` writes the manifest last, with the chunks/documents versions it completed, so every
        read of a request (vector, full text, snippets, titles, aliases, documents) sees one consistent
        index, and a re-index in progress is invisible until it finishes. When the versions change, the
        handles are reopened and derived state (`memo`) is dropped. Returns the checked manifest (within a
        KnowledgeBase's search whose round's new version is not ready yet, the one it still serves:
        fanout/store/served_versions.py).
        """
        found = served_versions.served(self.db_dir, self.name) or self.require()
        self.pin({k: v for k, v in (found.get("tables") or {}).items()
                  if k in (self.chunks_name, self.documents_name)})
        return found

    def pin(self, want: dict[str, int]) -> None:
        """Check out exactly these chunks/documents versions (what `refresh` read from the manifest, or what
        an earlier stage of the same batch pinned: see `pin_batch`); derived state is dropped on a change."""
        with self._lock:
            if want and want == self._pinned:
                return
            datasets: dict[str, Any] = {}
            for name in (self.chunks_name, self.documents_name):
                with self.guard(name):
                    datasets[name] = self._open(name, want.get(name))
            self._datasets, self._tables, self._pinned, self.derived = datasets, {}, dict(want), {}

    @property
    def pinned(self) -> dict[str, int]:
        return dict(self._pinned)

    def memo(self, key: Hashable, build):
        """Derived state (built from the pinned tables) kept until `refresh` moves to other versions."""
        if key not in self.derived:
            self.derived[key] = build()
        return self.derived[key]

    def table_versions(self) -> dict[str, int]:
        """The latest version of the chunks and documents tables (recorded in the manifest by `fanout index`)."""
        out = {}
        for name in (self.chunks_name, self.documents_name):
            if self.has(name):
                with self.guard(name):
                    out[name] = int(self._open(name).version)
        return out

    def advance_pins(self, before: dict[str, int]) -> bool:
        """After maintenance that keeps the content (compaction, index builds): if the manifest pinned exactly
        the versions that were latest before it (`before`), pin the new latest ones. Returns True if moved."""
        m = self.read_manifest()
        pinned = m.get("tables")
        if not isinstance(pinned, dict) or not pinned or any(before.get(n) != v for n, v in pinned.items()):
            return False
        m["tables"] = self.table_versions()
        self.write_manifest(m)
        return True

    def verify(self, batch_rows: int = 2048, paths: set[str] | None = None) -> tuple[int, list[str]]:
        """Read every row of chunks and documents (`paths`: only the rows of those notes, e.g. what a run just
        wrote); returns (rows checked, paths with damaged vectors).

        An unreadable table raises IndexStateError naming it; a vector that is not finite or not unit length
        (the embedder writes unit vectors) names its note, so the next index run re-embeds it.
        """
        rows, damaged = 0, set()
        wheres: list[str | None] = [None]
        if paths is not None:
            ordered = sorted(paths)
            wheres = ["path IN (" + ", ".join("'" + p.replace("'", "''") + "'" for p in ordered[i:i + 500]) + ")"
                      for i in range(0, len(ordered), 500)]
        for name in (self.documents_name, self.chunks_name):
            if not self.has(name):
                continue
            with self.guard(name):
                ds = self.open_version(name)  # (the latest: what this run wrote; Lance's scan, its read-ahead bounded)
                for where in wheres:
                    for batch in ds.to_batches(filter=where, **{**process_memory.LEAN_SCAN, "batch_size": batch_rows}):
                        rows += batch.num_rows
                        if name == self.chunks_name and "vector" in batch.schema.names:
                            for i in bad_vector_rows(batch.column("vector")):
                                damaged.add(batch.column("path")[int(i)].as_py())
        return rows, sorted(p for p in damaged if p is not None)


__all__ = ["FTS_FIELDS", "INDEX_VERSIONS", "SCHEMA_VERSION", "Collection", "check_collection_name", "content_digest",
           "content_key", "fts_columns", "index_stamp", "pin_batch", "tag_batch"]
