"""The memory full-text engine's query side as it was before its CPU cut (908d953: dense float32 sums over every
row, a partition, a lexsort): the oracle tests/test_fts_memory_paths.py and bench/fts_memory_cost.py compare
fanout/store/fts_memory.py with, bit for bit."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def old_top(m, tokens, k, allowed=None):
    hits = [m.slices[t] for t in tokens if t in m.slices]
    if not hits:
        return None
    if len(hits) == 1:
        s, e = hits[0]
        cand, score = m.rows[s:e], m.contrib[s:e]
    else:
        dense = np.zeros(m.n_rows, np.float32)
        for s, e in hits:
            dense[m.rows[s:e]] += m.contrib[s:e]
        cand = np.flatnonzero(dense != 0)
        score = dense[cand]
    if allowed is not None:
        keep = allowed[cand]
        cand, score = cand[keep], score[keep]
    return old_topk(cand, score, k) if len(cand) else None


def old_topk(pos, score, k):
    if len(pos) > 4 * k:
        kth = np.partition(score, len(score) - k)[len(score) - k]
        keep = score >= kth
        pos, score = pos[keep], score[keep]
    order = np.lexsort((pos, -score))[:k]
    return pos[order], score[order]


def old_search(columns, boosts, tokens: list[str] | Callable, k, allowed=None):
    """`tokens`: the query's tokens for every column, or a function of the column giving them."""
    parts = []
    for col, boost in zip(columns, boosts):
        got = old_top(col, tokens(col) if callable(tokens) else tokens, k, allowed)
        if got is not None:
            parts.append((got[0], got[1] * np.float32(boost)))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    if len(parts) == 1:
        return parts[0]
    pos = np.concatenate([p for p, _ in parts])
    score = np.concatenate([s for _, s in parts])
    order = np.lexsort((-score, pos))
    pos, score = pos[order], score[order]
    first = np.ones(len(pos), bool)
    first[1:] = pos[1:] != pos[:-1]
    return old_topk(pos[first], score[first], k)


def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(a[0], b[0]) and b[1].dtype == np.float32 and \
        np.array_equal(np.asarray(a[1], np.float32).view(np.int32), b[1].view(np.int32))
