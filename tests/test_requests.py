"""A search request is parsed once into a frozen SearchRequest (fanout/api/requests.py); the service, the server
and the API read its typed fields. The error messages themselves are checked in tests/test_serve_input.py."""

from __future__ import annotations

import dataclasses

import pytest

from fanout.api.requests import SearchRequest, SubQuery, parse_search_request, parse_tool_search
from fanout.errors import RequestError


def test_parse_gives_typed_fields_and_defaults():
    req = parse_search_request({"query": "sync", "n": 3.0, "collections": ["a", "b"], "min_score": 0,
                                "sections": 2.0, "rerank": None, "explain": True}, 10)
    assert req == SearchRequest(query="sync", n=3, collections=("a", "b"), min_score=0.0, sections=2,
                                explain=True)
    assert type(req.n) is int and type(req.min_score) is float and type(req.sections) is int
    assert (req.mode, req.expand, req.rerank, req.full, req.line_numbers) == ("query", None, None, False, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.n = 5  # type: ignore[misc]


def test_the_row_holds_the_text_fields_given_even_bad_ones():
    """The row's fields are the pipeline parser's to check: a bad value reaches it (an error row, as in a batch)."""
    req = parse_search_request({"query": 2024, "intent": "x", "short_query": None}, 10)
    assert req.row() == {"id": "q", "query": 2024, "intent": "x"}


def test_to_json_parses_back_to_the_same_request():
    req = parse_search_request({"mode": "search", "query": "q", "collections": ["t"], "n": 4,
                                "filter": {"tag": "x"}, "full": True}, 10)
    assert parse_search_request(req.to_json(), 10) == req


@pytest.mark.parametrize("bad, field", [({"n": 0}, "n"), ({"mode": "x"}, "mode"), ({"sections": 99}, "sections"),
                                        ({"collections": ["a", "a"]}, "collections"), ({"rerank": 1}, "rerank")])
def test_a_bad_field_is_named(bad, field):
    with pytest.raises(RequestError) as e:
        parse_search_request({"query": "q", **bad}, 10)
    assert e.value.field == field


def test_mcp_arguments_parse_into_the_same_request():
    """The MCP tool `search`: `limit` is `n`, qmd's `searches` become typed SubQuerys (a JSON string of them too),
    and the row carries them to the batch row parser as {type, query} objects."""
    subs = [{"type": "lex", "query": "wikilinks"}, {"type": "hyde", "query": "Link notes."}]
    req = parse_tool_search({"query": "old links", "limit": 3.0, "rerank": False, "sections": 2,
                             "searches": subs}, 50, 20)
    assert req == SearchRequest(query="old links", n=3, rerank=False, sections=2,
                                searches=(SubQuery("lex", "wikilinks"), SubQuery("hyde", "Link notes.")))
    assert req.row() == {"id": "q", "query": "old links", "searches": subs}
    assert parse_tool_search({"query": "x", "searches": '[{"type": "vec", "query": "y"}]'}, 50, 20).searches == (
        SubQuery("vec", "y"),)
    assert "searches" not in parse_search_request({"query": "x"}, 10).to_json()  # serve's wire format as it was


@pytest.mark.parametrize(("args", "field", "match"), [
    ({"query": "x", "limit": 51}, "limit", r"`limit` must be an integer from 1 to 50, got 51; ask for fewer"),
    ({"query": "x", "rerank": "yes"}, "rerank", r'`rerank` must be true or false, got "yes"'),
    ({"query": "x", "sections": 21}, "sections", r"`sections` must be a whole number from 1 to 20"),
    ({"query": "x", "short": 1}, "short", r"unknown argument `short` for search; allowed: \['query'"),
    ({"query": "x", "searches": {"type": "lex"}}, "searches", r"`searches` must be a list of \{type, query\}"),
    ({"query": "x", "searches": "[oops"}, "searches", r"`searches` is not valid JSON"),
    ({"query": "x", "searches": [{"type": "lex", "query": "y"}] * 11}, "searches", r"11 entries, at most 10"),
    ({"query": "x", "searches": ["lex"]}, "searches[0]", r"`searches\[0\]`: each search must be an object"),
    ({"query": "x", "searches": [{"type": "sql", "query": "y"}]}, "searches[0].type",
     r"`searches\[0\]\.type`: unknown variant type \"sql\"; use one of \['lex', 'vec', 'hyde'\]"),
    ({"query": "x", "searches": [{"type": "vec", "query": " "}]}, "searches[0].query",
     r"`searches\[0\]\.query`: search query must be a non-empty string"),
])
def test_mcp_argument_errors_name_the_field_the_value_and_the_fix(args, field, match):
    with pytest.raises(RequestError, match=match) as e:
        parse_tool_search(args, 50, 20)
    assert e.value.field == field
