"""Exact vector search as one matrix product (fanout/store/exact_vectors.py, `Collection.vector_search_many` up to
`index.exact_search_rows` rows): the same lists as an exact search (Lance's flat scan, or numpy), prefiltered
search, rows added after a vector index was built, the fallback to LanceDB above the size, one copy of the
vectors per process and table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tests.support.exact_vectors import _cfg, _lists, _rows


def _same_up_to_ties(got: pa.Table, want: pa.Table, tol: float = 1e-5) -> None:
    """Same query lists: the same rows (and pages) in the same order, rows whose distances differ by float
    rounding only (tol) allowed to swap; distances equal within tol."""
    g, w = _lists(got), _lists(want)
    assert sorted(g) == sorted(w)
    for qi in w:
        a, b = g[qi], w[qi]
        assert len(a) == len(b), qi
        assert np.allclose([x[2] for x in a], [x[2] for x in b], atol=tol), qi
        # group by distance (rounded to tol): each group holds the same rows
        i = 0
        while i < len(b):
            j = i
            while j + 1 < len(b) and abs(b[j + 1][2] - b[i][2]) <= tol:
                j += 1
            last = j == len(b) - 1  # the cut at k may keep either of rows tied at the end
            if not last:
                assert {x[:2] for x in a[i:j + 1]} == {x[:2] for x in b[i:j + 1]}, (qi, i)
            i = j + 1


@pytest.fixture
def table(tmp_path):
    import lancedb

    rng = np.random.default_rng(3)
    centres = rng.normal(size=(8, 32)).astype(np.float32)
    db = lancedb.connect(str(tmp_path))
    tbl = db.create_table("t_chunks", _rows(rng, 900, 0, centres=centres))
    q = _rows(rng, 30, 10_000, centres=centres)["vector"].to_numpy(zero_copy_only=False)
    return tmp_path, tbl, [list(map(float, v)) for v in q]


@pytest.mark.parametrize("where", [None, "path != 'p3.md'", "path IN ('p1.md', 'p2.md')", "path = 'none.md'"])
@pytest.mark.parametrize("rowid_map", [2_000_000, 0])
def test_exact_lists_equal_lances_exact_search(table, where, rowid_map):
    """No vector index: Lance scans every row (exact); the matrix product gives the same lists, prefiltered
    or not (a filter that keeps nothing: no rows), its columns from the in-memory row map or read by row id."""
    from fanout.store.db import Collection

    path, _, q = table
    want = Collection(str(path), "t", _cfg(exact_search_rows=0)).vector_search_many(q, 10, ["chunk_id", "path"],
                                                                                    where)
    cfg = _cfg(exact_search_rows=100_000).replace(retrieve={"rowid_map_rows": rowid_map})
    got = Collection(str(path), "t", cfg).vector_search_many(q, 10, ["chunk_id", "path"], where)
    assert got.column_names == ["query_index", "chunk_id", "path", "_distance"]
    assert got.num_rows == want.num_rows == (0 if where == "path = 'none.md'" else 300)
    _same_up_to_ties(got, want)


def test_rows_added_after_the_vector_index_are_searched_exactly(table):
    """With an (approximate) vector index over the first rows and rows added after it was built, the exact
    path ranks every row: its lists are numpy's exact top-k, and the added rows are found."""
    from fanout.store.db import Collection
    from fanout.store.vectors import build_vector_index

    path, tbl, q = table
    rng = np.random.default_rng(9)
    build_vector_index(tbl, _cfg(vector_index_type="IVF_PQ", vector_partitions=4).index)
    tbl.add(_rows(rng, 60, 900))
    q = q + [list(map(float, v)) for v in _rows(rng, 5, 20_000)["vector"].to_numpy(zero_copy_only=False)]
    q[-1] = tbl.to_arrow()["vector"].to_pylist()[-1]  # the last row added: its own nearest row
    got = Collection(str(path), "t", _cfg(exact_search_rows=100_000)).vector_search_many(q, 10, ["chunk_id", "path"])
    allrows = tbl.to_arrow()
    v = np.asarray(allrows["vector"].to_pylist(), np.float32)
    s = np.asarray(q, np.float32) @ v.T
    ids = allrows["chunk_id"].to_pylist()
    lists = _lists(got)
    for i in range(len(q)):
        want = np.argsort(-s[i], kind="stable")[:10]
        assert [x[0] for x in lists[i]][:9] == [ids[j] for j in want][:9]  # the 10th may be a float tie
        assert np.allclose([x[2] for x in lists[i]], 1 - s[i][want], atol=1e-5)
    assert lists[len(q) - 1][0][0] == "c959"


def test_above_the_size_lancedb_answers_and_no_copy_is_loaded(table):
    """More rows than `index.exact_search_rows`: LanceDB's index answers (the lists lancedb's own search
    gives), and this process loads no copy of the vectors."""
    import lancedb

    from fanout.store import exact_vectors
    from fanout.store.db import Collection
    from fanout.store.vectors import build_vector_index

    path, tbl, q = table
    cfg = _cfg(vector_index_type="IVF_PQ", vector_partitions=4, nprobes=1, refine_factor=0, exact_search_rows=899)
    build_vector_index(tbl, cfg.index)
    col = Collection(str(path), "t", cfg)
    got = col.vector_search_many(q, 10, ["chunk_id", "path"])
    assert col.dataset(col.chunks_name).uri not in exact_vectors._CACHE
    want = lancedb.connect(str(path)).open_table("t_chunks").search([np.asarray(v) for v in q]) \
        .distance_type("cosine").nprobes(1).select(["chunk_id", "path"]).limit(10).to_arrow()
    assert _lists(got) == _lists(want)
    # at the size, or below: exact
    exact = Collection(str(path), "t", cfg.replace(index={"exact_search_rows": 900})).vector_search_many(
        q, 10, ["chunk_id", "path"])
    assert col.dataset(col.chunks_name).uri in exact_vectors._CACHE
    assert _lists(exact) != _lists(got)  # the index (1 of 4 partitions probed) is approximate


def test_one_copy_per_table_and_a_new_version_replaces_it(table):
    from fanout.store import exact_vectors
    from fanout.store.db import Collection

    path, tbl, q = table
    cfg = _cfg(exact_search_rows=100_000)
    a, b = Collection(str(path), "t", cfg), Collection(str(path), "t", cfg)
    a.vector_search_many(q[:2], 5, ["chunk_id"])
    b.vector_search_many(q[:2], 5, ["chunk_id"])
    uri = a.dataset(a.chunks_name).uri
    first = exact_vectors._CACHE[uri]
    assert first.vectors.shape == (900, 32) and len([k for k in exact_vectors._CACHE if k == uri]) == 1
    tbl.add(_rows(np.random.default_rng(1), 10, 5000))
    c = Collection(str(path), "t", cfg)  # a new reader: the latest version
    got = c.vector_search_many([tbl.to_arrow()["vector"].to_pylist()[-1]], 1, ["chunk_id"])
    assert got["chunk_id"].to_pylist() == ["c5009"]
    assert exact_vectors._CACHE[uri].vectors.shape == (910, 32) and exact_vectors._CACHE[uri] is not first


def test_damaged_vectors_are_never_served(tmp_path, caplog):
    import lance

    from fanout.store.db import Collection

    rng = np.random.default_rng(5)
    t = _rows(rng, 50, 0, dim=8)
    v = np.asarray(t["vector"].to_pylist(), np.float32)
    v[3] = np.nan
    v[4] = 0.0
    t = t.set_column(2, "vector", pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), 8))
    lance.write_dataset(t, str(tmp_path / "t_chunks.lance"))  # lancedb refuses NaN vectors; damage does not ask
    got = Collection(str(tmp_path), "t", _cfg(exact_search_rows=1000)).vector_search_many(
        [list(map(float, x)) for x in v[:6]], 50, ["chunk_id"])
    assert not {"c3", "c4"} & set(got["chunk_id"].to_pylist())
    assert got.num_rows == 4 * 48  # queries 3 (NaN: not finite) and 4 (length 0) get nothing
    assert "damaged vectors" in caplog.text


def test_fake_index_vector_lists_unchanged(tmp_path, fake_cfg, fake_runner):
    """A small index built by `fanout index` (the benchmark's size): the lists the exact path gives are those
    Lance's flat search gave before it, for every variant of every sample query."""
    from fanout.actors.fake import hashed_vector
    from fanout.pipelines.index import index_vault

    from fanout.store.db import Collection
    from tests.support.vault import write_vault

    vault = write_vault(tmp_path / "vault")
    index_vault(vault, tmp_path / "db", "t", fake_cfg, fake_runner)
    texts = ["backup snapshot schedule", "how do I set up the vpn", "borscht recipe", "media server disks",
             "zzz nothing"]
    q = [list(map(float, hashed_vector(f" {t}", fake_cfg.fake.dim))) for t in texts]
    lance = Collection(str(tmp_path / "db"), "t", fake_cfg.replace(index={"exact_search_rows": 0}))
    exact = Collection(str(tmp_path / "db"), "t", fake_cfg)
    for where in (None, "path != 'x.md'"):
        want = lance.vector_search_many(q, 60, ["path", "chunk_id"], where)
        got = exact.vector_search_many(q, 60, ["path", "chunk_id"], where)
        _same_up_to_ties(got, want)


def _exact_unit_vectors(rng: np.random.Generator, n: int, dim: int = 8) -> np.ndarray:
    """Unit vectors whose dot products are exact in float32 whatever order a BLAS kernel sums them in: each
    has one component +-1 or four components +-0.5 (products are multiples of 1/4), so equal scores (ties)
    are common and every machine computes the same ones."""
    v = np.zeros((n, dim), np.float32)
    four = rng.random(n) < 0.8
    for i in range(n):
        at = rng.choice(dim, 4 if four[i] else 1, replace=False)
        v[i, at] = rng.choice([-1.0, 1.0], len(at)) * (0.5 if four[i] else 1.0)
    return v


@pytest.mark.parametrize("rows,k", [(30, 10), (900, 10), (20_000, 10), (20_000, 60), (20_000, 400)])
@pytest.mark.parametrize("masked", [False, True])
def test_top_k_is_the_exact_top_k_with_ties_in_row_order(rows, k, masked):
    """Every candidate path of `top_k` (all rows, a partition per row, the block-maximum bound) gives the
    exact top k, ties (many: products that are multiples of 1/4) in row order, only allowed rows."""
    from fanout.store.exact_vectors import Matrix
    from fanout.store.vector_topk import top_k

    rng = np.random.default_rng(rows + k)
    v = _exact_unit_vectors(rng, rows)
    damaged = np.zeros(rows, bool)
    damaged[::97] = True
    m = Matrix(1, np.arange(rows, dtype=np.int64), np.where(damaged[:, None], 0, v).astype(np.float32), damaged)
    q = _exact_unit_vectors(rng, 37)
    q[0] = 0.0  # a query vector of length zero: no rows
    allowed = rng.random(rows) < (0.7 if rows > 100 else 0.3) if masked else None
    qi, pos, dist = top_k(m, q, k, allowed)
    keep = ~damaged if allowed is None else allowed & ~damaged
    s = q.astype(np.float64) @ v.T.astype(np.float64)  # exact: sums of multiples of 1/4
    for i in range(len(q)):
        if i == 0:
            assert not (qi == 0).any()
            continue
        cand = np.flatnonzero(keep)
        want = cand[np.lexsort((cand, -s[i][cand]))][:k]
        got = pos[qi == i]
        assert got.tolist() == want.tolist(), i
        assert dist[qi == i].tolist() == (1 - s[i][want]).astype(np.float32).tolist()


@pytest.mark.parametrize("rows", [900, 70_000])
def test_top_k_of_real_valued_vectors_is_the_top_k_of_exact_cosines(rows):
    """Random real vectors (products round differently per BLAS kernel and shape): the rows and distances
    are those of the cosines computed in float64, within float32 rounding."""
    from fanout.store.exact_vectors import Matrix
    from fanout.store.vector_topk import top_k

    rng = np.random.default_rng(rows)
    v = rng.normal(size=(rows, 64)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    m = Matrix(1, np.arange(rows, dtype=np.int64), v, np.zeros(rows, bool))
    q = rng.normal(size=(300, 64)).astype(np.float32)
    qi, pos, dist = top_k(m, q, 20)
    qn = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64), axis=1, keepdims=True)
    s = qn @ v.T.astype(np.float64)
    for i in range(len(q)):
        want = np.sort(s[i])[::-1][:20]
        got = pos[qi == i]
        assert np.allclose(1 - dist[qi == i], want, atol=1e-6)
        assert np.allclose(s[i][got], want, atol=1e-6)  # the same rows, up to near-ties


@pytest.mark.parametrize("rows,k", [(200, 60), (50_000, 60)])
def test_rows_tied_at_the_cut_are_kept_in_row_order(rows, k):
    """Many rows with the same score at the k-th place (bag-of-words vectors sharing no term with the query
    all score 0): the first ones in row order are kept, as Lance's flat search keeps them."""
    from fanout.store.exact_vectors import Matrix
    from fanout.store.vector_topk import top_k

    v = np.zeros((rows, 4), np.float32)
    v[:, 1] = 1.0  # orthogonal to the query: score 0
    v[rows // 2:rows // 2 + 5, 0] = 1.0  # five rows that share a term: the best ones
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    m = Matrix(1, np.arange(rows, dtype=np.int64), v, np.zeros(rows, bool))
    _, pos, _ = top_k(m, np.asarray([[1.0, 0, 0, 0]], np.float32), k)
    assert pos.tolist() == list(range(rows // 2, rows // 2 + 5)) + list(range(k - 5))


@pytest.mark.parametrize("rows", [500, 70_000])
def test_a_query_scores_alike_alone_and_in_any_batch(rows):
    """The same query vector gets bit-equal distances and the same row order alone, first or last in a
    batch, on a small table and on a large one (Ray Data's blocks and the in-process loop batch it
    differently; the products' shapes differ, the scores returned do not)."""
    from fanout.store.exact_vectors import Matrix
    from fanout.store.vector_topk import top_k

    rng = np.random.default_rng(7)
    v = rng.normal(size=(rows, 64)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v[rows // 3] = v[rows // 5]  # an exact tie: row order decides
    m = Matrix(1, np.arange(rows, dtype=np.int64), v, np.zeros(rows, bool))
    q = (v[rows // 5] + 0.01 * rng.normal(size=64)).astype(np.float32)[None, :]
    others = rng.normal(size=(300, 64)).astype(np.float32)
    alone = top_k(m, q, 20)
    assert alone[1][:2].tolist() == [rows // 5, rows // 3]
    for batch, at in ((np.concatenate([q, others]), 0), (np.concatenate([others, q]), 300),
                      (np.concatenate([others[:5], q]), 5)):
        qi, pos, dist = top_k(m, batch, 20)
        assert pos[qi == at].tolist() == alone[1].tolist()
        assert dist[qi == at].tobytes() == alone[2].tobytes()
