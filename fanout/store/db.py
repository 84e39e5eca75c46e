"""LanceDB layout of one collection: tables, FTS columns per language, the manifest, indexes, batched searches.

A collection lives at any LanceDB location (`fanout.store.storage`: a local folder, `file://`, `s3://`, `gs://`,
`az://`); the manifest is read and written through pyarrow filesystems, never pathlib.

Vectors and indexes (Matryoshka truncation, scalar and vector indexes): `fanout/store/vectors.py`. Query vectors are
cut to the searched dimension here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

os.environ.setdefault("LANCEDB_LOG", "error")  # Lance warns on stderr for every query without _score

import pyarrow as pa

from fanout.store import ann_rescore, manifest, storage
from fanout.store.integrity import (
    IndexMissing,
    IndexStateError,
    bad_vector_rows,
    describe_error,
    rebuild_hint,
)
from fanout.store.vectors import VECTOR, has_vector_index, truncate_vectors, vector_dims

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


# -- vectors: Matryoshka dimension ------------------------------------------------------------------------
@dataclass
class Collection:
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

    @contextlib.contextmanager
    def writing(self, name: str):
        """Around ONE write to table `name` (create, add, delete, index build): if it fails before it commits a
        new table version, the files it wrote are deleted. No version references them, so nothing else ever
        would (a failed run on a full disk would otherwise keep the space it took). Local folders only."""
        if storage.scheme(self.db_dir) != "file":
            yield
            return
        root = os.path.join(self.db_dir, f"{name}.lance")
        existed = os.path.isdir(root)
        before = _entries(root)
        version = self._latest_version(name) if existed else None
        try:
            yield
        except Exception:  # not KeyboardInterrupt: Lance may still be finishing that write in its own thread
            self._reclaim(name, root, existed, before, version)
            raise

    def _latest_version(self, name: str) -> int | None:
        try:
            return int(self._open(name).version)
        except Exception:  # noqa: BLE001  (no table, or one without a readable version)
            return None

    def _reclaim(self, name: str, root: str, existed: bool, before: set[str], version: int | None) -> None:
        try:
            self.forget(name)
            now = self._latest_version(name)
            if now is not None and now != version:
                return  # the write committed; its files belong to the new version
            if not existed and now is None:
                size = sum(os.path.getsize(os.path.join(root, f)) for f in _tree(root))
                shutil.rmtree(root, ignore_errors=True)
                log.warning("removed %s (%.1f MB) left by a failed create of table %s", root, size / 1e6, name)
                return
            new = sorted(_entries(root) - before)  # no new version was committed: none of these is referenced
            size = files = 0
            for f in new:
                p = os.path.join(root, f)
                with contextlib.suppress(OSError):
                    if os.path.isdir(p) and not os.path.islink(p):  # a whole new index folder
                        got = [os.path.join(p, x) for x in _tree(p)]
                        size += sum(os.path.getsize(x) for x in got)
                        files += len(got)
                        shutil.rmtree(p)
                    else:
                        size += os.path.getsize(p)
                        files += 1
                        os.remove(p)
            if new:
                log.warning("removed %d files (%.1f MB) that a failed write to table %s left in %s", files,
                            size / 1e6, name, root)
        except Exception as e:  # noqa: BLE001  (cleaning up must never hide the write's own error)
            log.warning("could not remove what a failed write to %s left: %s", name, e)

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

    # -- search ---------------------------------------------------------------------------------------
    def fts_search_many(self, queries: list[str], columns: list[str], boosts: list[float], k: int,
                        select: list[str], wheres: list[str | None] | None = None) -> list[pa.Table]:
        """One full-text search per query (`select` + `_score` each) on the pinned chunks version; `wheres[i]`
        is query i's prefilter (fanout/filters.py). The engines (in memory, or Lance): fanout/store/fts.py."""
        from fanout.store import fts

        if not queries:  # no dataset opened for nothing (a warm interactive query pays ~25 ms for one)
            return []
        with self.guard(self.chunks_name):
            keys = self.row_keys(tuple(select)) if set(select) <= {"path", "chunk_id"} else None
            return fts.search_many(self.dataset(self.chunks_name), queries, columns, boosts, k, select, wheres,
                                   keys, self.cfg.retrieve if self.cfg is not None else None)

    def row_keys(self, columns: tuple[str, ...]) -> tuple[np.ndarray, pa.Table] | None:
        """The pinned chunks version's `columns` in `_rowid` order with its sorted row ids (memo; None above
        `retrieve.rowid_map_rows` rows). A full-text call that asks for `_rowid` only and takes these columns
        from memory costs ~1.9 ms of CPU instead of ~3.0 (the per-call read of the columns from the data
        files; bench/query_cost.py)."""
        limit = self.cfg.retrieve.rowid_map_rows if self.cfg is not None else 0

        def build():
            ds = self.dataset(self.chunks_name)
            if not limit or ds.count_rows() > limit:
                return None
            t = ds.to_table(columns=list(columns), with_row_id=True)
            ids = t["_rowid"].to_numpy()
            order = np.argsort(ids, kind="stable")
            return ids[order], t.select(list(columns)).take(pa.array(order))

        with self.guard(self.chunks_name):
            return self.memo(("row_keys", columns), build)

    def vector_search_many(self, vectors: list[list[float]] | np.ndarray, k: int, select: list[str],
                           where: str | None = None) -> pa.Table:
        """All query vectors (lists, or the rows of a 2-D array) as ONE batched search; the result has
        `query_index`.

        Query vectors are cut to the stored dimension (Matryoshka) and re-normalised. Up to
        `index.exact_search_rows` rows the search is exact, one matrix product (`_exact_search`); above, with a
        vector index the config's `index.nprobes` / `index.refine_factor` / `index.ef` apply (rows added since
        the index was built are searched exactly as well). Non-finite query vectors get empty lists; stored
        vectors that are damaged (NaN distance) are logged and never served. `where` prefilters every query (fanout/filters.py).
        """
        import pyarrow.compute as pc

        if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
            finite = np.flatnonzero(np.isfinite(vectors).all(axis=1)).tolist()
        else:
            finite = [i for i, v in enumerate(vectors) if v is not None and np.isfinite(np.asarray(v)).all()]
        if len(finite) < len(vectors):
            log.warning("%d query vectors are not finite; their vector lists are empty", len(vectors) - len(finite))
        if not finite:
            return pa.table({"query_index": pa.array([], pa.int32())})
        with self.guard(self.chunks_name):
            ds = self.dataset(self.chunks_name)
            dim, indexed = self.memo("vector_meta", lambda: (vector_dims(ds)[0], has_vector_index(ds)))
            if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
                qv = np.asarray(vectors if len(finite) == len(vectors) else vectors[finite], np.float32)
            else:
                qv = np.asarray([vectors[i] for i in finite], dtype=np.float32)
            qv = truncate_vectors(qv, dim)
            res = self._exact_search(ds, qv, k, select, where)  # None: above the size, or Lance must answer
            cols = [c for c in select if c != "_distance"] + ["_distance"]
            # the index's candidates re-scored exactly from the vectors file instead of Lance's refine
            if res is None and indexed and ann_rescore.usable(ds, self.cfg) and \
                    self.memo("ann_rescore_file", lambda: ann_rescore.has_file(ds)):
                got = ds.to_table(columns=cols, nearest=self._nearest(qv, k, indexed, rescore=True),
                                  filter=where or None, prefilter=True if where else None, with_row_id=True)
                res = ann_rescore.rescore(ds, qv, got, k)  # None: no vectors file after all (Lance refines)
            if res is None:
                res = ds.to_table(columns=cols, nearest=self._nearest(qv, k, indexed), filter=where or None,
                                  prefilter=True if where else None)
        if res.num_rows:  # Lance's batch search always gives `query_index` and (asked for) `_distance`
            ok = pc.fill_null(pc.is_finite(res["_distance"]), False)
            if not pc.all(ok).as_py():  # a stored vector is damaged (NaN/inf): never serve it
                bad = res.filter(pc.invert(ok))
                ids = sorted(set(bad["chunk_id"].to_pylist()))[:3] if "chunk_id" in bad.column_names else []
                log.error("table %s in %s has damaged vectors (e.g. %s), left out of the results; repair with "
                          "`fanout index` (it re-embeds damaged notes) or %s", self.chunks_name, self.db_dir,
                          ids, self.hint())
                res = res.filter(ok)
        if len(finite) < len(vectors):  # map back to the caller's positions
            back = pa.array(finite, pa.int32()).take(res["query_index"])
            res = res.set_column(res.column_names.index("query_index"), "query_index", back)
        return res

    def _nearest(self, qv: np.ndarray, k: int, indexed: bool, rescore: bool = False) -> dict[str, Any]:
        """Lance's batch search (one plan per query vector, `query_index` first), as lancedb runs it, with the
        config's index settings; `rescore`: `index.ann_rescore` x k candidates, no refine (fanout/store/
        ann_rescore.py re-scores them)."""
        nearest: dict[str, Any] = {"column": VECTOR, "q": qv, "k": k, "metric": "cosine"}
        icfg = self.cfg.index if self.cfg is not None else None
        if icfg is None or not indexed:
            return nearest
        nearest["minimum_nprobes"] = nearest["maximum_nprobes"] = icfg.nprobes  # lancedb's nprobes()
        candidates = ann_rescore.nearest_k(k, icfg) if rescore else k * max(1, icfg.refine_factor)
        if rescore:
            nearest["k"] = candidates
        elif icfg.refine_factor:
            nearest["refine_factor"] = icfg.refine_factor
        if icfg.ef:
            nearest["ef"] = max(icfg.ef, candidates)  # Lance: ef >= candidates
        return nearest

    def _exact_search(self, ds, qv: np.ndarray, k: int, select: list[str], where: str | None) -> pa.Table | None:
        """One matrix product over this process's copy of the pinned vectors (fanout/store/exact_vectors.py) while
        the table holds at most `index.exact_search_rows` rows, whether or not it has a vector index; None
        above that (LanceDB's index answers) or when Lance must evaluate the prefilter."""
        limit = self.cfg.index.exact_search_rows if self.cfg is not None else 0
        if not limit or self.memo("vector_rows", ds.count_rows) > limit:
            return None
        from fanout.store import exact_vectors

        cols = tuple(c for c in select if c not in ("_distance", "query_index"))
        got = exact_vectors.search(ds, qv, k, select, where, self.row_keys(cols) if cols else None,
                                   files=bool(self.cfg is not None and self.cfg.index.exact_vectors_file),
                                   threads=self.cfg.index.exact_threads if self.cfg is not None else 0)
        if got is None:
            return None
        res, damaged = got
        if damaged:
            log.error("table %s in %s has %d damaged vectors, left out of the results; repair with `fanout index` "
                      "(it re-embeds damaged notes) or %s", self.chunks_name, self.db_dir, damaged, self.hint())
        return res

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
        handles are reopened and derived state (`memo`) is dropped. Returns the checked manifest.
        """
        found = self.require()
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

    def verify(self, batch_rows: int = 8192, paths: set[str] | None = None) -> tuple[int, list[str]]:
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
                tbl = self.db.open_table(name)
                for where in wheres:
                    q = tbl.search() if where is None else tbl.search().where(where)
                    for batch in q.limit(None).to_batches(batch_rows):
                        rows += batch.num_rows
                        if name == self.chunks_name and "vector" in batch.schema.names:
                            for i in bad_vector_rows(batch.column("vector")):
                                damaged.add(batch.column("path")[int(i)].as_py())
        return rows, sorted(p for p in damaged if p is not None)


def index_stamp(name: str, manifest: dict[str, Any]) -> str:
    """`<collection>@<12 hex>`: which index answered: what the answers depend on (the embedder, its prompt,
    the chunking, the languages, the vector size, the notes' content (`content`: a hash of every indexed
    path and its content hash, written by `fanout index`) and the counts). Not the table versions:
    `fanout optimize` makes new versions of the same rows. Batch output carries it in its `index` column, so a
    later reader (`fanout gaps`) can refuse answers of another collection or index version. A manifest of an
    older fanout (no `content`) keeps the stamp it had (table versions in place of the content)."""
    import hashlib

    stats = manifest.get("stats") or {}
    content = manifest.get("content")
    keys = ("embedder", "chunk", "languages", "vectors", "content") if content else \
        ("embedder", "chunk", "languages", "tables")
    key = {k: manifest.get(k) for k in keys}
    if content:
        key["vectors"] = (key["vectors"] or {}).get("dim") if isinstance(key["vectors"], dict) else None
    key["counts"] = [stats.get("notes"), stats.get("chunks")]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{name}@{digest}"


def content_key(col: Collection) -> str | None:
    """A hash of the indexed notes (every path and its content hash, in path order): what answers depend on,
    unchanged by `fanout optimize` (the manifest's `content`, fanout.store.db.index_stamp)."""

    if not col.has(col.documents_name):
        return None
    t = col.open_version(col.documents_name).to_table(columns=["path", "content_hash"])
    return content_digest(zip(t["path"].to_pylist(), t["content_hash"].to_pylist()))


def content_digest(pairs) -> str:
    """The `content` key of (path, content hash) pairs (`content_key`): what an index run compares its scan with
    to see, without reading the documents table, that the pinned index holds exactly these notes."""
    import hashlib

    h = hashlib.sha256()
    for path, digest in sorted(pairs):
        h.update(f"{path}\0{digest}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _entries(root: str) -> set[str]:
    """The entries of `root` and of its folders, one level down ('data/x.lance', '_indices/<uuid>'): where a write
    adds its files (a new index is one new folder), without walking every file of every index."""
    out: set[str] = set()
    try:
        top = list(os.scandir(root))
    except OSError:
        return out
    for e in top:
        out.add(e.name)
        if e.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError), os.scandir(e.path) as it:
                out.update(f"{e.name}/{x.name}" for x in it)
    return out


def _tree(root: str) -> set[str]:
    """Every file under `root`, relative to it ('/'-separated); empty when it does not exist."""
    out: set[str] = set()
    for dirpath, _, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out.update(f if rel == "." else f"{rel}/{f}".replace(os.sep, "/") for f in files)
    return out


INDEX_VERSIONS = "_index"  # batch column: the table versions the first index stage pinned (JSON)


def tag_batch(col: Collection, batch: pa.Table) -> pa.Table:
    """Pin the manifest's versions (`refresh`) and record them in the batch, so every later stage of this
    batch reads the same index, wherever it runs."""
    col.refresh()
    tag = json.dumps(col.pinned, sort_keys=True)
    arr = pa.array([tag] * batch.num_rows, pa.string())
    if INDEX_VERSIONS in batch.column_names:
        return batch.set_column(batch.column_names.index(INDEX_VERSIONS), INDEX_VERSIONS, arr)
    return batch.append_column(INDEX_VERSIONS, arr)


def pin_batch(col: Collection, batch: pa.Table) -> None:
    """Check out the versions an earlier stage recorded in the batch (`tag_batch`); else the manifest's.
    A batch re-blocked from rows of two index runs (a re-index during a Ray job) reads the newer one."""
    tags = batch.column(INDEX_VERSIONS).drop_null().unique().to_pylist() \
        if INDEX_VERSIONS in batch.column_names and batch.num_rows else []
    if not tags:
        col.refresh()
        return
    versions = [json.loads(t) for t in tags]
    col.pin(max(versions, key=lambda v: sorted(v.values())))
