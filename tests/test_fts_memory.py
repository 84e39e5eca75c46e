"""The `memory` full-text engine (fanout/store/fts_memory.py) against Lance itself: the same rows, order and scores
bit for bit (float32), ties, repeated query words and several columns with boosts included; an index older than
the rows (rows deleted or added after it was built) gives the scores of the rows, as the index rebuilt on them."""

from __future__ import annotations

import random

import lance
import numpy as np
import pyarrow as pa
import pytest
from fanout.pipelines.index import index_vault
from fanout.pipelines.lanes import fts_page_lists
from lance.query import MultiMatchQuery

from fanout.store import fts
from fanout.store.db import Collection
from fanout.store.fts_memory import memory_column, search
from tests.support.fts import TEXTS
from tests.support.vault import write_vault

WORDS = ["sync", "notes", "vault", "links", "graph", "the", "a", "plugin", "plugins", "settings", "backup", "linking",
         "canvas", "search", "searching", "théme", "theme", "файлы", "файл", "заметки"]
FTS = {"with_position": False, "base_tokenizer": "simple", "language": "English", "stem": True,
       "remove_stop_words": True, "ascii_folding": True, "lower_case": True}


def _dataset(tmp_path, n: int = 300, seed: int = 3):
    rnd = random.Random(seed)
    # short texts from a small vocabulary: many equal scores (ties) and repeated words; some empty or all
    # stop words (documents Lance does not count)
    body = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 12))) for _ in range(n)]
    title = [rnd.choice(["", "the a", "Sync", "Graph view", "Plugins and settings"]) for _ in range(n)]
    ds = lance.write_dataset(pa.table({"body": body, "title": title}), str(tmp_path / "t.lance"))
    for c in ("body", "title"):
        ds.create_scalar_index(c, "INVERTED", **FTS)
    return lance.dataset(str(tmp_path / "t.lance")), rnd


def _lance(ds, q, cols, boosts, k, where=None):
    t = ds.to_table(full_text_query=MultiMatchQuery(q, cols, boosts=boosts), columns=["_score"], with_row_id=True,
                    limit=k, filter=where, prefilter=True if where else None)
    return t["_rowid"].to_pylist(), t["_score"].to_numpy()


def test_memory_bm25_equals_lance_bit_for_bit(tmp_path):
    ds, rnd = _dataset(tmp_path)
    ids = np.sort(ds.to_table(columns=[], with_row_id=True)["_rowid"].to_numpy())
    mem = [memory_column(ds, c, ids) for c in ("body", "title")]
    assert all(m is not None for m in mem)
    queries = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 6))) for _ in range(150)]
    queries += ["sync sync notes", "plugins plugin", "the a", "zzzz", "Théme файлы"]
    for k in (1, 5, 20):
        for cols, boosts in ((["body"], [1.0]), (["body", "title"], [1.0, 2.0])):
            for q in queries:
                want_ids, want_scores = _lance(ds, q, cols, boosts, k)
                pos, scores = search([mem[("body", "title").index(c)] for c in cols], boosts, q, k)
                assert [int(ids[p]) for p in pos] == want_ids, (q, k, cols)
                assert scores.dtype == np.float32 and np.array_equal(scores, want_scores), (q, k, cols)
    # prefiltered: the top k of the rows the filter keeps, scored with the whole column's statistics
    for where in ("title = 'Sync'", "body LIKE '%graph%'", "title != 'Sync'"):
        kept = ds.to_table(columns=[], with_row_id=True, filter=where)["_rowid"].to_numpy()
        allowed = np.isin(ids, kept)
        for q in queries[:60]:
            want_ids, want_scores = _lance(ds, q, ["body", "title"], [1.0, 2.0], 5, where)
            pos, scores = search(mem, [1.0, 2.0], q, 5, allowed=allowed)
            assert [int(ids[p]) for p in pos] == want_ids and np.array_equal(scores, want_scores), (q, where)


def _ids(ds):
    return np.sort(ds.to_table(columns=[], with_row_id=True)["_rowid"].to_numpy())


def _postings(m):
    """token -> (row positions, contributions, term frequencies), whatever the order of the tokens."""
    return {t: (m.rows[s:e].tolist(), m.contrib[s:e].tobytes(), m.freq[s:e].tolist()) for t, (s, e) in m.slices.items()}


def test_an_index_older_than_the_rows_serves_the_rows_scores_as_a_rebuilt_index_does(tmp_path):
    from fanout.store.fts_delta import updated_column

    ds, rnd = _dataset(tmp_path, n=60)
    before_ids = _ids(ds)
    before = {c: memory_column(ds, c, before_ids) for c in ("body", "title")}
    ds.delete("title = 'Sync'")  # the index still counts the deleted rows (N, avgdl)
    ds.insert(pa.table({"body": ["sync notes sync", "", "graph plugins"], "title": ["Sync", "the a", "Graph"]}))
    ds = lance.dataset(str(tmp_path / "t.lance"))  # rows the index has not seen
    ids = _ids(ds)
    mem = {c: memory_column(ds, c, ids) for c in ("body", "title")}
    assert all(m is not None for m in mem.values())
    # one version's postings brought to the next (only the added rows tokenized): the same postings
    added = np.setdiff1d(ids, before_ids)
    texts = ds._take_rows(pa.array(added, pa.uint64()), columns=["body", "title"])
    for c in ("body", "title"):
        got = updated_column(before[c], before_ids, ids, list(zip(np.searchsorted(ids, added).tolist(),
                                                                  texts[c].to_pylist())))
        assert got is not None and _postings(got) == _postings(mem[c])
        summed = np.bincount(got.rows, weights=got.freq, minlength=got.n_rows).astype(np.uint32)  # the lengths
        assert np.array_equal(got.dl, summed) and np.array_equal(mem[c].dl, summed)  # carried over, not summed
    for c in ("body", "title"):  # the index rebuilt on the same rows (same row ids): Lance's lists, bit for bit
        ds.create_scalar_index(c, "INVERTED", replace=True, **FTS)
    ds = lance.dataset(str(tmp_path / "t.lance"))
    queries = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 5))) for _ in range(60)] + ["sync notes"]
    for q in queries:
        want_ids, want_scores = _lance(ds, q, ["body", "title"], [1.0, 2.0], 10)
        pos, scores = search([mem["body"], mem["title"]], [1.0, 2.0], q, 10)
        assert [int(ids[p]) for p in pos] == want_ids and np.array_equal(scores, want_scores), q


@pytest.mark.parametrize("k", [1, 10, 60])
def test_memory_engine_serves_fanouts_lists_without_calling_lance(tmp_path, fake_cfg, fake_runner, monkeypatch, k):
    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    mem_cfg = fake_cfg.replace(retrieve={"fts_engine": "memory", "fts_memory_after": 0})
    lance_cfg = fake_cfg.replace(retrieve={"fts_engine": "lance"})
    mem, ref = Collection(str(db), "t", mem_cfg), Collection(str(db), "t", lance_cfg)
    mem.refresh()
    ref.refresh()
    cols, boosts = ["body_en", "body_ru", "title_en", "title_ru", "heading_en", "heading_ru"], [1, 1, 2, 2, 1, 1]
    texts = [*TEXTS, "sync sync notes the", "заметки заметок"]
    wheres = [None, "path LIKE 'Sync/%'"] * (len(texts) // 2) + [None] * (len(texts) % 2)
    want = [t.to_pylist() for t in ref.fts_search_many(texts, cols, boosts, k, ["path", "chunk_id"], wheres)]
    calls = []
    real = fts._lance_many
    monkeypatch.setattr(fts, "_lance_many", lambda ds, qs, *a: calls.append(qs) or real(ds, qs, *a))
    got = [t.to_pylist() for t in mem.fts_search_many(texts, cols, boosts, k, ["path", "chunk_id"], wheres)]
    assert got == want and any(got)
    assert calls == []  # prefiltered queries too: the filter is evaluated once by Lance, the search in memory
    assert fts_page_lists(mem, texts, mem_cfg) == fts_page_lists(ref, texts, lance_cfg)


def test_the_postings_are_built_once_lance_calls_have_cost_as_much(tmp_path, fake_cfg, fake_runner, monkeypatch):
    """retrieve.fts_memory_after: a one-off search of a large index is not held up by a build it would not pay
    back; once the process's Lance calls on the version have cost what the build would, the postings are built."""
    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    calls = []
    real = fts._lance_many
    monkeypatch.setattr(fts, "_lance_many", lambda ds, qs, *a: calls.append(len(qs)) or real(ds, qs, *a))
    # without a postings file (tests/test_fts_postings.py: with one they are loaded at the first call)
    never = fake_cfg.replace(retrieve={"fts_engine": "memory", "fts_memory_after": 1e9, "fts_postings_file": False})
    col = Collection(str(db), "t", never)
    col.refresh()
    for _ in range(3):
        first = col.fts_search_many(["sync notes"], ["body_en"], [1.0], 5, ["path"])
    assert calls == [1, 1, 1]  # a build that would not pay back is never made
    calls.clear()
    monkeypatch.setattr(fts, "_SHARED", type(fts._SHARED)())  # a fresh process's state: no Lance CPU spent yet
    soon = fake_cfg.replace(retrieve={"fts_engine": "memory", "fts_memory_after": 1e-6, "fts_postings_file": False})
    col = Collection(str(db), "t", soon)
    col.refresh()
    col.fts_search_many(["sync"], ["body_en"], [1.0], 5, ["path"])
    again = col.fts_search_many(["sync notes"], ["body_en"], [1.0], 5, ["path"])
    assert calls == [1]  # the first call went to Lance and paid for the build; the second one is served from memory
    assert [t.to_pylist() for t in again] == [t.to_pylist() for t in first]


def test_collections_of_one_process_share_the_postings(tmp_path, fake_cfg, fake_runner):
    """The in-process loop's ProbeBM25 and Retrieve each open a Collection: the postings of a version are built
    once per process, not once per Collection."""
    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    cfg = fake_cfg.replace(retrieve={"fts_engine": "memory", "fts_memory_after": 0})
    a, b = Collection(str(db), "t", cfg), Collection(str(db), "t", cfg)
    a.refresh()
    b.refresh()
    ds_a, ds_b = a.dataset(a.chunks_name), b.dataset(b.chunks_name)
    got_a = fts.memory_columns(ds_a, ["body_en"], a.row_keys(("path", "chunk_id"))[0], cfg.retrieve)
    got_b = fts.memory_columns(ds_b, ["body_en"], b.row_keys(("path", "chunk_id"))[0], cfg.retrieve)
    assert got_a is not None and got_a[0] is got_b[0]


def test_a_build_that_fails_leaves_the_searches_to_lance(tmp_path, fake_cfg, fake_runner, monkeypatch):
    import fanout.store.fts_memory as fm

    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    ref = Collection(str(db), "t", fake_cfg.replace(retrieve={"fts_engine": "lance"}))
    col = Collection(str(db), "t", fake_cfg.replace(retrieve={"fts_engine": "memory", "fts_memory_after": 0}))
    ref.refresh()
    col.refresh()

    def broken(*a):
        raise AttributeError("an index description without field_names")

    monkeypatch.setattr(fm, "memory_column", broken)
    got = col.fts_search_many(TEXTS, ["body_en"], [1.0], 10, ["path", "chunk_id"])
    assert [t.to_pylist() for t in got] == \
        [t.to_pylist() for t in ref.fts_search_many(TEXTS, ["body_en"], [1.0], 10, ["path", "chunk_id"])]
