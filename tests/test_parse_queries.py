from fanout.pipelines.parse_queries import parse_queries


def test_agent_fields_searches_and_ohs_queries_map_to_kinds():
    q, e = parse_queries([
        {"id": 1, "query": "how to sync", "short_query": "Sync", "rephrased_query": "keep notes in step",
         "expected_answer": "Sync keeps your vault the same.", "intent": "setup"},
        {"id": "b", "query": "x y", "searches": [{"type": "lex", "query": "x"}, {"type": "hyde", "query": "y z"}]},
        {"id": "c", "query": "p q", "queries": ["r s"]},
    ])
    assert e.num_rows == 0
    rows = {r["qid"]: r for r in q.to_pylist()}
    assert [v["kind"] for v in rows["1"]["variants"]] == ["lex", "vec", "hyde"] and rows["1"]["intent"] == "setup"
    assert [v["kind"] for v in rows["b"]["variants"]] == ["lex", "hyde"]
    assert rows["c"]["variants"] == [{"kind": "lex", "text": "r s"}, {"kind": "vec", "text": "r s"}]


def test_bad_rows_get_errors_naming_row_field_and_fix_and_the_rest_survives():
    q, e = parse_queries([
        {"id": "ok", "query": "fine"},
        {"id": "empty", "query": "   "},
        {"id": "type", "query": 42},
        {"id": "kind", "query": "a", "searches": [{"type": "sparse", "query": "a"}]},
        {"id": "long", "query": "x" * 3000},
        {"id": "ok", "query": "duplicate"},
        {"id": "bad-json", "_error": "line 7 is not valid JSON", "_field": ""},
        "not an object",
    ])
    assert q["qid"].to_pylist() == ["ok"]
    err = {r["qid"]: r for r in e.to_pylist()}
    assert "empty" in err["empty"]["error"] and err["empty"]["field"] == "query"
    assert "must be a string" in err["type"]["error"]
    assert err["kind"]["field"] == "searches[0].type" and "lex" in err["kind"]["error"]
    assert "shorten" in err["long"]["error"]
    assert "duplicate" in err["ok"]["error"]
    assert "line 7" in err["bad-json"]["error"]
    assert err["row-8"]["error"].startswith("row 8")


def test_missing_id_gets_row_number_and_variant_equal_to_query_is_dropped():
    q, _ = parse_queries([{"query": "Sync", "short_query": "sync"}])
    r = q.to_pylist()[0]
    assert r["qid"] == "row-1" and r["variants"] == []
