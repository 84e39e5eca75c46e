"""A full-text column's postings brought from one version to a later one at the cost of what changed: an older
version's postings (`base`: its memory-mapped file, or postings this process holds) kept as they are, the rows
gone masked out, and only the rows added tokenized (fanout/store/fts_postings.py `ensure`, after an index round).

A `DeltaColumn` answers as the postings a build of the later version's rows gives, bit for bit: a token's rows
are its base rows still there (moved to their new positions) followed by its added rows (added rows come after
every kept one: new fragments), its contributions computed from those at its first use exactly as a build's
(fanout/store/fts_memory.py `Column`). Nothing is done per token or per posting until a search uses a token,
so bringing a version up costs the rows added and an array per row (their new positions and token counts), not
the postings. `folded` writes them as one run per token (what the postings file holds), once the changes since
the file pass `index.query_files_share`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np

from fanout.store.chunk_rows import moved_rows
from fanout.store.fts_memory import Column, MemoryColumn, postings_column

_NONE = (np.zeros(0, np.int32), np.zeros(0, np.int32))


class DeltaColumn(Column):
    """`base`'s postings with each base position moved (`moved[p]`: its position now, -1: gone) and the postings of
    the rows added since (`added`: token -> slice of `added_rows` / `added_freq`, rows ascending, all after every
    kept base row); `dl`: every row's token count."""

    def __init__(self, base: MemoryColumn, moved: np.ndarray, added: dict[str, tuple[int, int]],
                 added_rows: np.ndarray, added_freq: np.ndarray, n_rows: int, dl: np.ndarray):
        self._setup(base.tokenize_args, n_rows, 2 * base.rows.nbytes)
        self.base, self.moved, self.added, self.added_rows, self.added_freq = base, moved, added, added_rows, \
            added_freq
        self._dl = dl
        self._tokens: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # token -> (rows, freq) now, at first use
        self._folded: MemoryColumn | None = None

    @property
    def dl(self) -> np.ndarray:
        return self._dl

    def _postings(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        """`token`'s (rows, term frequencies) in this version (empty when no row holds it), kept once made."""
        got = self._tokens.get(token)
        if got is None:
            rows, freq = [], []
            if (se := self.base.slices.get(token)) is not None:
                assert self.base.freq is not None  # (`updated_column` starts only from postings with them)
                r, f = self.moved[self.base.rows[se[0]:se[1]]], self.base.freq[se[0]:se[1]]
                keep = r >= 0
                rows.append(r if keep.all() else r[keep])
                freq.append(f if keep.all() else f[keep])
            if (se := self.added.get(token)) is not None:
                rows.append(self.added_rows[se[0]:se[1]])
                freq.append(self.added_freq[se[0]:se[1]])
            got = (np.concatenate(rows).astype(np.int32, copy=False), np.concatenate(freq)) if rows else _NONE
            self._tokens[token] = got
        return got

    def _hits(self, tokens: list[str]) -> list[tuple[Any, np.ndarray]]:
        return [(t, rows) for t in tokens if len(rows := self._postings(t)[0])]

    def _contrib(self, key: Any, rows: np.ndarray, keep: bool = True) -> np.ndarray:
        got = self._contribs.get(key)
        if got is None:
            got = self._computed(key, self._postings(key)[1], rows, keep)
        return got

    def folded(self) -> MemoryColumn:
        """The same postings as one run per token (base tokens first, in their order, then the added ones): what
        a build of these rows holds, and what the postings file stores. Made once (O(every posting))."""
        if self._folded is None:
            self._folded = _fold(self)
        return self._folded

    # the folded postings: what the tests and the postings file read (the query path never does)
    @property
    def slices(self) -> dict[str, tuple[int, int]]:
        return self.folded().slices

    @property
    def rows(self) -> np.ndarray:
        return self.folded().rows

    @property
    def freq(self) -> np.ndarray | None:
        return self.folded().freq

    @property
    def contrib(self) -> np.ndarray:
        return self.folded().contrib


def updated_column(old: Column, old_ids: np.ndarray, ids: np.ndarray, added: list[tuple[int, str | None]],
                   step: np.ndarray | None = None) -> DeltaColumn | None:
    """`old` (the postings of the rows `old_ids`, a MemoryColumn or a DeltaColumn) brought to the rows `ids` of a
    later version: the rows gone masked out, those of `added` (position in `ids`, text) tokenized, the rows' token
    counts carried over (the scores follow from the new counts at their first use): what `memory_column` builds
    from every row, tokenizing only the added ones. None when `old` has no term frequencies (an older file) or
    an added row is not after every kept one (compaction moved the row ids): the caller builds from every row.
    `step`: `moved_rows(old_ids, ids)` when known (a round's columns share it)."""
    if len(ids) == 0 or (isinstance(old, MemoryColumn) and old.freq is None):
        return None
    import lance

    step = moved_rows(old_ids, ids) if step is None else step  # old position -> new position (-1: gone)
    dl = np.zeros(len(ids), np.uint32)  # each row's token count: the kept rows' carried over, the added counted
    live = step >= 0
    dl[step[live]] = old.dl[live]
    if isinstance(old, DeltaColumn):  # the same base; its moves and added rows moved once more
        base, moved = old.base, np.where(old.moved >= 0, step[old.moved], -1).astype(np.int32)
        tokens = list(old.added)
        lengths = np.array([e - s for s, e in old.added.values()], np.int64)
        rows, freq = step[old.added_rows], old.added_freq
        tok = np.repeat(np.arange(len(tokens)), lengths)
        keep = rows >= 0
        tok, rows, freq = tok[keep], rows[keep], freq[keep]
    else:
        assert isinstance(old, MemoryColumn)
        base, moved, tokens = old, step, []
        tok, rows, freq = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32)
    index = dict(zip(tokens, range(len(tokens))))
    new_tok: list[int] = []
    new_rows: list[int] = []
    new_freq: list[int] = []
    for p, text in sorted(added, key=lambda x: x[0]):
        if not text:
            continue
        counts = Counter(x.text for x in lance.tokenize(text, **base.tokenize_args))
        dl[p] = sum(counts.values())
        for t, f in counts.items():
            i = index.get(t)
            if i is None:
                i = index[t] = len(tokens)
                tokens.append(t)
            new_tok.append(i)
            new_rows.append(p)
            new_freq.append(f)
    tok = np.concatenate([tok, np.array(new_tok, np.int64)])
    rows = np.concatenate([rows, np.array(new_rows, np.int32)])
    freq = np.concatenate([freq, np.array(new_freq, np.int32)])
    if len(rows) and int(rows.min()) <= int(moved.max(initial=-1)):
        return None  # added rows are appended after every kept one (new fragments); anything else: rebuild
    order = np.lexsort((rows, tok))  # by token (first appearance), then row
    tok, rows, freq = tok[order], rows[order], freq[order]
    lengths = np.bincount(tok, minlength=len(tokens))
    ends = np.cumsum(lengths)
    slices = {t: (e - n, e) for t, n, e in zip(tokens, lengths.tolist(), ends.tolist()) if n}
    return DeltaColumn(base, moved, slices, rows, freq, len(ids), dl)


def _fold(d: DeltaColumn) -> MemoryColumn:
    """`d`'s postings as one run per token: the base's runs without the rows gone, each token's added rows at the
    end of its run, the tokens of no row left out (Lance counts the tokens it holds)."""
    base = d.base
    assert base.freq is not None
    tokens = list(base.slices)  # in slice order (as built and as saved)
    bounds = np.fromiter(itertools.chain.from_iterable(base.slices.values()), np.int64, 2 * len(tokens)
                         ).reshape(-1, 2)
    kept = bounds[:, 1] - bounds[:, 0]
    rows, freq = d.moved[base.rows], base.freq
    gone = np.flatnonzero(rows < 0)  # the postings of rows gone
    if len(gone):
        np.subtract.at(kept, np.searchsorted(bounds[:, 1], gone, side="right"), 1)  # their tokens lose them
        keep = rows >= 0
        rows, freq = rows[keep], freq[keep]
    index = dict(zip(tokens, range(len(tokens))))
    for t in d.added:
        if t not in index:
            index[t] = len(tokens)
            tokens.append(t)
    lengths = np.concatenate([kept, np.zeros(len(tokens) - len(kept), np.int64)])
    if len(d.added_rows):  # each added posting goes at the end of its token's run (rows ascending)
        nt = np.repeat(np.array([index[t] for t in d.added], np.int64),
                       [e - s for s, e in d.added.values()])
        order = np.argsort(nt, kind="stable")  # by token as folded (each token's rows stay ascending)
        nt = nt[order]
        at = np.cumsum(lengths)[nt]
        rows, freq = np.insert(rows, at, d.added_rows[order]), np.insert(freq, at, d.added_freq[order])
        lengths += np.bincount(nt, minlength=len(tokens))
    present = lengths > 0
    tokens = [t for t, k in zip(tokens, present.tolist()) if k]
    return postings_column(base.tokenize_args, tokens, lengths[present], rows.astype(np.int32), freq, d.n_rows,
                           d.dl)
