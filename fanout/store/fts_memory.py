"""The `memory` full-text engine: Lance's BM25 over postings held in memory, a query's lists in numpy.

Each full-text call into Lance costs ~1.4 ms of CPU on the sample and benchmark indexes (most of it per call: query
planning, its thread pool) and ~5 ms at 60,000 chunks (bench/query_cost.py, issue 23), two a query. This engine
computes the same lists without calling Lance: per FTS column it tokenizes the pinned version's texts ONCE with
Lance's own tokenizer (`lance.tokenize`, with the parameters the column's index was built with, read from
`index_statistics`) and keeps each token's postings (row position, term frequency; its BM25 contributions
computed at its first use). A query is then one `lance.tokenize` per language and a few numpy operations per
column, scored as Lance 13 scores a MultiMatch query
(Lance 1.0's source, the one reachable here, corrected where 13 differs, and checked against it bit for bit, on
~5,000 query texts over the benchmark's and the sample's indexes: bench/fts_engines.py; tests/test_fts_memory.py):

- per column, BM25 with k1 = 1.2, b = 0.75 in float32: idf = ln(1 + (N - n + 0.5) / (n + 0.5)), a document's
  weight (k1 + 1) f / (f + k1 (1 - b + b dl / avgdl)); N, dl and avgdl count only documents with at least
  one token; a token repeated in the query counts each time, summed in query order; x the column's boost;
- per column the top k (ties: lower row id first), then per row the best column's score, top k again;
- with a prefilter, the same over the rows it keeps (N, avgdl and idf stay the whole column's).

A column is served from memory when its index has one segment of the `text` tokenizer and, if it was built on
exactly the pinned rows, the same document and token counts as the rows give (anything else is answered by Lance
itself: `memory_column` returns None and says why at debug level). An index built before rows were added or
deleted (an index round updates Lance's index only past `index.fts_rebuild_share`, pipelines/index.py) lends its
tokenizer only: the scores are those of the pinned rows, what a rebuild of the index gives (Lance's own search
of such an index counts the deleted rows in N and avgdl until it is rebuilt). fanout/store/fts_delta.py brings
one version's postings to the next by tokenizing only the rows added (fanout/store/fts_postings.py `ensure`).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fanout.store import process_memory
from fanout.store.fts_index_meta import index_meta, updated_since

if TYPE_CHECKING:
    from lance import LanceDataset

log = logging.getLogger(__name__)
# CPU to build the postings of one chunk's text in one column (Lance's tokenizer on it, counting): measured
# 0.04-0.08 ms (the sample vault's 6 columns 0.083, the benchmark's English index 0.067, a 60,000-chunk
# synthetic index 0.042); retrieve.fts_memory_after weighs it against the Lance calls a process makes
BUILD_S_PER_CELL = 0.00006
K1 = np.float32(1.2)
B = np.float32(0.75)


# How `MemoryColumn.top` adds a query's postings up and cuts them to the k best; none changes a result, each
# was chosen by bench/fts_memory_cost.py on a 60,000-chunk index (docs/performance.md):
# - the rows of postings this many times shorter than the column are found as the union of their slices,
#   longer ones by a pass over every row (the union's fixed cost counted as SPARSE_BASE more postings: a pass
#   over 4,000 rows costs what it does);
SPARSE_RATIO = 8
SPARSE_BASE = 512
# - a token in at least 1/this of the rows is kept (at its first use) as an array of every row, added in one
#   pass (~5 us at 60,000 rows against ~12 us for 7,500 postings added one by one); these arrays never hold
#   more bytes than the postings themselves;
DENSE_RATIO = 8
# - of more than 4 k x this scores, the k-th best of every STRIDE-th is a first cut (a partition of 1/STRIDE).
STRIDE = 16
_SCRATCH = threading.local()  # this thread's float32 array of every row (`_sums_top`), zeros between calls


class Column:
    """What a search reads of one FTS column's postings (`top`): each token's rows (positions in the pinned rows,
    ascending) and their float32 BM25 contributions, computed at a token's first use in this process from its
    term frequencies and the rows' token counts (elementwise as a build computes them: the same bits) and kept.
    `MemoryColumn` holds them as one run per token; fanout/store/fts_delta.py's `DeltaColumn` as an older
    version's runs plus the rows added since. Subclasses give `_hits`, `_contrib` and `dl`."""

    tokenize_args: dict[str, Any]
    n_rows: int

    def _setup(self, tokenize_args: dict[str, Any], n_rows: int, full_bytes: int) -> None:
        self.tokenize_args, self.n_rows = tokenize_args, n_rows
        self.analyzer = tuple(sorted(tokenize_args.items()))  # columns with equal ones tokenize a query alike
        self._norm: np.ndarray | None = None  # per row: k1 (1 - b + b dl / avgdl) (`_stats`)
        self._n_docs = 0
        self._contribs: dict[Any, np.ndarray] = {}  # token key -> that token's contributions (`_contrib`)
        self._full: dict[Any, np.ndarray] = {}  # token key -> a frequent token's contributions, every row
        self._full_left = full_bytes  # bytes those arrays may still take

    @property
    def dl(self) -> np.ndarray:
        """Each row's token count (uint32)."""
        raise NotImplementedError

    def _hits(self, tokens: list[str]) -> list[tuple[Any, np.ndarray]]:
        """(a key of the token's postings for `_contrib`, its rows) of each of `tokens` some row holds, in order."""
        raise NotImplementedError

    def _contrib(self, key: Any, rows: np.ndarray, keep: bool = True) -> np.ndarray:
        """The contributions of the token `key` in its `rows` (kept once computed, unless not `keep`)."""
        raise NotImplementedError

    def _stats(self) -> tuple[np.ndarray, int]:
        """(norm per row, N): BM25's statistics of exactly these rows (N and avgdl count the rows with a token),
        as Lance scores a freshly built index; computed at the first use (two threads may both: the same)."""
        if self._norm is None:
            dl = self.dl
            n_docs = int(np.count_nonzero(dl))
            total = int(dl.sum(dtype=np.int64))
            avgdl = np.float32(total) / np.float32(n_docs) if n_docs else np.float32(1)
            self._n_docs = n_docs
            self._norm = K1 * (np.float32(1) - B + B * dl.astype(np.float32) / avgdl)
        return self._norm, self._n_docs

    def _computed(self, key: Any, freq: np.ndarray, rows: np.ndarray, keep: bool) -> np.ndarray:
        """The contributions of a token in `rows` with term frequencies `freq` (kept under `key` if `keep`)."""
        norm, n_docs = self._stats()
        got = (_idf(len(rows), n_docs) * _weight(freq, norm[rows])).astype(np.float32)
        if keep:
            self._contribs[key] = got
        return got

    def top(self, tokens: list[str], k: int, allowed: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray] | None:
        """(positions, scores) of this column's top k for the query's tokens, None when none matches;
        `allowed` (a bool per row): a prefilter, the top k of the rows it keeps (the statistics stay the
        whole column's, as Lance's prefiltered search keeps them)."""
        hits = self._hits(tokens)
        if not hits:
            return None
        if len(hits) == 1:
            key, cand = hits[0]
            score = self._contrib(key, cand)
            if allowed is not None:
                keep = allowed[cand]
                cand, score = cand[keep], score[keep]
            return topk(cand, score, k) if len(cand) else None
        full = [self._full_row(key, r) if len(r) * DENSE_RATIO >= self.n_rows else None for key, r in hits]
        return _sums_top(self._contrib, hits, full, self.n_rows, k, allowed)

    def _full_row(self, key: Any, rows: np.ndarray) -> np.ndarray | None:
        """The contributions of the token `key` (in `rows`) as an array of every row (0 where it is not), built
        at its first use while the budget lasts (None after; two threads may both build one: the same)."""
        got = self._full.get(key)
        if got is None and self._full_left >= 4 * self.n_rows:
            self._full_left -= 4 * self.n_rows
            got = np.zeros(self.n_rows, np.float32)
            got[rows] = self._contrib(key, rows, keep=False)
            self._full[key] = got
        return got


class MemoryColumn(Column):
    """One FTS column's postings as one run per token: token -> slice of `rows` (positions in the pinned rows,
    ascending) and of `freq` (the token's term frequency in each of those rows). `contrib`, when given, are the
    contributions of every posting (the query-side tests' columns)."""

    def __init__(self, tokenize_args: dict[str, Any], slices: dict[str, tuple[int, int]], rows: np.ndarray,
                 contrib: np.ndarray | None, n_rows: int, freq: np.ndarray | None = None,
                 dl: np.ndarray | None = None):
        if contrib is None and freq is None:
            raise ValueError("postings need their contributions or their term frequencies")
        self._setup(tokenize_args, n_rows, 2 * rows.nbytes)
        self.slices, self.rows = slices, rows
        self.freq = freq  # each posting's term frequency (what the contributions are computed from)
        self._given = contrib
        self._dl = dl  # per row: its token count (the sum of its postings' freq), kept once known (`dl`)

    @property
    def contrib(self) -> np.ndarray:
        """Every posting's contribution, in `rows` order (the given ones, or all computed at once and kept: the
        tests' and benches' reference, not the query path)."""
        if self._given is None:
            self._given = self._every_contrib()
        return self._given

    def _every_contrib(self) -> np.ndarray:
        if not len(self.rows):
            return np.zeros(0, np.float32)
        lengths = np.array([e - s for s, e in self.slices.values()], np.int64)
        counts, where = np.unique(lengths, return_inverse=True)  # idf depends on a token's document count only
        norm, n_docs = self._stats()
        idf = np.array([_idf(int(n), n_docs) for n in counts], np.float32)[where.reshape(-1)]
        order = np.argsort([s for s, _ in self.slices.values()], kind="stable")  # slices in `rows` order
        assert self.freq is not None  # no contributions given: built from the frequencies
        return (np.repeat(idf[order], lengths[order]) * _weight(self.freq, norm[self.rows])).astype(np.float32)

    @property
    def dl(self) -> np.ndarray:
        """Each row's token count (uint32): given (a build, an update, the postings file), else summed from the
        postings once (~0.1 s for 5 million)."""
        if self._dl is None:
            got = np.bincount(self.rows, weights=self.freq, minlength=self.n_rows) if len(self.rows) else \
                np.zeros(self.n_rows)
            self._dl = got.astype(np.uint32)
        return self._dl

    def _hits(self, tokens: list[str]) -> list[tuple[Any, np.ndarray]]:
        slices, rows = self.slices, self.rows  # (key: the slice's start)
        return [(g[0], rows[g[0]:g[1]]) for t in tokens if (g := slices.get(t)) is not None]

    def _contrib(self, key: Any, rows: np.ndarray, keep: bool = True) -> np.ndarray:
        s, e = key, key + len(rows)
        if self._given is not None:
            return self._given[s:e]
        got = self._contribs.get(s)
        if got is None:
            assert self.freq is not None  # no contributions given: built from the frequencies
            got = self._computed(s, self.freq[s:e], rows, keep)
        return got


def _weight(freq: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """BM25's term-frequency part (k1 + 1) f / (f + norm) in float32, elementwise (any slice: the same bits)."""
    f = freq.astype(np.float32)
    return (K1 + np.float32(1)) * f / (f + norm)


def _sums_top(contrib: Callable[[Any, np.ndarray], np.ndarray], hits: list[tuple[Any, np.ndarray]],
              full: list[np.ndarray | None], n_rows: int, k: int, allowed: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray] | None:
    """`Column.top` of several tokens' postings ((key, rows) each): their float32 sums per row, added up in this
    thread's array of every row (reused: all zeros between calls, so no allocation and no page faults per call),
    then the k best of the rows they hold. `full[i]`: hit i's contributions as an array of every row, else None
    (`contrib(key, rows)` gives them for its rows)."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < n_rows:
        buf = _SCRATCH.buf = np.zeros(n_rows, np.float32)
    buf = buf[:n_rows]
    try:
        for (key, rows), f in zip(hits, full):  # one float32 add per query token, in query order (Lance's
            # sums, to the bit)
            if f is not None:  # + 0.0 where the token is not: the sum unchanged
                np.add(buf, f, out=buf)
            else:  # a token's rows are distinct: add.at adds what `buf[r] += c` adds, faster
                np.add.at(buf, rows, contrib(key, rows))
        if (sum(len(r) for _, r in hits) + SPARSE_BASE) * SPARSE_RATIO < n_rows:
            # few rows: their union (each token's rows are ascending), cheaper than a pass over every row
            srt = np.sort(np.concatenate([r for _, r in hits]))
            first = np.empty(len(srt), bool)
            first[0] = True
            np.not_equal(srt[1:], srt[:-1], out=first[1:])
            cand = srt[first]
            score = buf[cand]
            buf[cand] = 0  # all zeros again
            if not score.all():  # a sum of 0 (never, with contributions > 0): left out, as below
                cand, score = cand[score != 0], score[score != 0]
        else:
            cut = np.float32(0)
            if allowed is None and 0 < k and n_rows >= 4 * k * STRIDE:
                cut = max(_kth(buf[::STRIDE], k), cut)  # a first cut (`topk`); 0: fewer than k rows matched
            # every contribution is > 0: the rows some token matched are those not 0 (a bool array's nonzero
            # is ~3x faster than a float32 one's at 60,000 rows)
            keep = buf >= cut if cut > 0 else buf != 0
            if allowed is not None:
                keep &= allowed
            cand = np.flatnonzero(keep)
            score = buf[cand]
            buf.fill(0)  # all zeros again
            allowed = None
    except BaseException:
        _SCRATCH.buf = None  # stopped half-way: not reused
        raise
    if allowed is not None:
        keep = allowed[cand]
        cand, score = cand[keep], score[keep]
    return topk(cand, score, k) if len(cand) else None


def topk(pos: np.ndarray, score: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (highest score first, lower position first among equal scores)."""
    if 0 < k and len(pos) >= 4 * k * STRIDE:  # a first cut: the k-th best of every STRIDE-th row is at most
        keep = np.flatnonzero(score >= _kth(score[::STRIDE], k))  # the k-th best of all (a partition of a
        pos, score = pos[keep], score[keep]  # STRIDE-th of them, ~k * STRIDE rows left)
    if len(pos) > 4 * k:  # cut to the scores at or above the k-th before sorting
        keep = np.flatnonzero(score >= _kth(score, k))
        pos, score = pos[keep], score[keep]
    order = np.lexsort((pos, -score))[:k]
    return pos[order], score[order]


def _kth(score: np.ndarray, k: int) -> np.float32:
    """The k-th highest of `score` (k <= its length)."""
    return np.partition(score, len(score) - k)[len(score) - k]


def search(columns: list[Column], boosts: list[float], text: str, k: int, allowed: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """One MultiMatch query over `columns`: (positions, float32 scores), best first, at most k (of the
    `allowed` rows when a prefilter is given)."""
    import lance

    tokens: dict[tuple, list[str]] = {}
    parts = []
    for col, boost in zip(columns, boosts):
        if col.analyzer not in tokens:  # the body/title/heading columns of one language share one tokenize call
            tokens[col.analyzer] = [t.text for t in lance.tokenize(text, **col.tokenize_args)]
        got = col.top(tokens[col.analyzer], k, allowed)
        if got is not None:
            parts.append((got[0], got[1] if boost == 1 else got[1] * np.float32(boost)))  # x 1.0: same bits
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    if len(parts) == 1:
        return parts[0]
    pos = np.concatenate([p for p, _ in parts])
    score = np.concatenate([s for _, s in parts])
    order = np.lexsort((-score, pos))  # per position, its best column first
    pos, score = pos[order], score[order]
    first = np.ones(len(pos), bool)
    first[1:] = pos[1:] != pos[:-1]
    return topk(pos[first], score[first], k)


def memory_column(ds: LanceDataset, column: str, ids: np.ndarray) -> MemoryColumn | None:
    """`column`'s postings from the pinned version `ds` (a Lance dataset), in the row order of `ids` (sorted
    row ids); None (and why, at debug level) when its index is not one this engine reproduces."""
    got = index_meta(ds, column)
    if isinstance(got, str):
        return _skip(ds, column, got)
    args, meta, st = got
    t = ds.to_table(columns=[column], with_row_id=True, **process_memory.LEAN_SCAN)
    at = np.searchsorted(ids, t["_rowid"].to_numpy())
    if len(ids) != t.num_rows or not (ids[np.minimum(at, len(ids) - 1)] == t["_rowid"].to_numpy()).all():
        return _skip(ds, column, "rows differ from the pinned row ids")
    from fanout.store.fts_tokens import build

    texts = itertools.chain.from_iterable(c.to_pylist() for c in t[column].chunks)  # a chunk of strings at a time
    b = build(zip(at.tolist(), texts), args, len(ids))
    if (b.n_docs != meta.get("num_docs") or len(b.tokens) != meta.get("num_tokens")) and not updated_since(ds, st):
        return _skip(ds, column, f"index has {meta.get('num_docs')} documents / {meta.get('num_tokens')} tokens, "
                                  f"the rows give {b.n_docs} / {len(b.tokens)}")
    return postings_column(args, b.tokens, b.lengths, b.rows, b.freq, len(ids), b.dl)


def postings_column(args: dict[str, Any], tokens: list[str], lengths: np.ndarray, rows: np.ndarray,
                    freq: np.ndarray, n_rows: int, dl: np.ndarray) -> MemoryColumn:
    """A MemoryColumn from its postings (token i's are the next lengths[i] entries of rows/freq), scored as Lance
    scores a freshly built index of exactly these rows (`MemoryColumn._contrib`, at their first use)."""
    ends = np.cumsum(lengths)
    slices = dict(zip(tokens, zip((ends - lengths).tolist(), ends.tolist())))
    return MemoryColumn(args, slices, rows, None, n_rows, freq, dl)


def _idf(token_docs: int, num_docs: int) -> np.float32:
    """Lance's idf in float32 (its f32 ops, then ln rounded to float32)."""
    n, q = np.float32(num_docs), np.float32(token_docs)
    x = (n - q + np.float32(0.5)) / (q + np.float32(0.5)) + np.float32(1.0)
    return np.float32(math.log(float(x)))


def _skip(ds: LanceDataset, column: str, why: str) -> MemoryColumn | None:
    log.debug("full-text column %s of %s is searched by Lance: %s", column, ds.uri, why)
    return None  # typed as its callers' result: `return _skip(...)` ends them
