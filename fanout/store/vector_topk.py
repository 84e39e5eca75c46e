"""Exact top-k over a matrix of unit vectors (fanout/store/exact_vectors.py `Matrix`): a batch of query vectors
against every allowed row, one BLAS product per block of queries, each query's scores summed in float64 so that
neither its batch, the product's shape nor the CPU's BLAS kernel changes its float32 scores or its tie order.
Also used by fanout/store/ann_rescore.py to re-score a vector index's candidates the same way.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import numpy as np

# query vectors per product: each product reads every vector once, so 16-row products cost 2.75x the CPU of
# 256-row ones at 60,000 x 768 (docs/performance.md). Scores are summed in float64 (a small table's whole
# product; a large table's candidates, per pair: `pair_cosines`), so neither the block's shape nor the CPU's
# BLAS kernel changes a query's float32 scores or its tie order
QUERY_BLOCK = 256
# vector elements (rows x dims) up to which a table is "small": its product runs on one BLAS thread (the
# sample vault's 180 x 768 cost 3.5 CPU-ms a query on two threads against 3.0 on one; at 60,000 x 768 two
# threads halve the wall) and in float64 over a float64 copy (at most 32 MB; a float32 product plus the
# candidates' float64 re-scoring cost more CPU where most rows are candidates, as ties make them)
SMALL_PRODUCT = 4_000_000
CANDIDATE_BLOCK = 32  # rows per block whose maximum bounds a query's k-th best score (`_candidates`)
_CONTROLLER = None  # threadpoolctl's view of this process's BLAS (`_blas_threads`)


class Vectors(Protocol):
    """What `top_k` reads of a version's vectors (exact_vectors.Matrix): its rows, or a delta version's rows
    stacked (an older version's then the rows added since), each with its position in the version (`at`)."""

    ids: np.ndarray  # the version's sorted row ids (one per position)
    vectors: np.ndarray  # float32 (rows, dim), unit length; damaged rows zero
    damaged: np.ndarray  # bool per row (stacked row): never served
    added: np.ndarray | None  # a delta version: the rows added after `vectors`' (float32 unit, damaged zero)
    at: np.ndarray | None  # a delta version: each stacked row's position (-1: gone; ascending otherwise)

    def float64(self) -> np.ndarray: ...


class Stacked:
    """Two arrays of rows read as one, the second's after the first's (a delta version's stacked rows)."""

    def __init__(self, first: np.ndarray, second: np.ndarray):
        self.first, self.second = first, second
        self.shape = (len(first) + len(second), first.shape[1])

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        n = len(self.first)
        if not len(rows) or rows.max() < n:
            return self.first[rows]
        out = np.empty((len(rows), self.shape[1]), self.first.dtype)
        low = rows < n
        out[low] = self.first[rows[low]]
        out[~low] = self.second[rows[~low] - n]
        return out

    def product(self, q: np.ndarray) -> np.ndarray:
        """`q @ rows.T`, one product per array (float32: its rounding only picks candidates, see `top_k`)."""
        return np.concatenate([q @ self.first.T, q @ self.second.T], axis=1)


def stacked(m: Vectors) -> np.ndarray | Stacked:
    """`m`'s rows as one array, or as a Stacked view (a delta version: nothing copied)."""
    return m.vectors if m.added is None else Stacked(m.vectors, m.added)


def top_k(m: Vectors, queries: np.ndarray, k: int, allowed: np.ndarray | None = None, threads: int = 0
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query index, row position, cosine distance) of each query's k nearest rows (among `allowed`, a bool
    per row, when given), best first per query; ties in row order. Damaged rows never appear; a query vector
    of length zero gets none. `threads`: BLAS threads of a large table's products (0: the library's default).

    A query's scores and order do not depend on the other queries of its batch nor on the CPU's BLAS kernel:
    they are summed in float64 and rounded to float32. A small table's product runs in float64; on a large
    one the float32 product (whose rounding depends on its shape's kernel) only picks each query's
    candidates, with a margin of its worst-case rounding (`_margin`), and the candidates are then scored in
    float64 (`pair_cosines`)."""
    if m.at is None:
        keep = ~m.damaged if allowed is None else (allowed & ~m.damaged)
    else:  # a delta version: its stacked rows, those gone never served
        keep = ~m.damaged & (m.at >= 0)
        if allowed is not None:
            keep &= allowed[np.maximum(m.at, 0)]
    every = bool(keep.all())
    n = int(keep.sum())
    # float32 first, as the query-vector cache stores them: a vector fresh from the model and the same vector
    # read back from the cache then score alike to the last bit
    queries = np.asarray(queries, dtype=np.float32)
    qn = np.linalg.norm(queries, axis=1)
    q = (queries / np.where(qn > 0, qn, 1.0)[:, None]).astype(np.float32)
    kk = min(k, n)
    if kk <= 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.float32)
    # a small allowed set: the product over those rows only (sizes are the version's, not its stacked rows')
    sub = None if every or n > len(m.ids) // 2 else np.flatnonzero(keep)
    vecs = stacked(m) if sub is None else stacked(m)[sub]
    small = (len(m.ids) if sub is None else len(sub)) * vecs.shape[1] <= SMALL_PRODUCT
    if small:  # float64: a small copy, and the product's scores are already exact to float32
        v64 = m.float64() if sub is None else m.float64()[sub]
    margin = _margin(q.shape[1])
    out: tuple[list, list, list] = ([], [], [])
    # a small table's products are too short for BLAS's second thread to pay: it only spins (CPU, no wall)
    with _blas_threads(1 if small else (threads or None)):
        for a in range(0, len(q), QUERY_BLOCK):
            blk = q[a:a + QUERY_BLOCK]
            if small:
                s = (blk.astype(np.float64) @ v64.T).astype(np.float32)  # as `pair_cosines` computes them
            else:  # cosine similarity, rounded as this shape's kernel sums
                s = blk @ vecs.T if isinstance(vecs, np.ndarray) else vecs.product(blk)
            if sub is None and not every:
                s[:, ~keep] = -np.inf
            if small:
                r, c = _candidates(s, kk)
                sc = s[r, c]
            else:  # the float32 product picks the candidates, with the margin of its rounding
                r, c = _candidates(s, kk, margin)
                sc = pair_cosines(vecs, c, blk, r)
                if sub is None and not every:
                    sc[~keep[c]] = -np.inf
            keep_best(r, c, sc, kk, a, qn, sub, out)
    qi, pos, dist = _joined(out)
    return qi, (pos if m.at is None else m.at[pos]), dist  # (stacked rows in position order: the same ties)


def _margin(dim: int) -> float:
    """Twice the worst-case rounding error of a float32 dot product of two unit vectors of `dim` components,
    whatever order a BLAS kernel sums them in (n u / (1 - n u), u = 2^-24, Higham's bound): a row whose
    exact cosine reaches the k-th best is within this of the k-th best product, on any CPU."""
    nu = dim * 2.0 ** -24
    return 2.0 * nu / (1.0 - nu) + 1e-7


def pair_cosines(vecs: np.ndarray | Stacked, rows: np.ndarray, q: np.ndarray, qrows: np.ndarray) -> np.ndarray:
    """The dot products of `vecs[rows[i]]` and `q[qrows[i]]` (unit float32 vectors), in float64: every
    component product is exact there and the sum's error (~1e-16) is far below float32's rounding, so the
    float32 result is the same whatever the batch, its shape or the CPU's BLAS kernel (unless a cosine lies
    within ~1e-13 of a float32 rounding midpoint: about one score in a billion). `qrows` in runs (each
    query's candidates together): one matrix-vector product per run, on its gathered rows."""
    out = np.empty(len(rows), np.float32)
    if not len(rows):
        return out
    q64 = q.astype(np.float64)
    cut = np.flatnonzero(np.diff(qrows)) + 1
    for a, b in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [len(rows)]]).tolist()):
        out[a:b] = vecs[rows[a:b]].astype(np.float64) @ q64[qrows[a]]
    return out


@contextlib.contextmanager
def _blas_threads(n: int | None):
    if n is None:
        yield
        return
    global _CONTROLLER
    if _CONTROLLER is None:  # finding the loaded BLAS libraries is most of threadpool_limits' ~0.1 ms a call
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    with _CONTROLLER.limit(limits=n, user_api="blas"):
        yield


def keep_best(r: np.ndarray, c: np.ndarray, sc: np.ndarray, kk: int, a: int, qn: np.ndarray,
               sub: np.ndarray | None, out: tuple[list, list, list]) -> None:
    """A query block's candidates (query r, position c, cosine sc) -> each query's `kk` best, best first and
    equal scores in row order, appended to `out` as (query row + `a`, row position, distance); queries of no
    length and unusable scores left out; `sub` maps positions among allowed rows to the table's."""
    order = np.lexsort((c, -sc, r))
    r, c, sc = r[order], c[order], sc[order]
    counts = np.bincount(r)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    top = (np.arange(len(r)) - first) < kk
    rows, pos, best = (r[top] + a).astype(np.int32), c[top], sc[top]
    ok = np.isfinite(best) & (qn[rows] > 0)
    out[0].append(rows[ok])
    out[1].append((pos if sub is None else sub[pos])[ok])
    out[2].append((1.0 - best[ok]).astype(np.float32))


def _joined(out: tuple[list, list, list]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.concatenate(out[0]), np.concatenate(out[1]), np.concatenate(out[2])


def _candidates(s: np.ndarray, k: int, margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(query, row) of a superset of each query's k best scores in `s`: those at or above the k-th best of
    the row blocks' maxima (k blocks hold at least k scores that high) less `margin`, so that a row whose
    exact score is among the k best is kept whatever the rounding of `s`; a few more than k a query, grouped by
    query (rows in no particular order: `keep_best` orders them). One pass over `s` and a look into the
    blocks that reach the bound instead of a partition of every row (~5x less CPU at 60,000 rows). A block is
    every nb-th row (rows j, j + nb, j + 2 nb, ...): their maxima are an element-wise maximum of
    CANDIDATE_BLOCK slices of `s`, which vectorises where a maximum over each run of adjacent rows does not,
    so blocks can be small and the bound tight (0.04 against 0.09 ms a query vector at 60,000 rows)."""
    nq, n = s.shape
    b = min(CANDIDATE_BLOCK, n // (4 * k))  # at least 4k blocks: the bound stays close to the k-th best
    if b < 8:  # a small table: each row's k-th best itself is the bound
        if k >= n:
            return np.repeat(np.arange(nq), n), np.tile(np.arange(n), nq)
        bound = np.partition(s, n - k, axis=1)[:, n - k] - margin  # every row tied with it stays a
        # candidate: ties at the cut go in row order, as Lance's flat search keeps them
        rows, cols = np.nonzero(s >= bound[:, None])
        return rows, cols
    nb = n // b
    view = s[:, :nb * b].reshape(nq, b, nb)  # [q, i, j]: row i nb + j, of block j
    m = view.max(axis=1)
    tail = s[:, nb * b:]
    if tail.shape[1]:
        m = np.concatenate([m, tail.max(axis=1, keepdims=True)], axis=1)
    bound = np.partition(m, m.shape[1] - k, axis=1)[:, m.shape[1] - k] - margin
    # only the blocks whose maximum reaches the bound hold candidates (a few more than k a query): their
    # scores are looked at, not all of `s` (np.nonzero over all of it cost ~0.13 ms a query at 60,000 rows)
    qi, bi = np.nonzero(m[:, :nb] >= bound[:, None])
    j, i = np.nonzero(view[qi, :, bi] >= bound[qi][:, None])
    r, c = qi[j], i * nb + bi[j]  # grouped by query (qi ascending)
    if tail.shape[1]:
        tr, tc = np.nonzero(tail >= bound[:, None])
        r, c = np.concatenate([r, tr]), np.concatenate([c, tc + nb * b])
        order = np.argsort(r, kind="stable")
        r, c = r[order], c[order]
    return r, c
