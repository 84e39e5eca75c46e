"""A vector index's candidates re-scored exactly from the version's vectors file (fanout/store/ann_rescore.py,
`index.ann_rescore`), above `index.exact_search_rows`: exact distances, recall at least Lance's own refine,
prefilters and rows added after the index was built, and Lance's refine wherever there is no file."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.exact_vectors import _cfg, _lists, _rows


@pytest.fixture
def indexed(tmp_path):
    import lancedb

    from fanout.store.vectors import build_vector_index

    rng = np.random.default_rng(11)
    centres = rng.normal(size=(8, 32)).astype(np.float32)
    tbl = lancedb.connect(str(tmp_path)).create_table("t_chunks", _rows(rng, 1200, 0, centres=centres))
    q = _rows(rng, 40, 10_000, centres=centres)["vector"].to_numpy(zero_copy_only=False)
    cfg = _cfg(vector_index_type="IVF_PQ", vector_partitions=4, nprobes=2, exact_search_rows=1000)
    build_vector_index(tbl, cfg.index)
    return tmp_path, tbl, [list(map(float, v)) for v in q], cfg


def _exact(tbl, q):
    t = tbl.to_arrow()
    v = np.asarray(t["vector"].to_pylist(), np.float32)
    return t["chunk_id"].to_pylist(), t["path"].to_pylist(), np.asarray(q, np.float32) @ v.T


def _recall(lists, ids, s, allowed=None) -> float:
    hits = []
    for i in range(len(s)):
        row = s[i] if allowed is None else np.where(allowed, s[i], -np.inf)
        tenth = np.sort(row)[::-1][9]
        pos = {c: j for j, c in enumerate(ids)}
        hits += [row[pos[c]] >= tenth - 1e-6 for c, _, _ in lists.get(i, [])[:10]]
    return float(np.mean(hits))


def _file(col):
    from fanout.store import exact_vectors

    ds = col.dataset(col.chunks_name)
    assert exact_vectors.file_wanted(ds, col.cfg)
    return exact_vectors.ensure_file(ds)


def test_candidates_are_rescored_exactly_and_recall_at_least_lances_refine(indexed):
    from fanout.store.db import Collection

    path, tbl, q, cfg = indexed
    refine = Collection(str(path), "t", cfg.replace(index={"ann_rescore": 0})).vector_search_many(
        q, 10, ["chunk_id", "path"])
    col = Collection(str(path), "t", cfg)
    assert _file(col) == "written"
    got = col.vector_search_many(q, 10, ["chunk_id", "path"])
    ids, paths, s = _exact(tbl, q)
    lists = _lists(got)
    for i, rows in lists.items():
        d = [x[2] for x in rows]
        assert d == sorted(d) and len(rows) == 10
        for cid, p, dist in rows:  # exact cosine distances, the row's own page
            j = ids.index(cid)
            assert p == paths[j] and abs(dist - (1 - s[i, j])) < 1e-5
    assert _recall(lists, ids, s) >= _recall(_lists(refine), ids, s)


def test_a_prefilter_and_rows_added_after_the_index(indexed):
    from fanout.store.db import Collection

    path, tbl, q, cfg = indexed
    rng = np.random.default_rng(5)
    tbl.add(_rows(rng, 30, 1200))
    q = q + [tbl.to_arrow()["vector"].to_pylist()[-1]]  # the last row added: its own nearest row
    col = Collection(str(path), "t", cfg)
    _file(col)
    lists = _lists(col.vector_search_many(q, 10, ["chunk_id", "path"]))
    assert lists[len(q) - 1][0][0] == "c1229" and lists[len(q) - 1][0][2] < 1e-5
    where = "path IN ('p1.md', 'p2.md')"
    flt = _lists(col.vector_search_many(q, 10, ["chunk_id", "path"], where))
    assert flt and all(p in ("p1.md", "p2.md") for rows in flt.values() for _, p, _ in rows)


def test_without_the_file_lance_refines_as_before(indexed):
    from fanout.store import exact_vectors
    from fanout.store.db import Collection

    path, _, q, cfg = indexed
    want = Collection(str(path), "t", cfg.replace(index={"ann_rescore": 0})).vector_search_many(
        q, 10, ["chunk_id", "path"])
    col = Collection(str(path), "t", cfg)
    got = col.vector_search_many(q, 10, ["chunk_id", "path"])  # no `fanout index`: no file for this version
    assert _lists(got) == _lists(want)
    assert col.dataset(col.chunks_name).uri not in exact_vectors._CACHE  # and no copy loaded for it
