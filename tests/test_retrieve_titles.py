"""The title_vec / heading_vec lanes (pipelines/retrieve_titles.py) on the tiny vault: real embedder (slow) and
the fake profile (stage wiring, incremental table, defaults unchanged)."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest
from fanout.pipelines.fuse_rrf import fuse_rrf
from fanout.pipelines.retrieve_titles import RetrieveTitles, ensure_titles, title_texts, titles_name
from fanout.pipelines.search import Searcher, SearchOptions, search_stages

from fanout.config import FuseConfig
from fanout.schemas import HITS
from fanout.store.db import Collection
from tests.support.vault import write_vault

LANES = ["fts", "vec", "alias", "title_vec", "heading_vec"]


@pytest.fixture()
def db(tiny_db, tmp_path):
    """A private copy of the session index: these tests write the `<collection>_titles` table into it."""
    return shutil.copytree(tiny_db, tmp_path / "db")


def test_title_texts_lists_titles_aliases_and_headings_outside_code(db):
    rows = title_texts(Collection(db, "t"))
    got = {(r["path"], r["kind"], r["text"]) for r in rows}
    assert ("Linking/Internal links.md", "alias", "Old links") in got  # an alias's last path segment
    assert ("Linking/Internal links.md", "alias", "Linking/Old links") in got
    assert ("Sync/Sync your notes.md", "heading", "Sync your notes > Version history") in got
    # "# this is a comment" sits inside a code fence: not a heading
    assert not any("comment" in r["text"] for r in rows)
    # a heading row points at the chunk it was found in
    assert all(r["chunk_id"].startswith(r["path"] + "#") for r in rows)
    plain = {r["text"] for r in title_texts(Collection(db, "t"), "heading") if r["kind"] == "heading"}
    assert "Version history" in plain


def test_titles_table_is_built_once_and_kept_in_step(db, cfg, runner):
    col = Collection(db, "t")
    calls = runner.calls.get("embedder", 0)
    setting, _ = ensure_titles(col, runner, cfg)
    table = col.table(titles_name(col)).to_arrow()
    assert table.num_rows == len(title_texts(col)) and set(table["setting"].to_pylist()) == {setting}
    assert runner.calls.get("embedder", 0) == calls + 1
    # as in a new process: the table is checked against the collection again, nothing new to embed
    assert ensure_titles(Collection(db, "t"), runner, cfg)[0] == setting
    assert runner.calls.get("embedder", 0) == calls + 1
    # another setting (headings without the page title) embeds its own rows; the first setting's stay
    other, _ = ensure_titles(col, runner, cfg.replace(retrieve={"heading_text": "heading"}))
    table = col.db.open_table(titles_name(col)).to_arrow()
    assert other != setting
    assert table.num_rows == len(title_texts(col)) + len(title_texts(col, "heading"))


def test_title_lanes_find_the_page_by_meaning_of_its_title_or_heading(db, cfg, runner):
    s = Searcher(db, "t", cfg.replace(retrieve={"lanes": LANES}), runner)
    res = s.search([{"id": "a", "query": "pancake recipe"}, {"id": "b", "query": "restore an older version"}],
                   SearchOptions(n=6, expand=False, rerank=False, explain=True))
    first: dict[tuple[str, str], str] = {}  # (qid, lane) -> the page that lane ranks first
    for r in res.results.to_pylist():
        for lst in json.loads(r["_explain"])["lists"]:
            if lst["rank"] == 1:
                first[(r["qid"], lst["lane"])] = r["path"]
    assert first[("a", "title_vec")] == "Рецепты/Блины.md"  # the English alias "Pancakes" of a Russian page
    assert first[("b", "heading_vec")] == "Sync/Sync your notes.md"  # "Version history"


def test_title_lanes_fuse_with_their_own_weights():
    # one query, two pages; B is first only in the title lane. With w_title_vec 0 that list adds nothing and
    # A wins on the vector list (1/61 vs 1/62); with w_title_vec 3, B scores 1/62 + 3/61 against A's 1/61.
    hits = pa.Table.from_pylist([
        {"qid": "q", "vid": 0, "kind": "orig", "lane": "vec", "path": "A", "chunk_id": "A#0", "_rank": 1, "_score": 1.0},
        {"qid": "q", "vid": 0, "kind": "orig", "lane": "vec", "path": "B", "chunk_id": "B#0", "_rank": 2, "_score": 0.9},
        {"qid": "q", "vid": 0, "kind": "orig", "lane": "title_vec", "path": "B", "chunk_id": "B#0", "_rank": 1,
         "_score": 0.8},
    ], schema=HITS)
    off = fuse_rrf(hits, FuseConfig(w_original=1.0, w_title_vec=0.0, bonus_first=0, bonus_top3=0)).to_pylist()
    assert [r["path"] for r in off] == ["A", "B"]
    on = fuse_rrf(hits, FuseConfig(w_original=1.0, w_title_vec=3.0, bonus_first=0, bonus_top3=0)).to_pylist()
    assert [r["path"] for r in on] == ["B", "A"]
    assert on[0]["_rrf"] == pytest.approx(1 / 62 + 3 / 61)


@pytest.fixture(scope="module")
def fake_cfg():
    from fanout.config import load_config

    return load_config("fake")


def test_title_lanes_are_a_stage_only_when_asked_for(fake_cfg):
    names = [s.name for s in search_stages(fake_cfg, "/tmp/x", "t")]
    assert "RetrieveTitles" not in names  # the default lanes: the pipeline is unchanged
    on = [s.name for s in search_stages(fake_cfg.replace(retrieve={"lanes": LANES}), "/tmp/x", "t")]
    assert on.index("EmbedVariants") < on.index("RetrieveTitles") < on.index("Retrieve")


def test_title_lanes_with_the_fake_embedder_rank_title_words_and_update_incrementally(tmp_path, fake_cfg):
    from fanout.pipelines.index import index_vault

    from fanout.exec.runner import Runner

    vault = write_vault(tmp_path / "vault")
    db = tmp_path / "db"
    cfg = fake_cfg.replace(retrieve={"lanes": ["fts", "vec", "title_vec", "heading_vec"]}, probe={"enabled": False})
    with Runner(cfg) as runner:
        index_vault(vault, db, "t", cfg, runner)
        res = Searcher(db, "t", cfg, runner).search([{"id": "h", "query": "version history"}],
                                                    SearchOptions(n=5, explain=True))
        lists = [lst for r in res.results.to_pylist() for lst in json.loads(r["_explain"])["lists"]]
        assert {x["lane"] for x in lists} >= {"title_vec", "heading_vec"}
        top = {x["lane"]: r["path"] for r in res.results.to_pylist()
               for x in json.loads(r["_explain"])["lists"] if x["rank"] == 1}
        assert top["heading_vec"] == "Sync/Sync your notes.md"  # its "Version history" heading
        stage = res.stats["stages"]["RetrieveTitles"]
        assert stage["title_vec_lists"] == 1 and stage["heading_vec_lists"] == 1
        col = Collection(db, "t")
        n = col.db.open_table(titles_name(col)).count_rows()
        assert n == len(title_texts(col))
        # a new note: only its rows are embedded on the next use (a fresh stage, as in a new process)
        (vault / "Starred.md").write_text("# Bookmarks\n\nKeep notes one click away.\n", encoding="utf-8")
        index_vault(vault, db, "t", cfg, runner)
        col = Collection(db, "t", cfg)
        col.refresh()
        before = runner.calls.get("embedder", 0)
        stage = RetrieveTitles(cfg, str(db), "t", runner)
        ensure_titles(col, runner, cfg, stage.kinds)
        assert runner.calls.get("embedder", 0) == before + 1
        assert col.db.open_table(titles_name(col)).count_rows() == n + 1  # the one title row
