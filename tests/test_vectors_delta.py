"""Exact search's vectors brought from one version to the next at the cost of what changed
(fanout/store/exact_vectors.py `_from_previous`: the older version's rows left as they are, the rows added read
and stacked after them, the rows gone masked): over a chain of versions the lists are those of the vectors loaded
whole from the version (the same positions in the same order, ties included, the same distances), with and without
a prefilter, in the small tables' float64 product and the large tables' float32 one, and the rows written to the
version's file (`compact`) are the loaded ones."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from fanout.store import exact_vectors, vector_topk
from fanout.store.exact_vectors import matrix

DIM = 16


def _vectors(rng, n: int) -> np.ndarray:
    """Four components of +-1 (unit length: +-0.5), so every cosine is a multiple of 1/4, exact in any order of
    summation on any CPU: many ties, and the lists may be compared exactly. Every 17th is zero (damaged)."""
    v = np.zeros((n, DIM), np.float32)
    for i in range(n):
        v[i, rng.choice(DIM, 4, replace=False)] = rng.choice([-1.0, 1.0], 4)
    v[::17] = 0
    return v


def _table(rng, n: int, start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(_vectors(rng, n).reshape(-1)), DIM)})


@pytest.mark.parametrize("small", [True, False])
def test_a_chain_of_stacked_versions_answers_as_the_loaded_vectors(tmp_path, monkeypatch, small):
    if not small:  # every product a large table's: float32 picks the candidates, float64 scores them
        monkeypatch.setattr(vector_topk, "SMALL_PRODUCT", 0)
    rng = np.random.default_rng(5)
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(_table(rng, 300, 0), uri)
    held = matrix(ds)
    next_id = 300
    queries = _vectors(rng, 40)[1:]  # (the first is zero: no list)
    for step in range(6):
        ids_now = ds.to_table(columns=["id"])["id"].to_pylist()
        gone = rng.choice(ids_now, int(rng.integers(1, 20)), replace=False).tolist()
        ds.delete(f"id IN ({', '.join(map(str, gone))})")
        n = int(rng.integers(0, 25))
        if n:
            ds.insert(_table(rng, n, next_id))
            next_id += n
        ds = lance.dataset(uri)
        got = exact_vectors._from_previous(ds, "vector", held)
        assert got is not None and got.added is not None, step  # stacked, nothing copied
        exact_vectors._CACHE.clear()
        want = matrix(ds)  # every row loaded from Lance
        assert want is not None and np.array_equal(got.ids, want.ids)
        vec, damaged = got.compact()
        assert vec.tobytes() == want.vectors.tobytes() and np.array_equal(damaged, want.damaged)
        assert got.damaged_count() == int(want.damaged.sum())
        rows = got.position_rows(np.arange(len(want.ids)))  # what ann_rescore reads by position
        assert vector_topk.stacked(got)[rows].tobytes() == want.vectors.tobytes()
        allowed = rng.random(len(want.ids)) < 0.3
        for k in (1, 7, 50, 1000):
            for mask in (None, allowed):
                a = vector_topk.top_k(want, queries, k, mask)
                b = vector_topk.top_k(got, queries, k, mask)
                assert all(np.array_equal(x, y) for x, y in zip(a, b)), (step, k, mask is None)
        # every other version starts from the written rows (what the file then holds)
        held = exact_vectors.Matrix(int(ds.version), got.ids, vec, damaged, 0) if step % 2 else got
