"""The exact search's Matryoshka first pass (fanout/store/exact_vectors.py `_prefix_blocks`, index.exact_prefix_*)
and the result chunks read by row id (fanout/store/chunk_rows.py): the same lists as an exact search on a
small index (prefiltered or not, rows added after a vector index), the fallbacks, the same chunk rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tests.test_exact_vectors import _cfg, _lists, _same_up_to_ties

DIM, HEAD = 32, 16


def _mrl_rows(rng, n: int, start: int, centres: np.ndarray) -> pa.Table:
    """Clustered vectors whose first HEAD dims carry most of the signal (as a Matryoshka embedder's do)."""
    v = centres[rng.integers(0, len(centres), n)] + 0.4 * rng.normal(size=(n, DIM)).astype(np.float32)
    v[:, HEAD:] *= 0.15
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return pa.table({"chunk_id": [f"c{i}" for i in range(start, start + n)],
                     "path": [f"p{i % 13}.md" for i in range(start, start + n)],
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM)})


@pytest.fixture
def mrl_table(tmp_path):
    import lancedb

    rng = np.random.default_rng(5)
    centres = rng.normal(size=(8, DIM)).astype(np.float32)
    tbl = lancedb.connect(str(tmp_path)).create_table("t_chunks", _mrl_rows(rng, 1200, 0, centres))
    q = _mrl_rows(rng, 40, 10_000, centres)["vector"].to_numpy(zero_copy_only=False)
    return tmp_path, tbl, [list(map(float, v)) for v in q], centres


def _prefix_cfg(**more):
    return _cfg(exact_search_rows=100_000, exact_prefix_dims=HEAD, exact_prefix_candidates=100,
                exact_prefix_min_rows=0, **more)


SIX = "path IN ('p1.md', 'p2.md', 'p3.md', 'p4.md', 'p5.md', 'p6.md')"  # ~550 of 1,200 rows: the allowed rows


@pytest.mark.parametrize("where", [None, "path != 'p3.md'", SIX, "path IN ('p1.md', 'p2.md')", "path = 'none.md'"])
def test_prefix_pass_lists_equal_exact_search(mrl_table, where):
    """The first pass on 16 of 32 dims, 100 candidates re-scored in full: the same lists (pages, order up to
    ties, distances) as Lance's exact flat scan, prefiltered or not (six pages of 13: the prefix pass over
    the allowed rows only); a small allowed set (two pages: ~185 rows, fewer than 4 x the candidates) is
    searched in full."""
    from fanout.store import exact_vectors
    from fanout.store.db import Collection

    path, _, q, _ = mrl_table
    want = Collection(str(path), "t", _cfg(exact_search_rows=0)).vector_search_many(q, 10, ["chunk_id", "path"], where)
    calls = []
    real = exact_vectors._prefix_blocks
    exact_vectors._prefix_blocks = lambda *a: calls.append(1) or real(*a)
    try:
        got = Collection(str(path), "t", _prefix_cfg()).vector_search_many(q, 10, ["chunk_id", "path"], where)
    finally:
        exact_vectors._prefix_blocks = real
    assert bool(calls) == (where in (None, "path != 'p3.md'", SIX))  # the prefix pass ran where it pays
    assert got.num_rows == want.num_rows == (0 if where == "path = 'none.md'" else 400)
    _same_up_to_ties(got, want)


def test_prefix_pass_searches_rows_added_after_the_vector_index(mrl_table):
    """Rows added after an (approximate) IVF_PQ index are ranked like every other: numpy's exact top-k."""
    from fanout.store.db import Collection
    from fanout.store.vectors import build_vector_index

    path, tbl, q, centres = mrl_table
    build_vector_index(tbl, _cfg(vector_index_type="IVF_PQ", vector_partitions=4).index)
    tbl.add(_mrl_rows(np.random.default_rng(11), 80, 1200, centres))
    q = q + [tbl.to_arrow()["vector"].to_pylist()[-1]]  # the last row added: its own nearest row
    got = _lists(Collection(str(path), "t", _prefix_cfg()).vector_search_many(q, 10, ["chunk_id", "path"]))
    allrows = tbl.to_arrow()
    s = np.asarray(q, np.float32) @ np.asarray(allrows["vector"].to_pylist(), np.float32).T
    ids = allrows["chunk_id"].to_pylist()
    for i in range(len(q)):
        want = np.argsort(-s[i], kind="stable")[:10]
        assert [x[0] for x in got[i]][:9] == [ids[j] for j in want][:9]
        assert np.allclose([x[2] for x in got[i]], 1 - s[i][want], atol=1e-5)
    assert got[len(q) - 1][0][0] == "c1279"


def test_prefix_top_k_ranks_candidates_exactly_and_caps_ties():
    """`top_k` with a prefix plan: each query's k are the exact best of its candidates (a superset of the 50
    best prefix cosines), best first; a query whose prefix is zero ties every row at the bound: the
    candidates are cut to 50 and it still gets k rows; damaged, masked rows and a zero query get none."""
    from fanout.store.exact_vectors import Matrix, Plan, top_k

    rng = np.random.default_rng(2)
    v = rng.normal(size=(4000, DIM)).astype(np.float32)
    v[::2, :HEAD] = 0.0  # every second row's prefix is zero
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    damaged = np.zeros(4000, bool)
    damaged[7] = True
    v[7] = 0.0
    m = Matrix(0, np.arange(4000), v, damaged)
    q = rng.normal(size=(5, DIM)).astype(np.float32)
    q[3, :HEAD] = 0.0  # every prefix cosine 0: all rows tie
    q[4] = 0.0  # a query of length zero gets no rows
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    allowed = np.ones(4000, bool)
    allowed[100:200] = False
    qi, pos, dist = top_k(m, q, 10, allowed, Plan(prefix_dims=HEAD, prefix_candidates=50, prefix_min_rows=0))
    assert set(qi.tolist()) == {0, 1, 2, 3}
    s = q @ v.T
    head = np.linalg.norm(v[:, :HEAD], axis=1)
    pc = np.where(head > 0, (q[:, :HEAD] @ v[:, :HEAD].T) / np.where(head > 0, head, 1), 0.0)
    pc[:, ~allowed | damaged] = -np.inf
    for i in range(4):
        p = pos[qi == i]
        assert len(p) == 10 and not ({7} | set(range(100, 200))) & set(p.tolist())
        assert np.allclose(dist[qi == i], 1 - s[i, p], atol=1e-5)
        assert (np.diff(dist[qi == i]) >= -1e-7).all()
        if i < 3:  # the exact best of a superset of the 50 best prefixes: each place at least as good
            t50 = np.argsort(-pc[i], kind="stable")[:50]
            assert (s[i, p] >= np.sort(s[i, t50])[::-1][:10] - 1e-5).all()


def test_no_prefix_below_its_row_count_or_when_off():
    """Below `prefix_min_rows` rows, with `prefix_dims` 0 or at least the vectors' size, or with too few rows
    for the candidates, `top_k` is the full product: the very same output."""
    from fanout.store.exact_vectors import Matrix, Plan, top_k

    rng = np.random.default_rng(4)
    v = rng.normal(size=(3000, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    m = Matrix(0, np.arange(3000), v, np.zeros(3000, bool))
    q = rng.normal(size=(6, DIM)).astype(np.float32)
    full = top_k(m, q, 10)
    for how in (Plan(HEAD, 100, 5000), Plan(0, 100, 0), Plan(DIM, 100, 0), Plan(HEAD, 800, 0)):
        got = top_k(m, q, 10, None, how)
        assert all(np.array_equal(a, b) for a, b in zip(got, full, strict=True)), how


def test_passages_stem_is_stem_key():
    """passages._split_lines inlines fanout.text.stem_key as t[:5]."""
    from fanout.text import stem_key

    for t in ("a", "abcde", "abcdef", "привет", "x" * 12):
        assert stem_key(t) == t[:5]


@pytest.mark.parametrize("memory", ["rowid", "table", "scan"])
def test_fetch_chunks_reads_the_same_rows(tmp_path, fake_cfg, fake_runner, memory):
    """fetch_chunks by row id, from the rows kept in memory (ski-rental reached at once) and by the scan
    (no row-id map) gives the same rows; an unknown id is left out."""
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.lanes import fetch_chunks

    from fanout.store import chunk_rows
    from fanout.store.db import Collection
    from tests.conftest import write_vault

    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    every = Collection(str(db), "t", fake_cfg).read("t_chunks", ["chunk_id", "title", "heading", "text"]).to_pylist()
    retrieve = {"rowid": {"text_memory_after": 1e9}, "table": {"text_memory_after": 0.0}, "scan": {"rowid_map_rows": 0}}[memory]
    col = Collection(str(db), "t", fake_cfg.replace(retrieve=retrieve))
    col.refresh()
    ids = {r["chunk_id"] for r in every[::2]} | {"no such chunk"}
    for _ in range(2):  # the second call: from memory once the first has paid for the read
        got = fetch_chunks(col, ids)
        assert got == {r["chunk_id"]: r for r in every if r["chunk_id"] in ids}
    assert (chunk_rows.memory_bytes(col) > 0) == (memory == "table")
