"""Persistent caches as Lance tables next to the index: expansions, query vectors, rerank scores.

Each row is keyed by a sha256 of everything that determines its value (model file hash, prompt version,
text), so a model or prompt change misses instead of serving stale values.

Many readers, one writer: workers read directly (`key IN (...)` on a BTREE index over `key`) and never
write; they return new cache rows (`*_rows` build them) and ONE writer commits them (`commit`): deduped by
key within the batch, inserted only where the key is missing, under an exclusive file lock per table so that
two jobs on one machine never both insert a new key (Lance's optimistic commits can: lance-format/lance#4585).
The check is Lance's `merge_insert` (insert-if-not-matched), except where the writer knows the answer: when the
table's latest version is the one its own last commit made (no other writer since), the rows the workers
missed are appended, less the keys this writer committed itself (a plain append costs a third of a merge's
CPU, which reads every key: ~0.3 ms a query at 60,000 chunks, docs/performance.md#query-cost-at-scale). On
Ray Data a worker's lookup can predate the writer's last commit, so a key another job inserted just before
that commit can be appended again: a duplicate row of the same content-addressed value. A reader that meets
duplicates takes one of them instead of reading them as misses. duckdb reads them through Arrow:
`duckdb.sql("select * from t")` with `t = Caches(...).table("expansions")`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from fanout.store import storage
from fanout.store.db import Collection

log = logging.getLogger(__name__)

SCHEMAS = {
    "expansions": pa.schema([("key", pa.string()), ("query", pa.string()), ("intent", pa.string()),
                             ("model", pa.string()), ("prompt_version", pa.string()),
                             ("variants", pa.string()), ("source", pa.string()), ("created", pa.float64())]),
    "rerank": pa.schema([("key", pa.string()), ("query", pa.string()), ("intent", pa.string()),
                         ("passage_hash", pa.string()),
                         ("model", pa.string()), ("score", pa.float64()), ("created", pa.float64())]),
}


def cache_key(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join("" if p is None else str(p) for p in parts).encode()).hexdigest()[:32]


def _quote(keys: list[str]) -> str:
    return ", ".join(f"'{k}'" for k in keys)  # keys are hex digests: nothing to escape


@contextlib.contextmanager
def table_lock(db_dir: Path | str, table: str) -> Iterator[None]:
    """Exclusive lock of one cache table across processes on this machine (no-op for object-store URIs,
    where one writer per job plus dedupe-on-read is the guarantee)."""
    if "://" in str(db_dir):
        yield
        return
    import fcntl

    path = Path(db_dir) / f".{table}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Caches:
    """The caches of one collection (tables `<collection>_cache_<name>`)."""

    def __init__(self, col: Collection, embed_model: str, embed_prompt: str, dim: int | None = None,
                 memory_rows: int = 0):
        self.col = col
        self.memory_rows = memory_rows  # hits kept in memory (a key's row never changes: content-addressed)
        self._memory: dict[str, dict[str, dict]] = {}
        self.embed_model = embed_model
        self.embed_prompt = embed_prompt
        self.dim = dim
        self.hits: dict[str, int] = {}
        self.misses: dict[str, int] = {}
        self.commits: dict[str, int] = {}
        # per cache table: the version this object's last commit made, and the keys it committed (`commit`)
        self._own: dict[str, tuple[int, set[str]]] = {}

    def _name(self, name: str) -> str:
        return f"{self.col.name}_cache_{name}"

    def table(self, name: str) -> pa.Table:
        """The whole cache table as Arrow (for duckdb / analysis)."""
        n = self._name(name)
        return self.col.dataset(n).to_table() if self.col.has(n) else (SCHEMAS.get(name) or pa.schema([])).empty_table()

    def _get(self, name: str, keys: list[str], columns: list[str]) -> dict[str, dict]:
        mem = self._memory.setdefault(name, {})
        if keys and self.memory_rows and all(k in mem for k in keys):  # a warm process's repeated query
            self.hits[name] = self.hits.get(name, 0) + len(keys)
            return {k: mem[k] for k in keys}
        n = self._name(name)
        if not keys or not self.col.has(n):
            self.misses[name] = self.misses.get(name, 0) + len(keys)
            return {}
        try:
            ds = self.col.dataset(n)  # its latest version: the writer's commits from other processes are seen
        except (ValueError, OSError):  # listed while another process (the writer) is still creating it
            self.misses[name] = self.misses.get(name, 0) + len(keys)
            return {}
        found: dict[str, dict] = {}
        uniq = sorted(set(keys))
        for i in range(0, len(uniq), 500):
            part = uniq[i:i + 500]
            # no limit: an older version may hold duplicates of a key, which must not push others out
            for r in ds.to_table(columns=["key", *columns], filter=f"key IN ({_quote(part)})").to_pylist():
                found.setdefault(r["key"], r)
        self.hits[name] = self.hits.get(name, 0) + sum(k in found for k in keys)
        self.misses[name] = self.misses.get(name, 0) + sum(k not in found for k in keys)
        if self.memory_rows:
            if len(mem) + len(found) > self.memory_rows:
                mem.clear()
            mem.update(found)
        return found

    def _put(self, name: str, rows: pa.Table) -> None:
        self.commit(name, rows)

    def commit(self, name: str, rows: pa.Table, optimize_every: int | None = None, missed: bool = False) -> int:
        """Insert the rows whose key is not in the table yet (deduped by key); returns rows inserted.
        `missed`: the caller vouches that each row's key was a miss of a lookup (the workers' rows): then,
        while no other writer committed since this object's last commit, the rows are appended without
        Lance's per-key check, less the keys this object committed itself. Every `optimize_every` commits
        (default: the config's `cache.optimize_every`) the table is compacted and its versions older than
        `cache.cleanup_after_s` removed: a table's versions stay bounded however many searches add rows."""
        if rows.num_rows == 0:
            return 0
        ccfg = self.col.cfg.cache if self.col.cfg is not None else None
        if optimize_every is None:
            optimize_every = ccfg.optimize_every if ccfg is not None else 20
        keep_s = ccfg.cleanup_after_s if ccfg is not None else 60
        rows = _dedupe(rows)
        n = self._name(name)
        uri, opts = self.col.table_uri(n), self.col.storage_options or None
        # through Lance itself, as the reads: the writer's process never imports lancedb (fanout/store/db.py `db`)
        import lance

        with table_lock(self.col.db_dir, n):
            if not self.col.has(n):
                try:
                    with self.col.writing(n):  # a failed create (full disk) leaves no files behind
                        lance.write_dataset(rows, uri, mode="create", storage_options=opts)
                    with contextlib.suppress(Exception):  # BTREE: `key IN` lookups, merges
                        self.col.dataset(n).create_scalar_index("key", "BTREE")
                    self._own[n] = (int(self.col.dataset(n).version), set(rows.column("key").to_pylist()))
                    return rows.num_rows
                except (ValueError, OSError) as e:  # created by an older, unlocked writer: fall through
                    if storage.is_disk_full(e):
                        raise
            ds = self.col.dataset(n)
            rows = rows.cast(ds.schema) if rows.schema != ds.schema else rows
            version, mine = self._own.get(n, (-1, set()))
            if int(ds.version) < version:  # the table was made anew: what this writer put there is gone
                mine = set()
            with self.col.writing(n):
                if missed and int(ds.version) == version:  # only this writer committed since: append
                    keys = rows.column("key").to_pylist()
                    new = [i for i, k in enumerate(keys) if k not in mine]
                    rows = rows if len(new) == len(keys) else rows.take(pa.array(new, pa.int64()))
                    if rows.num_rows:
                        lance.write_dataset(rows, uri, mode="append", storage_options=opts)
                    inserted = rows.num_rows
                else:
                    res = ds.merge_insert("key").when_not_matched_insert_all().execute(rows)
                    inserted = int((res or {}).get("num_inserted_rows", rows.num_rows) or 0)
            self.commits[name] = self.commits.get(name, 0) + 1
            # by the table's version, not this writer's commits: a short-lived writer (one per search in a
            # CLI process) compacts as often as a long one
            if optimize_every and int(self.col.dataset(n).version) % optimize_every == 0:
                # folds new rows into the key index and compacts: the three steps of lancedb's optimize()
                with contextlib.suppress(Exception):
                    self.col.dataset(n).optimize.compact_files()
                    self.col.dataset(n).optimize.optimize_indices()
                    self.col.dataset(n).cleanup_old_versions(older_than=timedelta(seconds=keep_s))
            # remembered keys are bounded (a long-lived writer): past the bound the next commit merges again
            mine.update(rows.column("key").to_pylist())
            latest = int(self.col.dataset(n).version)
            if len(mine) <= MEMORY_KEYS:
                self._own[n] = (latest, mine)
            else:
                self._own.pop(n, None)
        return inserted

    # -- query vectors ---------------------------------------------------------------------------------
    def _vkey(self, role: str, text: str) -> str:
        return cache_key("qvec", self.embed_model, self.embed_prompt, role, text)

    def get_vectors(self, items: list[tuple[str, str]]) -> dict[tuple[str, str], list[float]]:
        keys = {self._vkey(r, t): (r, t) for r, t in items}
        found = self._get("qvec", list(keys), ["vector"])
        return {keys[k]: v["vector"] for k, v in found.items()}

    def vector_rows(self, vectors: dict[tuple[str, str], list[float]]) -> list[dict]:
        """Cache rows for new query vectors (not written: the writer commits them)."""
        return qvec_rows(self.embed_model, self.embed_prompt, vectors)

    def put_vectors(self, vectors: dict[tuple[str, str], list[float]]) -> None:
        if vectors:
            self.commit("qvec", qvec_table(self.vector_rows(vectors)))

    # -- expansions ------------------------------------------------------------------------------------
    def get_expansions(self, model: str, version: str, queries: list[tuple[str, str | None]]
                       ) -> dict[tuple[str, str | None], tuple[list[dict], str]]:
        keys = {cache_key("exp", model, version, q, i): (q, i) for q, i in queries}
        found = self._get("expansions", list(keys), ["variants", "source"])
        return {keys[k]: (json.loads(v["variants"]), v["source"]) for k, v in found.items()}

    @staticmethod
    def expansion_rows(model: str, version: str, rows: list[dict]) -> list[dict]:
        """rows: {query, intent, variants: [{kind, text}], source} -> cache rows (not written)."""
        now = time.time()
        return [{"key": cache_key("exp", model, version, r["query"], r["intent"]), "query": r["query"],
                 "intent": r["intent"], "model": model, "prompt_version": version,
                 "variants": json.dumps(r["variants"], ensure_ascii=False), "source": r["source"],
                 "created": now} for r in rows]

    def put_expansions(self, model: str, version: str, rows: list[dict]) -> None:
        self.commit("expansions", pa.Table.from_pylist(self.expansion_rows(model, version, rows),
                                                       schema=SCHEMAS["expansions"]))

    # -- rerank scores ---------------------------------------------------------------------------------
    def get_rerank(self, model: str, triples: list[tuple[str, str | None, str]]
                   ) -> dict[tuple[str, str | None, str], float]:
        """Scores keyed by (query, intent, passage): the intent is part of the reranker's prompt."""
        keys = {cache_key("rr", model, q, i, p): (q, i, p) for q, i, p in triples}
        found = self._get("rerank", list(keys), ["score"])
        return {keys[k]: v["score"] for k, v in found.items()}

    @staticmethod
    def rerank_rows(model: str, scores: dict[tuple[str, str | None, str], float]) -> list[dict]:
        now = time.time()
        return [{"key": cache_key("rr", model, q, i, p), "query": q, "intent": i,
                 "passage_hash": hashlib.sha256(p.encode()).hexdigest()[:16], "model": model, "score": s,
                 "created": now} for (q, i, p), s in scores.items()]

    def put_rerank(self, model: str, scores: dict[tuple[str, str | None, str], float]) -> None:
        self.commit("rerank", pa.Table.from_pylist(self.rerank_rows(model, scores), schema=SCHEMAS["rerank"]))

    def stats(self) -> dict[str, Any]:
        return {"hits": dict(self.hits), "misses": dict(self.misses)}



QVEC_ROW = pa.struct([("key", pa.string()), ("text", pa.string()), ("role", pa.string()), ("model", pa.string()),
                      ("vector", pa.list_(pa.float32())), ("created", pa.float64())])
ROW_TYPES = {"qvec": QVEC_ROW,
             "expansions": pa.struct(list(SCHEMAS["expansions"])),
             "rerank": pa.struct(list(SCHEMAS["rerank"]))}
# keys a cache writer remembers per table to append instead of merging (`Caches.commit`): ~100 bytes each
MEMORY_KEYS = 1_000_000
NEW_COLUMNS = {"qvec": "_new_qvec", "expansions": "_new_exp", "rerank": "_new_rr"}  # per-query list columns


def qvec_rows(embed_model: str, embed_prompt: str, vectors: dict[tuple[str, str], list[float]]) -> list[dict]:
    """Query-vector cache rows for new vectors keyed (prompt role, text), without a Collection (a model actor
    builds them; the writer commits them)."""
    now = time.time()
    return [{"key": cache_key("qvec", embed_model, embed_prompt, r, t), "text": t, "role": r, "model": embed_model,
             "vector": list(v), "created": now} for (r, t), v in vectors.items()]


def qvec_table(rows: list[dict] | pa.Table) -> pa.Table:
    """Query-vector cache rows as a table whose `vector` is fixed-size (the Lance vector column type)."""
    t = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=pa.schema(list(QVEC_ROW)))
    if t.num_rows == 0 or pa.types.is_fixed_size_list(t.schema.field("vector").type):
        return t
    vec = t.column("vector").combine_chunks()
    dim = len(vec[0].as_py())
    fixed = pa.FixedSizeListArray.from_arrays(vec.flatten(), dim)
    return t.set_column(t.schema.get_field_index("vector"), "vector", fixed)


def _dedupe(rows: pa.Table) -> pa.Table:
    """First row per key."""
    keys = rows.column("key").to_pylist()
    first: dict[str, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    return rows if len(first) == len(keys) else rows.take(pa.array(sorted(first.values())))
