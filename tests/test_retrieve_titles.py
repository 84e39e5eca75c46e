"""The title_vec / heading_vec lanes (pipelines/retrieve_titles.py) on the tiny vault, real embedder."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest

from fanout.config import FuseConfig
from fanout.db import Collection
from fanout.schemas import HITS
from pipelines.fuse_rrf import fuse_rrf
from pipelines.retrieve_titles import _READY, ensure_titles, title_texts, titles_name
from pipelines.search import Searcher, SearchOptions

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


@pytest.mark.slow
def test_titles_table_is_built_once_and_kept_in_step(db, cfg, runner):
    col = Collection(db, "t")
    calls = runner.calls.get("embedder", 0)
    setting = ensure_titles(col, runner, cfg, "model-a")
    table = col.table(titles_name(col)).to_arrow()
    assert table.num_rows == len(title_texts(col)) and set(table["setting"].to_pylist()) == {setting}
    assert runner.calls.get("embedder", 0) == calls + 1
    _READY.clear()  # as in a new process: the table is checked against the collection again
    assert ensure_titles(Collection(db, "t"), runner, cfg, "model-a") == setting
    assert runner.calls.get("embedder", 0) == calls + 1  # nothing new to embed
    # another setting (headings without the page title) embeds its own rows; the first setting's stay
    other = ensure_titles(col, runner, cfg.replace(retrieve={"heading_text": "heading"}), "model-a")
    table = col.table(titles_name(col)).to_arrow()
    assert other != setting
    assert table.num_rows == len(title_texts(col)) + len(title_texts(col, "heading"))


@pytest.mark.slow
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
