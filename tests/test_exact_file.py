"""Exact search's vectors file (fanout/store/vectors_file.py): what the Lance read gives, bit for bit; written by an
index run; mapped by a fresh process; a damaged or stale file ignored with a warning."""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np
import pytest
from fanout.pipelines.index import index_vault

from fanout.store import exact_vectors, vector_topk, vectors_file
from fanout.store.db import Collection
from tests.support.vault import write_vault


@pytest.fixture
def db(tmp_path, fake_cfg, fake_runner, monkeypatch):
    monkeypatch.setattr(exact_vectors, "_CACHE", type(exact_vectors._CACHE)())  # a fresh process's copies
    d = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), d, "t", fake_cfg, fake_runner)
    exact_vectors.wait_files()  # an index run writes it in the background
    return d


def _ds(db, cfg):
    col = Collection(str(db), "t", cfg)
    col.refresh()
    return col, col.dataset(col.chunks_name)


def _files(db):
    d = db / "t_chunks.exact"
    return sorted(os.listdir(d)) if d.is_dir() else []


def test_an_index_run_writes_it_and_the_file_equals_the_lance_read(db, fake_cfg, monkeypatch):
    assert len(_files(db)) == 1
    _, ds = _ds(db, fake_cfg)
    a = exact_vectors.matrix(ds)  # from Lance
    exact_vectors._CACHE.clear()
    reads = []
    monkeypatch.setattr(type(ds), "to_batches", lambda *a, **k: reads.append(1) or iter(()))
    b = exact_vectors.matrix(ds, files=True)
    assert reads == [] and not b.vectors.flags.writeable  # mapped, not read from the table
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.damaged, b.damaged)
    assert a.vectors.dtype == b.vectors.dtype and a.vectors.tobytes() == b.vectors.tobytes()
    q = np.random.default_rng(1).standard_normal((20, a.vectors.shape[1])).astype(np.float32)
    for x, y in zip(vector_topk.top_k(a, q, 10), vector_topk.top_k(b, q, 10)):
        assert np.array_equal(x, y)


def test_searches_equal_with_and_without_the_file(db, fake_cfg):
    off = dataclasses.replace(fake_cfg, index=dataclasses.replace(fake_cfg.index, exact_vectors_file=False))
    col_off, _ = _ds(db, off)
    vecs = [list(np.random.default_rng(i).standard_normal(64)) for i in range(5)]
    want = col_off.vector_search_many(vecs, 10, ["chunk_id", "_distance"]).to_pylist()
    assert len(want) == 50
    exact_vectors._CACHE.clear()
    col_on, _ = _ds(db, fake_cfg)
    assert col_on.vector_search_many(vecs, 10, ["chunk_id", "_distance"]).to_pylist() == want


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_damaged_file_is_ignored_with_a_warning_and_rewritten(db, fake_cfg, damage, caplog):
    _, ds = _ds(db, fake_cfg)
    want = exact_vectors.matrix(ds)
    exact_vectors._CACHE.clear()
    path = db / "t_chunks.exact" / _files(db)[0]
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        got = exact_vectors.matrix(ds, files=True)
    assert "is not used" in caplog.text
    assert got.vectors.tobytes() == want.vectors.tobytes()  # read from Lance, rewritten, and
    assert not got.vectors.flags.writeable  # mapped from the new file: the private copy is not kept
    assert vectors_file.load(ds, "vector") is not None


def test_another_version_never_uses_the_old_file(db, fake_cfg, fake_runner, tmp_path):
    old = _files(db)
    (tmp_path / "vault" / "new note.md").write_text("# New\n\nsync notes graph\n", encoding="utf-8")
    index_vault(tmp_path / "vault", db, "t", fake_cfg, fake_runner)
    exact_vectors.wait_files()
    new = _files(db)
    assert len(new) == 1 and new != old  # the old version's file removed
    _, ds = _ds(db, fake_cfg)
    m = exact_vectors.matrix(ds, files=True)
    assert len(m.ids) == ds.count_rows() and not m.vectors.flags.writeable


def test_object_store_tables_have_no_file():
    class Ds:
        uri = "s3://bucket/db/t_chunks.lance"

    assert vectors_file.folder(Ds()) is None


def test_a_round_does_not_wait_for_its_file_and_searches_its_copy_meanwhile(db, fake_cfg, fake_runner, tmp_path,
                                                                           monkeypatch):
    """An index round returns before the vectors file of its version is written (a thread writes it); this
    process searches its own copy meanwhile and maps the file once written; a search answers the same before,
    during and after."""
    import threading

    col, _ = _ds(db, fake_cfg)
    vecs = [list(np.random.default_rng(i).standard_normal(64)) for i in range(5)]
    col.vector_search_many(vecs, 10, ["chunk_id", "_distance"])  # this process holds the vectors
    (tmp_path / "vault" / "new note.md").write_text("# New\n\nsync notes graph\n", encoding="utf-8")
    go, real = threading.Event(), vectors_file.save
    monkeypatch.setattr(vectors_file, "save", lambda *a: go.wait(60) and real(*a))
    index_vault(tmp_path / "vault", db, "t", fake_cfg, fake_runner)  # returns while the writer waits
    col.refresh()
    ds = col.dataset(col.chunks_name)
    assert vectors_file.load(ds, "vector") is None  # not written yet
    during = col.vector_search_many(vecs, 10, ["chunk_id", "_distance"]).to_pylist()
    assert exact_vectors._CACHE[ds.uri].added is not None  # its own: the previous version's rows + those added
    go.set()
    exact_vectors.wait_files()
    assert vectors_file.load(ds, "vector") is not None and len(_files(db)) == 1
    m = exact_vectors._CACHE[ds.uri]
    assert m.version == int(ds.version) and not m.vectors.flags.writeable  # now mapped from the file
    assert col.vector_search_many(vecs, 10, ["chunk_id", "_distance"]).to_pylist() == during
    exact_vectors._CACHE.clear()
    fresh = exact_vectors.matrix(ds)  # a full load from Lance: the same floats
    assert fresh.vectors.tobytes() == m.vectors.tobytes() and np.array_equal(fresh.ids, m.ids)
