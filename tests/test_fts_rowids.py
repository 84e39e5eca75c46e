"""Full-text results as row ids mapped through the pinned version's rows in memory (fanout/store/db.py row_keys):
the same page lists as reading path/chunk_id per call, rebuilt for a new index version, off above the limit."""

from __future__ import annotations

from fanout.pipelines.index import index_vault
from fanout.pipelines.lanes import fts_page_lists

from fanout.store.db import Collection
from tests.support.fts import TEXTS
from tests.support.vault import write_vault


def test_rowid_lists_equal_column_lists_and_follow_new_versions(tmp_path, fake_cfg, fake_runner):
    vault = write_vault(tmp_path / "vault")
    db = tmp_path / "db"
    index_vault(vault, db, "t", fake_cfg, fake_runner)
    off = fake_cfg.replace(retrieve={"rowid_map_rows": 0})
    col, plain = Collection(str(db), "t", fake_cfg), Collection(str(db), "t", off)
    col.refresh()
    plain.refresh()
    got = fts_page_lists(col, TEXTS, fake_cfg)
    assert col.row_keys(("path", "chunk_id")) is not None and plain.row_keys(("path", "chunk_id")) is None
    assert got == fts_page_lists(plain, TEXTS, off)
    assert got[0] and got[3] and got[5] == [] and got[6] == []
    wheres = ["path LIKE 'Sync/%'"] * len(TEXTS)  # a prefilter keeps to the same rows either way
    assert fts_page_lists(col, TEXTS, fake_cfg, wheres) == fts_page_lists(plain, TEXTS, off, wheres)

    # a new index version (a note added, another deleted): the map is rebuilt with the new pins
    (vault / "Editing" / "Code blocks.md").unlink()
    (vault / "Plugins" / "Sync conflicts.md").write_text("# Sync conflicts\n\nWhen two devices sync notes at once, "
                                                         "the sync conflict copy keeps both.\n", encoding="utf-8")
    index_vault(vault, db, "t", fake_cfg, fake_runner)
    col.refresh()
    plain.refresh()
    again = fts_page_lists(col, TEXTS, fake_cfg)
    assert again == fts_page_lists(plain, TEXTS, off)
    assert "Plugins/Sync conflicts.md" in {p["path"] for p in again[0]}
    assert all(p["path"] != "Editing/Code blocks.md" for pages in again for p in pages)


def test_rowid_map_off_above_its_limit(tmp_path, fake_cfg, fake_runner):
    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    small = fake_cfg.replace(retrieve={"rowid_map_rows": 2})  # fewer than the index's chunks
    col = Collection(str(db), "t", small)
    col.refresh()
    assert col.row_keys(("path", "chunk_id")) is None
    assert fts_page_lists(col, TEXTS, small)[0]


def _lancedb_lists(db, queries, columns, boosts, k, select, wheres) -> list[list[dict]]:
    """The reference: lancedb's own query builder (what the removed `lancedb` engine called)."""
    import asyncio

    import lancedb
    from lancedb.query import MultiMatchQuery

    async def run():
        tbl = await (await lancedb.connect_async(str(db))).open_table("t_chunks")
        out = []
        for q, w in zip(queries, wheres):
            if not q.strip():
                out.append([])
                continue
            query = tbl.query().nearest_to_text(MultiMatchQuery(q, columns, boosts=boosts))
            if w:
                query = query.where(w)
            out.append((await query.select(select).limit(k).to_arrow()).select([*select, "_score"]).to_pylist())
        return out

    return asyncio.run(run())


def test_lance_engine_gives_lancedbs_lists(tmp_path, fake_cfg, fake_runner):
    """retrieve.fts_engine: Lance called directly (pylance, the Lance release lancedb embeds) returns exactly
    lancedb's rows and scores, and the memory engine the same page lists: with and without prefilters, row-id
    map on and off."""
    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    wheres = [None, "path LIKE 'Sync/%'", None, "path LIKE 'Sync/%'", None, None, None]
    cols, boosts = ["body_en", "title_en", "body_ru"], [1.0, 2.0, 1.0]
    for rows in (2_000_000, 0):
        lance_cfg = fake_cfg.replace(retrieve={"rowid_map_rows": rows, "fts_engine": "lance"})
        mem_cfg = fake_cfg.replace(retrieve={"rowid_map_rows": rows, "fts_engine": "memory", "fts_memory_after": 0})
        fast, mem = Collection(str(db), "t", lance_cfg), Collection(str(db), "t", mem_cfg)
        fast.refresh()
        mem.refresh()
        for w in (None, wheres):
            got = fast.fts_search_many(TEXTS, cols, boosts, 10, ["path", "chunk_id"], w)
            want = _lancedb_lists(db, TEXTS, cols, boosts, 10, ["path", "chunk_id"], w or [None] * len(TEXTS))
            assert [t.to_pylist() for t in got] == want
            assert got[0].num_rows and (got[3].num_rows or w) and not got[5].num_rows
            assert fts_page_lists(fast, TEXTS, lance_cfg, w) == fts_page_lists(mem, TEXTS, mem_cfg, w)
        # k=1 with a filter that excludes the best hit: a prefilter still finds the filter's best row
        # (a filter applied after the top 1 would return nothing)
        one = [fast.fts_search_many(["internal links sync"], ["body_en"], [1.0], 1, ["path"], [f"path NOT LIKE '{p}%'"])
               for p in ("Linking/", "Sync/")]
        assert all(t[0].num_rows == 1 for t in one)
