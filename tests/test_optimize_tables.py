"""`fanout optimize`: compaction folds many small fragments into few, keeps every row, and a reader that opened
the table before the compaction still reads (versions newer than keep_days are kept)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from fanout.pipelines.optimize_tables import collection_tables, optimize_tables

from fanout.cli.main import main
from fanout.store.db import Collection


def _fragmented(db, name: str, appends: int = 6) -> None:
    col = Collection(db, name)
    for t in (col.chunks_name, col.documents_name, f"{name}_cache_vectors"):
        tbl = col.db.create_table(t, pa.table({"key": ["k0"], "n": [0]}))
        for i in range(1, appends):
            tbl.add(pa.table({"key": [f"k{i}"], "n": [i]}))


def test_compacts_the_collections_tables_and_keeps_old_readers_working(tmp_path):
    _fragmented(tmp_path, "a")
    _fragmented(tmp_path, "a_b")  # another collection whose name starts like "a_": left alone
    reader = Collection(tmp_path, "a").table("a_chunks")  # opened before: stays on its version
    rows = optimize_tables(tmp_path, "a", keep_days=7)
    assert [r["table"] for r in rows] == ["a_chunks", "a_documents", "a_cache_vectors"]
    for r in rows:
        assert r["rows"] == 6 and r["fragments_before"] == 6 and r["fragments_after"] == 1
        assert r["versions_after"] >= r["versions_before"]  # nothing younger than 7 days was deleted
    assert sorted(reader.to_arrow()["n"].to_pylist()) == list(range(6))
    other = Collection(tmp_path, "a_b")
    assert other.table("a_b_chunks").stats()["fragment_stats"]["num_fragments"] == 6
    assert collection_tables(other) == ["a_b_chunks", "a_b_documents", "a_b_cache_vectors"]


def test_keep_days_zero_removes_old_versions(tmp_path):
    _fragmented(tmp_path, "a", appends=3)
    with pytest.warns(UserWarning):  # lancedb warns that readers on old versions break
        rows = optimize_tables(tmp_path, "a", keep_days=0)
    assert all(r["versions_after"] == 1 for r in rows)


def test_errors_name_the_problem(tmp_path):
    _fragmented(tmp_path, "a", appends=2)
    with pytest.raises(FileNotFoundError, match="no tables of collection 'nope'.*a_chunks"):
        optimize_tables(tmp_path, "nope")
    with pytest.raises(ValueError, match="keep_days must be >= 0, got -1"):
        optimize_tables(tmp_path, "a", keep_days=-1)


def test_cli_optimize_every_table(tmp_path, capsys):
    _fragmented(tmp_path, "a", appends=3)
    assert main(["optimize", "--db", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "a_chunks: 3 rows, fragments 3 -> 1" in out and "a_cache_vectors" in out
