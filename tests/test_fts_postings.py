"""The memory engine's postings files (fanout/store/fts_postings.py): loaded == built bit for bit, written by an
index run, loaded by a fresh process state without a build, and never used when stale or damaged."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from fanout.pipelines.index import index_vault

from fanout.store import fts, fts_memory, fts_postings, version_files
from fanout.store.db import Collection, fts_columns
from tests.support.fts import TEXTS
from tests.support.vault import write_vault

COLS, BOOSTS = ["body_en", "body_ru", "title_en", "title_ru", "heading_en", "heading_ru"], [1, 1, 2, 2, 1, 1]


@pytest.fixture
def db(tmp_path, fake_cfg, fake_runner):
    d = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), d, "t", fake_cfg, fake_runner)
    return d


def _col(db, cfg, **retrieve):
    c = Collection(str(db), "t", cfg.replace(retrieve={"fts_engine": "memory", **retrieve}))
    c.refresh()
    return c


def _files(db):
    d = db / "t_chunks.postings"
    return sorted(os.listdir(d)) if d.is_dir() else []


@pytest.fixture
def builds(monkeypatch):
    calls = []
    real = fts_memory.memory_column
    monkeypatch.setattr(fts_memory, "memory_column", lambda ds, c, ids: calls.append(c) or real(ds, c, ids))
    monkeypatch.setattr(fts, "_SHARED", type(fts._SHARED)())
    monkeypatch.setattr(fts_postings, "_FRESH", {})  # (a process that holds none of them)  # a fresh process's state
    monkeypatch.setattr(fts_postings, "_FRESH", {})
    return calls


def test_an_index_run_writes_them_and_loaded_equals_built_bit_for_bit(db, fake_cfg):
    names = _files(db)
    assert len(names) == len(fts_columns(fake_cfg.index.languages)) and all(n.endswith(".arrow") for n in names)
    col = _col(db, fake_cfg)
    ds, ids = col.dataset(col.chunks_name), col.row_keys(("path", "chunk_id"))[0]
    for c in fts_columns(fake_cfg.index.languages):
        built, loaded = fts_memory.memory_column(ds, c, ids), fts_postings.load(ds, c, ids)
        assert built is not None and loaded is not None
        assert loaded.slices == built.slices and loaded.tokenize_args == built.tokenize_args
        assert loaded.rows.dtype == built.rows.dtype and np.array_equal(loaded.rows, built.rows)
        assert loaded.contrib.dtype == np.float32 and loaded.contrib.tobytes() == built.contrib.tobytes()
        summed = np.bincount(built.rows, weights=built.freq, minlength=len(ids)).astype(np.uint32)
        assert np.array_equal(loaded.dl, summed) and np.array_equal(built.dl, summed)  # read, not summed again
        for q in TEXTS:
            for k in (1, 10):
                a, b = fts_memory.search([built], [1.0], q, k), fts_memory.search([loaded], [1.0], q, k)
                assert np.array_equal(a[0], b[0]) and a[1].tobytes() == b[1].tobytes()


def test_a_fresh_process_loads_them_from_the_first_call_without_building(db, fake_cfg, builds, monkeypatch):
    ref = _col(db, fake_cfg, fts_engine="lance")
    want = [t.to_pylist() for t in ref.fts_search_many(TEXTS, COLS, BOOSTS, 10, ["path", "chunk_id"])]
    lance_calls = []
    real = fts._lance_many
    monkeypatch.setattr(fts, "_lance_many", lambda ds, qs, *a: lance_calls.append(qs) or real(ds, qs, *a))
    col = _col(db, fake_cfg, fts_memory_after=1e9)  # the ski-rental rule alone would never build
    got = [t.to_pylist() for t in col.fts_search_many(TEXTS, COLS, BOOSTS, 10, ["path", "chunk_id"])]
    assert got == want and any(got)
    assert builds == [] and lance_calls == []
    off = _col(db, fake_cfg, fts_memory_after=1e9, fts_postings_file=False)
    monkeypatch.setattr(fts, "_SHARED", type(fts._SHARED)())
    monkeypatch.setattr(fts_postings, "_FRESH", {})  # (a process that holds none of them)
    off.fts_search_many(TEXTS[:1], COLS, BOOSTS, 10, ["path", "chunk_id"])
    assert len(lance_calls) == 1  # turned off: the file is not read


def test_a_process_that_builds_them_writes_the_file(db, fake_cfg, builds):
    for n in _files(db):
        os.remove(db / "t_chunks.postings" / n)
    col = _col(db, fake_cfg, fts_memory_after=0)
    col.fts_search_many(TEXTS[:2], COLS, BOOSTS, 10, ["path", "chunk_id"])
    assert sorted(builds) == sorted(COLS) and len(_files(db)) == len(COLS)
    builds.clear()
    fts._SHARED.clear()
    _col(db, fake_cfg, fts_memory_after=0).fts_search_many(TEXTS[:2], COLS, BOOSTS, 10, ["path", "chunk_id"])
    assert builds == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_damaged_file_is_ignored_with_a_warning_and_rebuilt(db, fake_cfg, builds, damage, caplog):
    ref = _col(db, fake_cfg, fts_engine="lance")
    want = [t.to_pylist() for t in ref.fts_search_many(TEXTS, ["body_en"], [1.0], 10, ["path", "chunk_id"])]
    path = db / "t_chunks.postings" / next(n for n in _files(db) if n.startswith("body_en."))
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":  # inside the arrays: only the checksum sees it
        data[len(data) // 2] ^= 0x01
    elif damage == "garbage":
        data = bytearray(b"not an arrow file" * 10)
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    col = _col(db, fake_cfg, fts_memory_after=0)
    with caplog.at_level(logging.WARNING):
        got = [t.to_pylist() for t in col.fts_search_many(TEXTS, ["body_en"], [1.0], 10, ["path", "chunk_id"])]
    assert got == want, (builds, caplog.text[-2000:])
    assert builds == ["body_en"] and "is not used" in caplog.text
    ds, ids = col.dataset(col.chunks_name), col.row_keys(("path", "chunk_id"))[0]
    assert fts_postings.load(ds, "body_en", ids) is not None  # rewritten


def test_a_stale_file_is_never_used(db, fake_cfg, fake_runner, tmp_path, builds, monkeypatch):
    """Another version's or other rows' file: its name does not match. A search brings the older version's
    postings to its own version in memory (the added rows tokenized: what a build gives); without an older file
    it builds them and writes its version's file, the old one removed."""
    old = set(_files(db))
    (tmp_path / "vault" / "new note.md").write_text("# New\n\nsync notes graph\n", encoding="utf-8")
    cfg = fake_cfg.replace(retrieve={"fts_postings_file": False})  # the run leaves the old files
    index_vault(tmp_path / "vault", db, "t", cfg, fake_runner)
    assert set(_files(db)) == old
    col = _col(db, fake_cfg, fts_memory_after=0)
    ds, ids = col.dataset(col.chunks_name), col.row_keys(("path", "chunk_id"))[0]
    assert fts_postings.load(ds, "body_en", ids) is None  # the old version's file is not this one
    assert fts_postings.load(ds, "body_en", ids[:-1]) is None  # other rows: not even looked at
    got = col.fts_search_many(TEXTS, ["body_en"], [1.0], 10, ["path", "chunk_id"])
    assert builds == []  # updated from the older version's file
    updated = fts.memory_columns(ds, ["body_en"], ids, col.cfg.retrieve)
    built = fts_memory.memory_column(ds, "body_en", ids)
    assert updated is not None and built is not None and updated[0].slices == built.slices
    assert updated[0].contrib.tobytes() == built.contrib.tobytes()
    monkeypatch.setattr(fts, "_SHARED", type(fts._SHARED)())
    monkeypatch.setattr(fts_postings, "_FRESH", {})  # (a process that holds none of them)
    monkeypatch.setattr(fts_postings, "_from_previous", lambda *a: None)  # no older file to start from
    builds.clear()
    assert [t.to_pylist() for t in col.fts_search_many(TEXTS, ["body_en"], [1.0], 10, ["path", "chunk_id"])] == \
        [t.to_pylist() for t in got]
    assert builds == ["body_en"]
    new = [n for n in _files(db) if n.startswith("body_en.")]
    assert len(new) == 1 and new[0] not in old  # the superseded version's file removed


def test_an_index_run_keeps_one_version_per_column(db, fake_cfg, fake_runner, tmp_path):
    (tmp_path / "vault" / "new note.md").write_text("# New\n\nsync notes graph\n", encoding="utf-8")
    before = _files(db)
    index_vault(tmp_path / "vault", db, "t", fake_cfg, fake_runner)
    version_files.wait()  # a round's files are written after it returns
    after = _files(db)
    assert len(after) == len(before) and not set(after) & set(before)


def test_other_index_parameters_give_another_fingerprint(db, fake_cfg):
    col = _col(db, fake_cfg)
    ds, ids = col.dataset(col.chunks_name), col.row_keys(("path", "chunk_id"))[0]
    fp = fts_postings.fingerprint(ds, "body_en", ids)[0]
    assert fp != fts_postings.fingerprint(ds, "body_ru", ids)[0]
    ds.create_scalar_index("body_en", "INVERTED", replace=True, stem=False)  # other parameters, a new version
    import lance

    ds2 = lance.dataset(col.table_uri(col.chunks_name))  # the latest version (the manifest still pins the old)
    assert ds2.index_statistics("body_en_idx")["indices"][0]["params"]["stem"] is False
    assert fts_postings.fingerprint(ds2, "body_en", ids)[0] != fp
    assert fts_postings.load(ds2, "body_en", ids) is None


def test_object_store_dbs_keep_no_file():
    class Ds:  # a chunks table on an object store
        uri = "s3://bucket/db/t_chunks.lance"

    assert fts_postings.folder(Ds()) is None
    assert set(fts_postings.ensure(Ds(), ["body_en"], 2_000_000).values()) == {"object store: built per process"}


def test_optimize_writes_the_compacted_versions_files_and_removes_the_old(db, fake_cfg, builds):
    from fanout.pipelines.optimize_tables import optimize_tables

    before = _files(db)
    optimize_tables(db, "t", keep_days=0, cfg=fake_cfg)
    after = _files(db)
    assert len(after) == len(before)  # one file per column, the pinned (compacted) version's
    col = _col(db, fake_cfg, fts_memory_after=1e9)
    ds, ids = col.dataset(col.chunks_name), col.row_keys(("path", "chunk_id"))[0]
    assert all(fts_postings.load(ds, c, ids) is not None for c in COLS)
    col.fts_search_many(TEXTS[:2], COLS, BOOSTS, 10, ["path", "chunk_id"])
    assert builds == []


def test_a_rounds_postings_are_made_after_it_returns_and_its_searches_use_them(db, fake_cfg, fake_runner, tmp_path,
                                                                               builds, monkeypatch):
    """An index round leaves its postings to a job that runs after it returns (one at a time per table): its
    searches wait for that job and use the updated columns it made (no file read back, nothing built), the same
    bits as a build; the job writes the version's files and removes the older ones."""
    import threading

    gate = threading.Event()
    real = fts_postings.ensure
    monkeypatch.setattr(fts_postings, "ensure", lambda *a, **k: gate.wait(30) and real(*a, **k))
    (tmp_path / "vault" / "new note.md").write_text("# New\n\nsync notes graph\n", encoding="utf-8")
    before = _files(db)
    index_vault(tmp_path / "vault", db, "t", fake_cfg, fake_runner)  # returns while its job waits at the gate
    assert _files(db) == before
    col = _col(db, fake_cfg, fts_memory_after=1e9)
    ds, ids = col.dataset(col.chunks_name), col.row_keys(("path", "chunk_id"))[0]
    threading.Timer(0.2, gate.set).start()
    got = fts.memory_columns(ds, COLS, ids, col.cfg.retrieve)  # waits for the job
    assert got is not None and builds == []
    assert all(m is fts_postings._FRESH[(str(ds.uri), c)].mem for c, m in zip(COLS, got))  # the job's own
    for c, m in zip(COLS, got):
        built = fts_memory.memory_column(ds, c, ids)
        assert built is not None and m.slices == built.slices and m.contrib.tobytes() == built.contrib.tobytes()
    after = _files(db)
    assert len(after) == len(before) and not set(after) & set(before)


def test_a_round_of_few_changes_keeps_the_older_files_until_the_share_is_passed(db, fake_cfg, fake_runner, tmp_path,
                                                                                builds):
    """`index.query_files_share`: while the rows added and deleted since the files are fewer than that share, a
    round's postings and vectors stay in memory (the older files stay); its searches and those of another process
    (from the older files, brought up to date) give the build's bits; past the share they are written."""
    from fanout.store import exact_vectors

    cfg = fake_cfg.replace(index={"query_files_share": 0.5})
    before = _files(db)
    vec_dir = db / "t_chunks.exact"
    vec_before = sorted(os.listdir(vec_dir))
    for i in range(2):  # two rounds: the second starts from the first's postings in memory
        (tmp_path / "vault" / f"new note {i}.md").write_text(f"# New {i}\n\nsync notes graph {i}\n", "utf-8")
        index_vault(tmp_path / "vault", db, "t", cfg, fake_runner)
        version_files.wait()
        assert _files(db) == before and sorted(os.listdir(vec_dir)) == vec_before
    col = _col(db, cfg, fts_memory_after=1e9)
    ds, ids = col.dataset(col.chunks_name), col.row_keys(("path", "chunk_id"))[0]
    fresh = [fts_postings._FRESH[(str(ds.uri), c)] for c in COLS]
    assert all(f.version == int(ds.version) and f.since_file > 0 for f in fresh)
    other = {c: fts_postings.load_or_update(ds, c, ids) for c in COLS}
    fts_postings._FRESH.clear()  # another process: the older files brought up to this version
    for c, f in zip(COLS, fresh):
        built, updated = fts_memory.memory_column(ds, c, ids), fts_postings.load_or_update(ds, c, ids)
        assert built is not None and updated is not None and other[c] is f.mem
        for m in (f.mem, updated):
            assert m.slices == built.slices and m.contrib.tobytes() == built.contrib.tobytes()
    exact_vectors._CACHE.clear()
    m = exact_vectors.matrix(ds, files=True, save=False)  # from the older file and the rows added
    assert m is not None and m.since_file
    exact_vectors._CACHE.clear()
    full = exact_vectors.matrix(ds, files=False)  # every row read from Lance
    assert full is not None and np.array_equal(m.ids, full.ids) and m.compact()[0].tobytes() == full.vectors.tobytes()
    assert sorted(builds) == sorted(COLS)  # (the reference builds above only)
    (tmp_path / "vault" / "new note 2.md").write_text("# New 2\n\ngraph\n", "utf-8")
    index_vault(tmp_path / "vault", db, "t", fake_cfg.replace(index={"query_files_share": 0.01}), fake_runner)
    version_files.wait()  # past the share: written, the older files removed
    after = _files(db)
    assert len(after) == len(before) and not set(after) & set(before) and sorted(builds) == sorted(COLS)
    assert len(os.listdir(vec_dir)) == 1 and sorted(os.listdir(vec_dir)) != vec_before
