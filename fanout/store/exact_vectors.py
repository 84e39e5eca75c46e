"""Exact vector search as one matrix product: a batch of query vectors against every chunk vector of the
pinned chunks version, with numpy (BLAS), over a copy of the vectors this process loads once per version.

`Collection.vector_search_many` answers here while the chunks table holds at most `index.exact_search_rows`
rows (fanout/config/sections.py says why that size; docs/performance.md has the figures); above it, LanceDB's
vector index. The lists are exact (cosine distance, as Lance computes it, up to float rounding), so a vector
index is never needed below the threshold: rows added after an index was built are in the copy like any
other, and a prefilter is the rows it keeps (the same bool mask the memory full-text engine uses,
fanout/store/row_filter.py), so only allowed rows are ranked.

Memory: one copy per process of the searched vectors (rows x dim x 4 bytes, unit length) plus their row ids,
shared by every `Collection` of the process; loading another version of the same table replaces it, so a
process never holds a table's vectors twice.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from fanout.store import process_memory, row_filter, vector_topk, vectors_file, version_files
from fanout.store.vector_topk import top_k

log = logging.getLogger(__name__)

_LOCK = threading.RLock()
_CACHE: OrderedDict[str, Matrix] = OrderedDict()  # chunks table uri -> its vectors at the version used last
_MAX_TABLES = 4  # tables (collections) a process keeps vectors of, the least recently used dropped first


@dataclass
class Matrix:
    """One chunks version's searched vectors, in `_rowid` order; or (a delta version, `added` given) an older
    version's rows as they are, then the rows added since, each of these stacked rows with its position in this
    version (`at`; -1: gone): what an index round's job makes without copying every vector (`_from_previous`)."""

    version: int
    ids: np.ndarray  # sorted row ids (int64)
    vectors: np.ndarray  # float32 (rows, dim), unit length; damaged rows are zero and never served
    damaged: np.ndarray  # bool per (stacked) row: a stored vector that is not finite or zero
    since_file: int | None = None  # rows added and deleted since the vectors file it came from (None: read whole)
    added: np.ndarray | None = None  # a delta version: the vectors of the rows added since `vectors`' version
    at: np.ndarray | None = None  # a delta version: each stacked row's position in `ids` (-1: gone)
    _float64: np.ndarray | None = field(default=None, repr=False)  # `float64()`: small tables only

    def float64(self) -> np.ndarray:
        """The (stacked) vectors as float64, kept once made (small tables only: `top_k` scores them in float64)."""
        if self._float64 is None:
            self._float64 = np.asarray(vector_topk.stacked(self)[np.arange(self.rows)], np.float64) \
                if self.added is not None else self.vectors.astype(np.float64)
        return self._float64

    @property
    def rows(self) -> int:
        """Stacked rows (a delta version's gone rows included)."""
        return len(self.vectors) + (len(self.added) if self.added is not None else 0)

    def position_rows(self, pos: np.ndarray) -> np.ndarray:
        """The (stacked) rows of the version's positions `pos`."""
        return pos if self.at is None else np.flatnonzero(self.at >= 0)[pos]

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        """(vectors, damaged) one per position (a delta version's gathered: what its file holds)."""
        if self.at is None:
            return self.vectors, self.damaged
        rows = np.flatnonzero(self.at >= 0)
        return vector_topk.stacked(self)[rows], self.damaged[rows]

    def damaged_count(self) -> int:
        return int(self.damaged.sum() if self.at is None else (self.damaged & (self.at >= 0)).sum())

    @property
    def nbytes(self) -> int:
        extra = self._float64.nbytes if self._float64 is not None else 0
        more = self.added.nbytes + self.at.nbytes if self.added is not None and self.at is not None else 0
        return int(self.vectors.nbytes + self.ids.nbytes + self.damaged.nbytes + extra + more)


def matrix(ds, column: str = "vector", files: bool = False, load: bool = True, save: bool = True
           ) -> Matrix | None:
    """The vectors of dataset `ds` (a pinned Lance version): loaded on first use, then kept for this process
    until another version of the same table is asked for. `files` (`index.exact_vectors_file`): memory-mapped
    from the version's file when there is one, else (unless not `save`) written there after the load and mapped
    from it (fanout/store/vectors_file.py). `load=False`: None instead of loading from Lance when there is no
    file."""
    key, version = ds.uri, int(ds.version)
    with _LOCK:
        got = _CACHE.get(key)
        if got is not None and got.version == version:
            _CACHE.move_to_end(key)
            return got
        if files and (loaded := vectors_file.load(ds, column)) is not None:
            return _cache(key, Matrix(version, loaded[0], loaded[1], loaded[2], 0))
        if not load:
            return None
        m = _from_previous(ds, column, got if got is not None and got.version < version else None) \
            if files else None
        if m is not None:
            _CACHE.pop(key, None)
            return _keep(key, ds, column, m, files and save)
        _CACHE.pop(key, None)  # the old version goes before the new one loads: never two copies
        dim = ds.schema.field(column).type.list_size
        vec = np.empty((ds.count_rows(), dim), np.float32)
        ids = np.empty(len(vec), np.int64)
        damaged = np.empty(len(vec), bool)
        at = 0
        for b in ds.to_batches(columns=[column], with_row_id=True, **process_memory.LEAN_SCAN):  # no second whole copy
            n = b.num_rows
            vec[at:at + n], damaged[at:at + n] = _unit(b.column(column), dim)
            ids[at:at + n] = b.column("_rowid").to_numpy()
            at += n
        vec, ids, damaged = vec[:at], ids[:at], damaged[:at]
        if len(ids) > 1 and not (np.diff(ids) > 0).all():
            order = np.argsort(ids, kind="stable")
            vec, ids, damaged = vec[order], ids[order], damaged[order]
        m = Matrix(version, ids, np.ascontiguousarray(vec), damaged)
        log.info("loaded %d x %d vectors of %s (version %d) for exact search: %.0f MB", len(vec), dim, key,
                 version, m.nbytes / 2**20)
        return _keep(key, ds, column, m, files and save)


def _keep(key: str, ds, column: str, m: Matrix, files: bool) -> Matrix:
    """`m` kept as the table's vectors in this process; with `files`, written to the version's file and mapped
    from it (the next process maps this one's, and so does this one: the private copy is dropped)."""
    if files and vectors_file.save(ds, column, m.ids, *m.compact()) and \
            (got := vectors_file.load(ds, column)) is not None:
        m = Matrix(m.version, got[0], got[1], got[2], 0)
    return _cache(key, m)


def _cache(key: str, m: Matrix) -> Matrix:
    """`m` as this process's copy of table `key` (replacing an older version's), the least recently used table
    dropped past _MAX_TABLES."""
    _CACHE.pop(key, None)
    _CACHE[key] = m
    while len(_CACHE) > _MAX_TABLES:
        _CACHE.popitem(last=False)
    return m


def _unit(arr: pa.Array, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(unit vectors, damaged) of a vector column's chunk: a missing, non-finite or zero vector is damaged (zero,
    never served)."""
    n = len(arr)
    flat = arr.values.slice(arr.offset * dim, n * dim).to_numpy(zero_copy_only=False)
    vec = np.array(np.asarray(flat, np.float32).reshape(n, dim))
    if arr.null_count:
        vec[arr.is_null().to_numpy(zero_copy_only=False)] = np.nan
    norms = np.linalg.norm(vec, axis=1)
    damaged = ~np.isfinite(norms) | (norms == 0)
    vec /= np.where(damaged, 1.0, norms)[:, None]
    if damaged.any():
        vec[damaged] = 0.0
    return vec, damaged


def _from_previous(ds, column: str, held: Matrix | None) -> Matrix | None:
    """The vectors of the version `ds` from an older version's (this process's `held` copy, else the newest older
    version's file), only the rows added read from Lance: a delta version (`Matrix.added`: the older rows left as
    they are, nothing copied) when the rows added come after every row kept (new fragments), else the kept rows
    copied. None when there is no older copy (the caller loads every row)."""
    try:
        old = held
        if old is None:
            versions = vectors_file.older_versions(ds, column)
            if not versions:
                return None
            import lance

            got = vectors_file.load(lance.dataset(ds.uri, version=max(versions)), column)
            if got is None:
                return None
            old = Matrix(max(versions), got[0], got[1], got[2], 0)
        dim = ds.schema.field(column).type.list_size
        if old.vectors.shape[1] != dim:
            return None
        from fanout.store.chunk_rows import row_steps, sorted_row_ids, take_rows

        ids = sorted_row_ids(ds).astype(np.int64)
        step, at = row_steps(old.ids, ids)  # old position -> new (-1: gone); the positions added
        added = ids[at]
        if 2 * len(added) > len(ids):  # most rows new (a rebuild, a compaction): one scan is cheaper
            return None
        vec, damaged = np.zeros((0, dim), np.float32), np.zeros(0, bool)
        if len(added):
            t = take_rows(ds, added, [column]).combine_chunks()
            vec, damaged = _unit(t.column(column).chunk(0), dim)
        kept = len(ids) - len(at)
        gone = len(old.ids) - kept
        log.info("vectors of %s version %d from version %d: %d rows added, %d gone", ds.uri, int(ds.version),
                 old.version, len(added), gone)
        since = None if old.since_file is None else old.since_file + len(added) + gone
        if not len(at) or at[0] >= kept:  # every added row after every kept one: stacked, nothing copied
            at_old = step if old.at is None else np.where(old.at >= 0, step[np.maximum(old.at, 0)], -1)
            more = vec if old.added is None else np.concatenate([old.added, vec])
            return Matrix(int(ds.version), ids, old.vectors, np.concatenate([old.damaged, damaged]), since, more,
                          np.concatenate([at_old, np.arange(kept, len(ids))]))
        return _copied(int(ds.version), old, ids, step, at, vec, damaged, since)
    except Exception as e:  # noqa: BLE001  every row is read from Lance instead
        log.warning("vectors of %s not updated from an older version (%s); read anew", ds.uri, e)
        return None


def _copied(version: int, old: Matrix, ids: np.ndarray, step: np.ndarray, added: np.ndarray, vec: np.ndarray,
            damaged: np.ndarray, since: int | None) -> Matrix:
    """`old`'s kept rows copied to their new positions (`step`: old position -> new, -1: gone), `vec` / `damaged`
    (the rows added) at theirs (`added`)."""
    old_vec, old_damaged = old.compact()
    out = np.empty((len(ids), old_vec.shape[1]), np.float32)
    out_damaged = np.zeros(len(ids), bool)
    src = np.flatnonzero(step >= 0)
    dst = step[src]
    # the kept rows as runs of consecutive rows on both sides (one per deletion or insertion): slice copies,
    # several times faster than a gather of every row
    cut = np.flatnonzero((np.diff(dst) != 1) | (np.diff(src) != 1)) + 1
    for a, b in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [len(dst)]]).tolist()):
        if b > a:
            d, s_ = int(dst[a]), int(src[a])
            out[d:d + b - a] = old_vec[s_:s_ + b - a]
            out_damaged[d:d + b - a] = old_damaged[s_:s_ + b - a]
    out[added], out_damaged[added] = vec, damaged
    return Matrix(version, ids, out, out_damaged, since)


def search(ds, queries: np.ndarray, k: int, select: list[str], where: str | None,
           keys: tuple[np.ndarray, pa.Table] | None, files: bool = False, threads: int = 0
           ) -> tuple[pa.Table, int] | None:
    """Exact search over `ds`, the pinned chunks version: (`Collection.vector_search_many`'s table (`query_index`,
    `select`, `_distance`), the number of damaged rows left out); None when the prefilter `where` cannot be
    evaluated here (Lance then answers, and says what is wrong with it). `keys`: the pinned rows' sorted row ids
    and their `select` columns (`Collection.row_keys`), else None (the rows are read by id); `files`:
    `index.exact_vectors_file`; `threads`: `index.exact_threads`."""
    m = matrix(ds, files=files)
    assert m is not None  # load=True: loaded from Lance when there is no file
    allowed = None
    if where:
        allowed = row_filter.allowed(ds, m.ids, where)
        if allowed is None:
            return None
    qi, pos, dist = top_k(m, queries, k, allowed, threads)
    cols = [c for c in select if c not in ("_distance", "query_index")]
    if keys is not None and len(keys[0]) == len(m.ids):
        picked = keys[1].take(pa.array(pos))
    elif cols:
        from fanout.store.chunk_rows import take_rows

        picked = take_rows(ds, m.ids[pos], cols)
    else:
        picked = pa.table({})
    out = pa.table({"query_index": pa.array(qi, pa.int32())})
    for c in cols:
        out = out.append_column(c, picked[c])
    return out.append_column("_distance", pa.array(dist, pa.float32())), m.damaged_count()


def loaded_bytes() -> int:
    """Bytes of vectors this process holds for exact search (all tables)."""
    with _LOCK:
        return sum(m.nbytes for m in _CACHE.values())


def file_wanted(ds, cfg) -> bool:
    """Whether `fanout index` writes the version's vectors file: searched here (at most
    `index.exact_search_rows` rows), or re-scoring its vector index's candidates (`index.ann_rescore`)."""
    i = cfg.index
    n = ds.count_rows()
    if not i.exact_vectors_file or n == 0:
        return False
    if n <= i.exact_search_rows:
        return True
    from fanout.store.vectors import has_vector_index

    return bool(i.ann_rescore) and has_vector_index(ds)


def ensure_file(ds, column: str = "vector", background: bool = False, share: float = 0.0) -> str:
    """The exact-search vectors file of the version `ds` (`fanout index`'s last step): `kept` when a valid one is
    there, else loaded (or updated from an older version's copy) and `written`; this process keeps no copy it
    did not hold before. `background` (an index round): the file is written by a thread after this returns
    (`writing`): the round does not wait for the copy's checksum and write (~0.2 s at 60,000 x 768), this
    process searches its copy meanwhile and maps the file once written, and another process that starts
    before then updates its own copy from the previous version's file, as without the file (`wait_files`).
    `share` (`index.query_files_share`, with `background`): a copy updated from an older file is not written
    while the rows added and deleted since that file are fewer than this share of the rows (`in memory`)."""
    if vectors_file.folder(ds) is None:
        return "object store: a copy per process"
    if vectors_file.load(ds, column) is not None:
        return "kept"
    with _LOCK:
        held = ds.uri in _CACHE
        m = matrix(ds, column, files=True, save=not background)
        if not held:
            _CACHE.pop(ds.uri, None)
    if not background:
        return "written" if vectors_file.load(ds, column) is not None else "not written"
    # one writer at a time per table (each removes the older versions' files); not a daemon: a process that ends
    # waits for its file
    assert m is not None  # load=True: read from Lance when there is no file
    if m.since_file is not None and m.since_file < share * len(m.ids):
        return f"in memory ({m.since_file} rows since the file)"
    version_files.later(vectors_file.job_key(ds), lambda: _save_later(ds, column, m, held), "fanout-vectors-file")
    return "writing"


def _save_later(ds, column: str, m: Matrix, held: bool) -> None:
    if vectors_file.save(ds, column, m.ids, *m.compact()) is None or not held:
        return
    got = vectors_file.load(ds, column)
    with _LOCK:
        if got is not None and _CACHE.get(ds.uri) is m:  # still this process's copy: the mapped file
            _cache(ds.uri, Matrix(m.version, got[0], got[1], got[2], 0))  # replaces it


def wait_files() -> None:
    """Wait for the vectors files `ensure_file` (and an index round: pipelines/query_files.py) is writing in the
    background (fanout/store/version_files.py `later`)."""
    version_files.wait()
