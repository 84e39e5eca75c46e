"""The query path reads through Lance itself (fanout/store/db.py `Collection.dataset`, `read`, `vector_search_many`)
and must return what lancedb's query builder returns for the same table: checked here on vector indexes
(probes, refine, ef, a prefilter, rows added after the index was built). Full-text equality:
tests/test_fts_rowids.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest


def _rows(rng, n: int, start: int, dim: int = 32) -> pa.Table:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return pa.table({"chunk_id": [f"c{i}" for i in range(start, start + n)],
                     "path": [f"p{i % 13}.md" for i in range(start, start + n)],
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim)})


@pytest.mark.parametrize("kind,search", [("IVF_PQ", {"nprobes": 2, "refine_factor": 3}),
                                         ("IVF_PQ", {"nprobes": 4, "refine_factor": 0}),
                                         ("IVF_HNSW_SQ", {"nprobes": 3, "ef": 40})])
@pytest.mark.parametrize("where", [None, "path != 'p3.md'"])
def test_vector_search_through_lance_is_lancedbs(tmp_path, kind, search, where):
    import lancedb

    from fanout.config import load_config
    from fanout.store.db import Collection
    from fanout.store.vectors import build_vector_index

    rng = np.random.default_rng(7)
    cfg = load_config("fake").replace(index={"vector_index_type": kind, "vector_partitions": 4, "nprobes": 1,
                                             "refine_factor": 0, "ef": 0, **search,
                                             "exact_search_rows": 0})  # Lance's path, not the exact one
    db = lancedb.connect(str(tmp_path))
    tbl = db.create_table("t_chunks", _rows(rng, 600, 0))
    build_vector_index(tbl, cfg.index)
    tbl.add(_rows(rng, 40, 600))  # not in the index: searched exactly, by both
    q = _rows(rng, 25, 10_000)["vector"].to_numpy(zero_copy_only=False)
    got = Collection(str(tmp_path), "t", cfg).vector_search_many([list(v) for v in q], 10, ["chunk_id", "path"],
                                                                  where)
    b = tbl.search([np.asarray(v) for v in q]).distance_type("cosine").nprobes(search["nprobes"])
    if search.get("refine_factor"):
        b = b.refine_factor(search["refine_factor"])
    if search.get("ef"):
        b = b.ef(max(search["ef"], 10 * max(1, search.get("refine_factor", 0))))
    if where:
        b = b.where(where, prefilter=True)
    want = b.select(["chunk_id", "path"]).limit(10).to_arrow()

    def key(t):
        return list(zip(t["query_index"].to_pylist(), t["chunk_id"].to_pylist(), t["path"].to_pylist(),
                        t["_distance"].to_pylist(), strict=True))
    assert got.num_rows == 250 and key(got) == key(want)


def test_reads_follow_the_pinned_versions(tmp_path):
    """`read` and `dataset` see the versions `pin` chose, `table` (lancedb, for writers) too; a cache table is
    read at its latest version."""
    import lancedb

    from fanout.store.db import Collection

    rng = np.random.default_rng(3)
    db = lancedb.connect(str(tmp_path))
    chunks = db.create_table("t_chunks", _rows(rng, 5, 0))
    db.create_table("t_documents", pa.table({"path": ["p0.md"], "lang": ["en"]}))
    chunks.add(_rows(rng, 3, 5))
    col = Collection(str(tmp_path), "t")
    col.pin({"t_chunks": 1})
    assert col.read("t_chunks", ["chunk_id"]).num_rows == 5 and col.table("t_chunks").count_rows() == 5
    assert col.read("t_chunks", ["chunk_id"], "path = 'p1.md'", limit=1)["chunk_id"].to_pylist() == ["c1"]
    col.pin({"t_chunks": 2})
    assert col.dataset("t_chunks").count_rows() == 8 and col.table("t_chunks").count_rows() == 8
    cache = db.create_table("t_cache_x", pa.table({"key": ["a"]}))
    assert col.dataset("t_cache_x").count_rows() == 1
    cache.add(pa.table({"key": ["b"]}))
    assert col.dataset("t_cache_x").count_rows() == 2  # another process's commit is seen
    assert col.has("t_cache_x") and not col.has("t_nothing")
