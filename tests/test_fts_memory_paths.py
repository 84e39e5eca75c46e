"""The memory full-text engine's query side (fanout/store/fts_memory.py `top`, `topk`, `search`) against the
code it replaced (908d953's dense sums over every row, copied below): the same positions, order and float32
scores bit for bit, on random postings with ties, repeated tokens, prefilters, one-token queries, long and
short postings, every way of adding them up (the union of short postings, a pass over every row, frequent
tokens as arrays of every row), with and without the strided first cut, and from several threads at once
(tests/test_fts_memory.py checks against Lance)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fanout.store import fts_memory
from fanout.store.fts_memory import MemoryColumn, search, topk
from tests.support.fts_dense_reference import old_search, old_top, old_topk, same

ARGS = {"base_tokenizer": "simple", "lower_case": True}


def column(rng, n_rows: int, n_tokens: int = 60) -> MemoryColumn:
    """Random postings: token t0 in about half the rows, t1 in a fifth, the rest in 1..n_rows/50 rows; the
    contributions from a few values (many equal sums: ties) or any float32 (`t2`, `t3`)."""
    vals = np.array([0.5, 0.75, 1.25, 2.0, 1 / 3, 0.1], np.float32)
    rows, contrib, slices, at = [], [], {}, 0
    for i in range(n_tokens):
        size = n_rows // 2 if i == 0 else n_rows // 5 if i == 1 else \
            int(rng.integers(1, max(2, n_rows // 50)))
        r = np.sort(rng.choice(n_rows, size=size, replace=False)).astype(np.int32)
        c = rng.random(size).astype(np.float32) + np.float32(0.01) if i in (2, 3) else rng.choice(vals, size)
        rows.append(r)
        contrib.append(c.astype(np.float32))
        slices[f"t{i}"] = (at, at + size)
        at += size
    return MemoryColumn(ARGS, slices, np.concatenate(rows), np.concatenate(contrib), n_rows)


def queries(rng, n: int, n_tokens: int = 60) -> list[list[str]]:
    """1-6 tokens, repeats and unknown ones included; every fifth query has one of the long postings."""
    out = []
    for i in range(n):
        toks = [f"t{int(rng.integers(n_tokens + 3))}" for _ in range(int(rng.integers(1, 7)))]
        if i % 5 == 0:
            toks.append(f"t{i % 2}")
        if i % 7 == 0:
            toks.append(toks[0])  # a repeated token counts twice
        out.append(toks)
    return out + [["t0"], ["t1"], ["t5"], ["t0", "t0"], ["t0", "t1"], ["t9999"], []]


@pytest.mark.parametrize("n_rows", [300, 5000, 20000])
@pytest.mark.parametrize("ratio,stride,dense", [(8, 16, 8), (0, 16, 8), (10 ** 9, 16, 8), (8, 2, 8),
                                                (0, 16, 0), (0, 16, 10 ** 9), (10 ** 9, 2, 10 ** 9)])
def test_top_equals_the_dense_sums(monkeypatch, n_rows, ratio, stride, dense):
    """Every path: the default, always the array of every row (ratio 0), always the union (huge ratio), a
    first cut that applies from small sizes on (stride 2), no token kept as an array of every row (dense 0),
    every token while the budget lasts (huge dense)."""
    monkeypatch.setattr(fts_memory, "SPARSE_RATIO", ratio)
    monkeypatch.setattr(fts_memory, "STRIDE", stride)
    monkeypatch.setattr(fts_memory, "DENSE_RATIO", dense)
    rng = np.random.default_rng(n_rows + ratio + stride + dense)
    m = column(rng, n_rows)
    masks = [None, rng.random(n_rows) < 0.05, rng.random(n_rows) < 0.5, rng.random(n_rows) < 0.97,
             np.zeros(n_rows, bool)]
    for q in queries(rng, 80):
        for k in (1, 3, 60, 500):
            for allowed in masks:
                assert same(old_top(m, q, k, allowed), m.top(q, k, allowed)), (q, k)


def test_ties_keep_the_lower_position_first():
    """All rows equal: the k lowest positions, in order, whatever path adds them up."""
    n = 10000
    rows = np.arange(n, dtype=np.int32)
    m = MemoryColumn(ARGS, {"a": (0, n), "b": (n, 2 * n), "c": (2 * n, 2 * n + 50)},
                     np.concatenate([rows, rows, rows[::200]]),
                     np.full(2 * n + 50, np.float32(0.5)), n)
    for q in (["a"], ["a", "b"], ["c", "c"], ["a", "c"]):
        for k in (1, 10, 60):
            assert same(old_top(m, q, k), m.top(q, k)), q


def test_topk_equals_the_old_one_on_any_order():
    rng = np.random.default_rng(5)
    for n in (1, 7, 300, 5000, 40000):
        pos = rng.permutation(10 * n)[:n]
        ties = rng.choice(np.array([0.25, 1.5, 3.0], np.float32), n)
        score = ties if n % 2 else rng.random(n).astype(np.float32)
        for k in (1, 5, 60):
            assert same(old_topk(pos, score, k), topk(pos, score, k)), (n, k)


def test_search_equals_the_old_combination():
    """Several columns with boosts (one tokenize per analyzer): the best column per row, then the top k."""
    rng = np.random.default_rng(11)
    cols = [column(rng, 8000), column(rng, 8000, 40), column(rng, 8000, 20)]
    boosts = [1.0, 2.0, 0.5]
    allowed = rng.random(8000) < 0.3
    for q in queries(rng, 60):
        for k in (1, 20, 60):
            for a in (None, allowed):
                want = old_search(cols, boosts, [t.lower() for t in q], k, a)
                got = search(cols, boosts, " ".join(q), k, a)
                assert same(want, got), (q, k)


@pytest.mark.parametrize("dense", [8, 10 ** 9])
def test_threads_share_no_sums(monkeypatch, dense):
    """`fanout serve` searches from several threads: each has its own array, results as one thread's (the
    arrays of frequent tokens built by whichever thread comes first)."""
    monkeypatch.setattr(fts_memory, "DENSE_RATIO", dense)
    rng = np.random.default_rng(2)
    m = column(rng, 20000)
    qs = queries(rng, 120)
    want = [old_top(m, q, 60) for q in qs]
    bad: list[int] = []

    def run(offset: int) -> None:
        for i in range(len(qs)):
            j = (i + offset) % len(qs)
            if not same(want[j], m.top(qs[j], 60)):
                bad.append(j)

    threads = [threading.Thread(target=run, args=(o,)) for o in range(0, 120, 15)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


class _Stops(np.ndarray):
    """Contributions whose second slice raises (after the first token was added in)."""

    slices = 0

    def __getitem__(self, key):
        if isinstance(key, slice):
            type(self).slices += 1
            if type(self).slices == 2:
                raise KeyboardInterrupt
        return np.asarray(self)[key]


@pytest.mark.parametrize("ratio", [8, 0, 10 ** 9])
def test_an_interrupted_sum_leaves_no_trace(monkeypatch, ratio):
    """An exception half-way (e.g. KeyboardInterrupt, here after the first token was added in) drops the
    thread's array: the next calls start clean, whichever way they add up."""
    monkeypatch.setattr(fts_memory, "SPARSE_RATIO", ratio)
    monkeypatch.setattr(fts_memory, "DENSE_RATIO", 0)  # every token added from its slice
    rng = np.random.default_rng(4)
    m = column(rng, 5000)
    stops = MemoryColumn(ARGS, m.slices, m.rows, m.contrib.view(_Stops), m.n_rows)
    _Stops.slices = 0
    with pytest.raises(KeyboardInterrupt):
        stops.top(["t2", "t3"], 60)
    for q in (["t2", "t3"], ["t2", "t5"], ["t0", "t2"]):
        assert same(old_top(m, q, 60), m.top(q, 60)), q
