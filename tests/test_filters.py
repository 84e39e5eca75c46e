"""Filters (folder, path prefix, tag, property, language) in query, search, batch and MCP, with the fake profile.

Checked: the filter parser's messages name the field and the fix; the `where` it builds (hand-written
expected SQL); each kind narrows the results to the notes it names, in every lane (full text, vectors,
alias); a job-wide filter and a row's own both apply; a bad filter is one error row, the other rows are
answered; an index written before the tag/property columns says how to update it, and `fanout index` then
adds them without re-embedding.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.vault import NOTES, write_vault

EXTRA = {
    "Projects/Alpha.md": "---\ntags: [project/alpha, Work]\nstatus: done\npriority: 2\n---\n# Alpha\n\n"
                         "Sync the alpha project notes every week. #weekly\n",
    "Projects/Beta.md": "---\nstatus: open\n---\n# Beta\n\nSync beta notes daily.\n",
}


@pytest.fixture(scope="module")
def fdb(tmp_path_factory, fake_cfg, fake_runner) -> Path:
    from fanout.pipelines.index import index_vault

    root = tmp_path_factory.mktemp("filters")
    vault = write_vault(root / "vault", {**NOTES, **EXTRA})
    index_vault(vault, root / "db", "t", fake_cfg, fake_runner)
    return root / "db"


@pytest.fixture(scope="module")
def searcher(fdb, fake_cfg, fake_runner):
    from fanout.pipelines.search import Searcher

    return Searcher(fdb, "t", fake_cfg, fake_runner)


# -- the parser and the SQL ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "field", "match"), [
    ({"folders": "x"}, "filter.folders", r"unknown filter 'folders'; use one of \['folder', 'lang', 'path'"),
    ({"property": "status="}, "filter.property", "is not `key=value`; write it as `status=done`"),
    ({"tag": 3}, "filter.tag", "must be a string or a list of strings, got int"),
    ({"tag": "two words"}, "filter.tag", "is not a tag"),
    ({"folder": "../etc"}, "filter.folder", "is not a path inside the vault"),
    ({"lang": "english!"}, "filter.lang", "is not a language code"),
    ("{not json", "filter", "is not valid JSON"),
    ([1], "filter", "must be an object"),
])
def test_bad_filter_values_name_the_field_and_the_fix(value, field, match):
    from fanout.filters import FilterError, parse_filter

    with pytest.raises(FilterError, match=match) as e:
        parse_filter(value)
    assert e.value.field == field


def test_where_sql_is_and_across_kinds_or_within_one():
    from fanout.filters import combine, parse_filter, where_sql

    f = parse_filter({"folder": ["Plugins/", "./Sync"], "tag": ["#A", "b"], "property": ["Status=Done", "status=open",
                                                                                       "type"],
                      "lang": "en"})
    assert f == {"folder": ["Plugins", "Sync"], "lang": ["en"], "property": ["status=done", "status=open", "type"],
                 "tag": ["a", "b"]}
    assert where_sql(combine(f, parse_filter({"path": "O'Neil"}))) == (
        "(starts_with(path, 'Plugins/') OR starts_with(path, 'Sync/')) AND lang IN ('en') AND "
        "array_has_any(props, ['status=done', 'status=open']) AND array_has_any(props, ['type']) AND "
        "array_has_any(tags, ['a', 'b']) AND starts_with(path, 'O''Neil')")
    assert where_sql(combine({}, None)) is None


def test_index_side_values():
    from fanout.filters import inline_tags, prop_values, tag_values

    assert inline_tags("a #one and #two/three\n```\n#not\n```\n`#code` x#no # heading #123") == ["one", "two/three"]
    assert tag_values(["#Project/Alpha", "work"]) == ["project/alpha", "project", "work"]
    assert prop_values({"Status": "Done", "n": 2, "ok": True, "tags": ["a", "b"], "nested": {"x": 1}}) == [
        "status", "status=done", "n", "n=2", "ok", "ok=true", "tags", "tags=a", "tags=b", "nested"]


# -- the pipeline ------------------------------------------------------------------------------------------


def _paths(out, qid: str) -> list[str]:
    return [r["path"] for r in out.results.to_pylist() if r["qid"] == qid]


def test_each_filter_kind_narrows_every_lane(searcher):
    from fanout.pipelines.search import SearchOptions

    rows = [{"id": "all", "query": "sync notes"},
            {"id": "folder", "query": "sync notes", "filter": {"folder": "Projects"}},
            {"id": "path", "query": "sync notes", "filter": json.dumps({"path": "Projects/Al"})},  # CSV-style
            {"id": "tag", "query": "sync notes", "filter": {"tag": "#project"}},  # parent of project/alpha
            {"id": "inline", "query": "sync notes", "filter": {"tag": "weekly"}},
            {"id": "prop", "query": "sync notes", "filter": {"property": "status=open"}},
            {"id": "anyprop", "query": "sync notes", "filter": {"property": "status"}},
            {"id": "ru", "query": "sync notes", "filter": {"lang": "ru"}},
            {"id": "alias", "query": "Wikilinks", "filter": {"folder": "Projects"}}]  # alias lane filtered too
    out = searcher.search(rows, SearchOptions(n=10))
    assert len(_paths(out, "all")) > 3
    assert set(_paths(out, "folder")) == {"Projects/Alpha.md", "Projects/Beta.md"}
    assert _paths(out, "path") == _paths(out, "tag") == _paths(out, "inline") == ["Projects/Alpha.md"]
    assert _paths(out, "prop") == ["Projects/Beta.md"]
    assert set(_paths(out, "anyprop")) == {"Projects/Alpha.md", "Projects/Beta.md"}
    assert _paths(out, "ru") and all(p.startswith(("Синхронизация/", "Рецепты/")) for p in _paths(out, "ru"))
    assert "Linking/Internal links.md" not in _paths(out, "alias")
    assert out.errors.num_rows == 0


def test_job_filter_and_row_filter_both_apply_and_a_bad_row_loses_nothing(searcher):
    from fanout.pipelines.search import SearchOptions

    rows = [{"id": "a", "query": "sync notes"},
            {"id": "b", "query": "sync notes", "filter": {"property": "status=done"}},
            {"id": "bad", "query": "sync notes", "filter": {"lang": "de"}},
            {"id": "bad2", "query": "sync notes", "filter": {"tag": ""}}]
    out = searcher.search(rows, SearchOptions(n=10, filter=(("folder", ("Projects",)),)))
    assert set(_paths(out, "a")) == {"Projects/Alpha.md", "Projects/Beta.md"}
    assert _paths(out, "b") == ["Projects/Alpha.md"]
    errs = {e["qid"]: e for e in out.errors.to_pylist()}
    assert errs["bad"]["field"] == "filter.lang"
    assert errs["bad"]["error"] == "row 3: `filter.lang` 'de': no note of that language; the index has ['en', 'ru']"
    assert errs["bad2"]["field"] == "filter.tag" and errs["bad2"]["error"].startswith("row 4: ")


def test_an_index_without_filter_columns_says_how_to_update_it(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.store.db import Collection

    vault = write_vault(tmp_path / "vault", {**NOTES, **EXTRA})
    index_vault(vault, tmp_path / "db", "t", fake_cfg, fake_runner)
    col = Collection(tmp_path / "db", "t", fake_cfg)  # as an index written before the columns existed
    col.table(col.chunks_name).drop_columns(["tags", "props"])
    m = col.read_manifest()
    del m["filter_columns"]
    m["tables"] = col.table_versions()
    col.write_manifest(m)
    s = Searcher(tmp_path / "db", "t", fake_cfg, fake_runner)
    out = s.search([{"id": "t", "query": "sync", "filter": {"tag": "work"}},
                    {"id": "f", "query": "sync", "filter": {"folder": "Projects"}}], SearchOptions())
    (err,) = out.errors.to_pylist()
    assert err["qid"] == "t" and err["field"] == "filter.tag"
    assert "was built before tag filters existed (no `tags` column); update it with `fanout index VAULT" in err["error"]
    assert set(_paths(out, "f")) == {"Projects/Alpha.md", "Projects/Beta.md"}  # folder needs no new column
    summary = index_vault(vault, tmp_path / "db", "t", fake_cfg, fake_runner)
    assert summary.rebuilt and summary.embedded_chunks == 0  # the columns came without re-embedding
    s.refresh()
    out = s.search([{"id": "t", "query": "sync", "filter": {"tag": "work"}}], SearchOptions())
    assert _paths(out, "t") == ["Projects/Alpha.md"]


# -- the faces: CLI query/search/vsearch/batch and the MCP tool --------------------------------------------


def test_cli_filter_flags_on_search_vsearch_query_and_batch(fdb, tmp_path, capsys):
    from fanout.cli.main import main

    base = ["--db", str(fdb), "-c", "t", "--config", "fake", "--no-server", "--files"]
    for cmd in ("search", "vsearch", "query"):
        assert main([cmd, "sync notes", "--tag", "work", *base]) == 0
        assert capsys.readouterr().out.split() == ["Projects/Alpha.md"]
    assert main(["search", "sync notes", "--folder", "Projects", "--property", "status=open", *base]) == 0
    assert capsys.readouterr().out.split() == ["Projects/Beta.md"]
    assert main(["search", "sync", "--property", "=x", *base]) == 2
    assert "`filter.property` '=x' is not `key=value`" in capsys.readouterr().err
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "query": "sync notes"}, {"id": "b", "query": "sync notes", "filter": {"tag": "weekly"}},
        {"id": "c", "query": "sync notes", "filter": {"folder": 5}}]) + "\n", encoding="utf-8")
    out = tmp_path / "a.parquet"
    code = main(["batch", str(q), "--out", str(out), "--db", str(fdb), "-c", "t", "--config", "fake",
                 "--runner", "inproc", "--folder", "Projects"])
    assert code == 3  # one error row
    rows = pq.read_table(out).to_pylist()
    got = {qid: sorted(r["path"] for r in rows if r["qid"] == qid and r["path"]) for qid in "abc"}
    assert got["a"] == ["Projects/Alpha.md", "Projects/Beta.md"] and got["b"] == ["Projects/Alpha.md"]
    (bad,) = [r for r in rows if r["qid"] == "c"]
    assert "row 3" in bad["error"] and "filter.folder" in bad["error"] + (bad.get("field") or "")


def test_mcp_search_tool_takes_a_filter(fdb, fake_cfg, fake_runner):
    from fanout.serve.mcp import FanoutTools, ToolArgError, tool_list

    tools = FanoutTools(fdb, "t", fake_cfg, fake_runner)
    schema = next(t for t in tool_list(tools) if t.name == "search").input_schema
    assert set(schema["properties"]["filter"]["properties"]) == {"folder", "path", "tag", "property", "lang"}
    res = tools.search({"query": "sync notes", "filter": {"tag": ["weekly", "nothing"], "lang": "en"}})
    assert [r["path"] for r in res["results"]] == ["Projects/Alpha.md"]
    with pytest.raises(ToolArgError, match="filter.property"):
        tools.search({"query": "sync notes", "filter": {"property": "status="}})


def test_the_warm_service_applies_a_request_filter(fdb, fake_cfg, fake_runner):
    """`fanout serve` answers through SearchService: the CLI's filter flags travel in the request."""
    from fanout.api.service import SearchService

    svc = SearchService(fdb, fake_cfg, fake_runner)
    req = {"mode": "search", "collections": ["t"], "query": "sync notes", "n": 10, "explain": True}
    resp = svc.run({**req, "filter": {"property": ["status=open"]}})
    assert [r["path"] for r in resp["results"]] == ["Projects/Beta.md"]
    assert resp["explain"]["filter"] == "property status=open"
    with pytest.raises(ValueError, match="unknown filter 'tags'"):
        svc.run({**req, "filter": {"tags": "x"}})
