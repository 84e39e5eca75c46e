"""A full-text column brought from one version to the next at the cost of what changed (fanout/store/fts_delta.py):
an older version's postings plus the rows added, the rows gone masked out, over a chain of versions, answer every
query as the postings built from the version's rows do (positions, order and float32 scores bit for bit, with and
without a prefilter, every way the query side adds postings up), and fold into exactly those postings."""

from __future__ import annotations

import random

import lance
import numpy as np
import pyarrow as pa
import pytest

from fanout.store import fts_memory
from fanout.store.fts_delta import DeltaColumn, updated_column
from fanout.store.fts_memory import memory_column, search
from tests.support.fts_dense_reference import same

WORDS = ["sync", "notes", "vault", "links", "graph", "the", "a", "plugin", "plugins", "settings", "backup", "linking",
         "canvas", "search", "théme", "файлы", "заметки", "kvass", "tomato", "router"]
FTS = {"with_position": False, "base_tokenizer": "simple", "language": "English", "stem": True,
       "remove_stop_words": True, "ascii_folding": True, "lower_case": True}
COLUMNS = ("body", "title")


def _texts(rnd: random.Random, n: int, start: int) -> pa.Table:
    # a small vocabulary: ties, frequent tokens (kept as arrays of every row), empty and stop-word-only texts;
    # words only some rounds bring (a token new to the delta), and rows that take a token's last row away
    extra = [f"w{start // 40}"] if start else []
    body = [" ".join(rnd.choice(WORDS + extra) for _ in range(rnd.randint(0, 10))) for _ in range(n)]
    title = [rnd.choice(["", "the a", "Sync", "Graph view", "Plugins and settings", f"Only{start + i}"])
             for i in range(n)]
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "body": body, "title": title})


def _ids(ds) -> np.ndarray:
    return np.sort(ds.to_table(columns=[], with_row_id=True)["_rowid"].to_numpy())


def _postings(m) -> dict:
    return {t: (m.rows[s:e].tolist(), m.contrib[s:e].tobytes(), m.freq[s:e].tolist()) for t, (s, e) in m.slices.items()}


@pytest.mark.parametrize(("ratio", "dense"), [(8, 8), (0, 8), (10 ** 9, 0)])
def test_a_chain_of_deltas_answers_as_the_built_postings(tmp_path, monkeypatch, ratio, dense):
    """Six versions (rows deleted, rows added), each column brought from the one before (a DeltaColumn on the
    first version's postings, then on a delta); every third version starts again from the folded postings (what
    the file then holds). Ratio/dense: the union of short postings, a pass over every row, arrays of every row."""
    monkeypatch.setattr(fts_memory, "SPARSE_RATIO", ratio)
    monkeypatch.setattr(fts_memory, "DENSE_RATIO", dense)
    rnd = random.Random(11)
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(_texts(rnd, 200, 0), uri)
    for c in COLUMNS:
        ds.create_scalar_index(c, "INVERTED", **FTS)
    ds = lance.dataset(uri)
    ids = _ids(ds)
    held = {c: memory_column(ds, c, ids) for c in COLUMNS}
    next_id = 200
    queries = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 5))) for _ in range(80)]
    queries += ["sync sync notes", "the a", "zzzz", "w5 w6 sync", "only7", "only230 graph"]
    for step in range(6):
        gone = rnd.sample(sorted(set(ds.to_table(columns=["id"])["id"].to_pylist())), rnd.randint(1, 12))
        ds.delete(f"id IN ({', '.join(map(str, gone))})")
        n = rnd.randint(0, 15)
        if n:
            ds.insert(_texts(rnd, n, next_id))
            next_id += n
        ds = lance.dataset(uri)
        old_ids, ids = ids, _ids(ds)
        added = np.setdiff1d(ids, old_ids)
        texts = ds._take_rows(pa.array(added, pa.uint64()), columns=list(COLUMNS))
        delta = {}
        for c in COLUMNS:
            d = updated_column(held[c], old_ids, ids, list(zip(np.searchsorted(ids, added).tolist(),
                                                               texts[c].to_pylist())))
            assert isinstance(d, DeltaColumn), (step, c)
            delta[c] = d
        built = {c: memory_column(ds, c, ids) for c in COLUMNS}
        allowed = np.array([rnd.random() < 0.6 for _ in range(len(ids))])
        for q in queries:
            for k in (1, 5, 60):
                for cols, boosts in ((["body"], [1.0]), (["body", "title"], [1.0, 2.0])):
                    want = search([built[c] for c in cols], boosts, q, k)
                    got = search([delta[c] for c in cols], boosts, q, k)
                    assert same(want, got), (step, q, k, cols)
                    want = search([built[c] for c in cols], boosts, q, k, allowed=allowed)
                    got = search([delta[c] for c in cols], boosts, q, k, allowed=allowed)
                    assert same(want, got), (step, q, k, cols, "prefiltered")
            for c in COLUMNS:  # one column's top, with its tokens as the engine tokenizes them
                toks = [t.text for t in lance.tokenize(q, **delta[c].tokenize_args)]
                assert same(built[c].top(toks, 10), delta[c].top(toks, 10)), (step, q, c)
        for c in COLUMNS:
            assert np.array_equal(delta[c].dl, built[c].dl)
            assert _postings(delta[c]) == _postings(built[c]), (step, c)  # folded: the file's postings
        held = {c: delta[c].folded() if step % 3 == 2 else delta[c] for c in COLUMNS}
