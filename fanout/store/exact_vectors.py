"""Exact vector search as one matrix product: a batch of query vectors against every chunk vector of the
pinned chunks version, with numpy (BLAS), over a copy of the vectors this process loads once per version.

`Collection.vector_search_many` answers here while the chunks table holds at most `index.exact_search_rows`
rows (fanout/config/sections.py says why that size; docs/performance.md has the figures); above it, LanceDB's
vector index. The lists are exact (cosine distance, as Lance computes it, up to float rounding), so a vector
index is never needed below the threshold: rows added after an index was built are in the copy like any
other, and a prefilter is the rows it keeps (the same bool mask the memory full-text engine uses,
fanout/store/fts.py `_allowed`), so only allowed rows are ranked.

Memory: one copy per process of the searched vectors (rows x dim x 4 bytes, unit length) plus their row ids,
shared by every `Collection` of the process; loading another version of the same table replaces it, so a
process never holds a table's vectors twice.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

log = logging.getLogger(__name__)

# query vectors per product. On a small table (up to SMALL_PRODUCT elements) always exactly QUERY_BLOCK, a
# short block padded with zero rows: BLAS picks its kernel by the product's shape and rounds each score
# accordingly, so one shape everywhere scores a query alike to the last bit in any batch, process or Ray Data
# block, and exact ties (the fake embedder's vectors tie often) break the same way everywhere. On a large
# table a block is up to LARGE_QUERY_BLOCK rows, unpadded: each product reads every vector once, so 16-row
# products cost 2.75x the CPU of 256-row ones at 60,000 x 768 (docs/performance.md), and a lone search padded
# to 256 rows would cost ~130 ms; real embeddings practically never tie, so the last bit is harmless there
QUERY_BLOCK = 16
LARGE_QUERY_BLOCK = 256
# vector elements (rows x dims) up to which a product runs on one BLAS thread: the sample vault's 180 x 768
# cost 3.5 CPU-ms a query on two threads against 3.0 on one, at 60,000 x 768 two threads halve the wall
SMALL_PRODUCT = 4_000_000
CANDIDATE_BLOCK = 256  # rows per block whose maximum bounds a query's k-th best score (`_candidates`)
_LOCK = threading.RLock()
_CACHE: OrderedDict[str, Matrix] = OrderedDict()  # chunks table uri -> its vectors at the version used last
_MAX_TABLES = 4  # tables (collections) a process keeps vectors of, the least recently used dropped first


@dataclass
class Matrix:
    """One chunks version's searched vectors, in `_rowid` order."""

    version: int
    ids: np.ndarray  # sorted row ids (int64)
    vectors: np.ndarray  # float32 (rows, dim), unit length; damaged rows are zero and never served
    damaged: np.ndarray  # bool per row: a stored vector that is not finite or zero

    @property
    def nbytes(self) -> int:
        return int(self.vectors.nbytes + self.ids.nbytes + self.damaged.nbytes)


def matrix(ds, column: str = "vector") -> Matrix:
    """The vectors of dataset `ds` (a pinned Lance version): loaded on first use, then kept for this process
    until another version of the same table is asked for."""
    key, version = ds.uri, int(ds.version)
    with _LOCK:
        got = _CACHE.get(key)
        if got is not None and got.version == version:
            _CACHE.move_to_end(key)
            return got
        _CACHE.pop(key, None)  # the old version goes before the new one loads: never two copies
        dim = ds.schema.field(column).type.list_size
        vec = np.empty((ds.count_rows(), dim), np.float32)
        ids = np.empty(len(vec), np.int64)
        at = 0
        for b in ds.to_batches(columns=[column], with_row_id=True, batch_size=8192):  # no second whole copy
            n = b.num_rows
            arr = b.column(column)
            flat = arr.values.slice(arr.offset * dim, n * dim).to_numpy(zero_copy_only=False)
            vec[at:at + n] = np.asarray(flat, np.float32).reshape(n, dim)
            if arr.null_count:  # a missing vector is damaged: never served
                vec[at:at + n][arr.is_null().to_numpy(zero_copy_only=False)] = np.nan
            ids[at:at + n] = b.column("_rowid").to_numpy()
            at += n
        vec, ids = vec[:at], ids[:at]
        if len(ids) > 1 and not (np.diff(ids) > 0).all():
            order = np.argsort(ids, kind="stable")
            vec, ids = vec[order], ids[order]
        norms = np.linalg.norm(vec, axis=1)
        damaged = ~np.isfinite(norms) | (norms == 0)
        vec /= np.where(damaged, 1.0, norms)[:, None]
        if damaged.any():
            vec[damaged] = 0.0
        m = Matrix(version, ids, np.ascontiguousarray(vec), damaged)
        _CACHE[key] = m
        while len(_CACHE) > _MAX_TABLES:
            _CACHE.popitem(last=False)
        log.info("loaded %d x %d vectors of %s (version %d) for exact search: %.0f MB", len(vec), dim, key,
                 version, m.nbytes / 2**20)
        return m


def top_k(m: Matrix, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query index, row position, cosine distance) of each query's k nearest rows (among `allowed`, a bool
    per row, when given), best first per query; ties in row order. Damaged rows never appear; a query vector
    of length zero gets none."""
    keep = ~m.damaged if allowed is None else (allowed & ~m.damaged)
    every = bool(keep.all())
    n = int(keep.sum())
    # float32 first, as the query-vector cache stores them: a vector fresh from the model and the same vector
    # read back from the cache then score alike to the last bit (ties among equal scores break the same way)
    queries = np.asarray(queries, dtype=np.float32)
    qn = np.linalg.norm(queries, axis=1)
    q = (queries / np.where(qn > 0, qn, 1.0)[:, None]).astype(np.float32)
    kk = min(k, n)
    if kk <= 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.float32)
    # a small allowed set: the product over those rows only
    sub = None if every or n > len(keep) // 2 else np.flatnonzero(keep)
    vecs = m.vectors if sub is None else m.vectors[sub]
    small = vecs.size <= SMALL_PRODUCT
    # a small table's products are too short for BLAS's second thread to pay: it only spins (CPU, no wall)
    with _blas_threads(1 if small else None):
        return _top_k_blocks(q, qn, vecs, sub, keep, every, kk, QUERY_BLOCK if small else 0)


@contextlib.contextmanager
def _blas_threads(n: int | None):
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(n, user_api="blas"):
        yield


def _top_k_blocks(q: np.ndarray, qn: np.ndarray, vecs: np.ndarray, sub: np.ndarray | None, keep: np.ndarray,
                  every: bool, kk: int, fixed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`top_k` over blocks of query rows: `fixed` rows each, short ones zero-padded (one product shape), or
    (0) up to LARGE_QUERY_BLOCK rows unpadded."""
    out_q, out_p, out_d = [], [], []
    step = fixed or LARGE_QUERY_BLOCK
    for a in range(0, len(q), step):
        blk = q[a:a + step]
        if fixed and len(blk) < fixed:
            blk = np.concatenate([blk, np.zeros((fixed - len(blk), q.shape[1]), np.float32)])
        s = (blk @ vecs.T)[:min(step, len(q) - a)]  # cosine similarity
        if sub is None and not every:
            s[:, ~keep] = -np.inf
        r, c = _candidates(s, kk)
        sc = s[r, c]
        order = np.lexsort((c, -sc, r))  # per query: best first, equal scores in row order
        r, c, sc = r[order], c[order], sc[order]
        counts = np.bincount(r, minlength=len(s))
        first = np.repeat(np.cumsum(counts) - counts, counts)
        top = (np.arange(len(r)) - first) < kk
        rows, pos, sim = (r[top] + a).astype(np.int32), c[top], sc[top]
        ok = np.isfinite(sim) & (qn[rows] > 0)
        out_q.append(rows[ok])
        out_p.append((pos if sub is None else sub[pos])[ok])
        out_d.append((1.0 - sim[ok]).astype(np.float32))
    return np.concatenate(out_q), np.concatenate(out_p), np.concatenate(out_d)


def _candidates(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(query, row) of a superset of each query's k best scores in `s`: those at or above the k-th best of
    the rows' block maxima (k blocks hold at least k scores that high), a few more than k a query. Three
    passes over `s` instead of a partition of every row (~5x less CPU at 60,000 rows)."""
    nq, n = s.shape
    b = min(CANDIDATE_BLOCK, n // (4 * k))  # at least 4k blocks: the bound stays close to the k-th best
    if b < 8:  # a small table: each row's k-th best itself is the bound
        if k >= n:
            return np.repeat(np.arange(nq), n), np.tile(np.arange(n), nq)
        bound = np.partition(s, n - k, axis=1)[:, n - k]  # every row tied with it stays a candidate: ties
        # at the cut go in row order, as Lance's flat search keeps them
        return np.nonzero(s >= bound[:, None])
    nb = n // b
    m = s[:, :nb * b].reshape(nq, nb, b).max(axis=2)
    if n > nb * b:
        m = np.concatenate([m, s[:, nb * b:].max(axis=1, keepdims=True)], axis=1)
    bound = np.partition(m, m.shape[1] - k, axis=1)[:, m.shape[1] - k]
    return np.nonzero(s >= bound[:, None])


def search(col: Any, ds, queries: np.ndarray, k: int, select: list[str], where: str | None) -> pa.Table | None:
    """`Collection.vector_search_many`'s table (`query_index`, `select`, `_distance`) by exact search over
    `ds`, the pinned chunks version; None when the prefilter `where` cannot be evaluated here (Lance then
    answers, and says what is wrong with it)."""
    m = matrix(ds)
    allowed = None
    if where:
        from fanout.store.fts import _allowed

        allowed = _allowed(ds, m.ids, where)
        if allowed is None:
            return None
    if m.damaged.any():
        log.error("table %s in %s has %d damaged vectors, left out of the results; repair with `fanout index` (it "
                  "re-embeds damaged notes) or %s", col.chunks_name, col.db_dir, int(m.damaged.sum()), col.hint())
    qi, pos, dist = top_k(m, queries, k, allowed)
    cols = [c for c in select if c not in ("_distance", "query_index")]
    keys = col.row_keys(tuple(cols)) if cols else None
    if keys is not None and len(keys[0]) == len(m.ids):
        picked = keys[1].take(pa.array(pos))
    elif cols:
        ids = m.ids[pos]
        uniq, inv = np.unique(ids, return_inverse=True)
        got = ds._take_rows(pa.array(uniq, pa.uint64()), columns=cols) if len(uniq) else \
            ds.schema.empty_table().select(cols)
        picked = got.take(pa.array(inv.reshape(-1)))
    else:
        picked = pa.table({})
    out = pa.table({"query_index": pa.array(qi, pa.int32())})
    for c in cols:
        out = out.append_column(c, picked[c])
    return out.append_column("_distance", pa.array(dist, pa.float32()))


def loaded_bytes() -> int:
    """Bytes of vectors this process holds for exact search (all tables)."""
    with _LOCK:
        return sum(m.nbytes for m in _CACHE.values())
