"""A search request is parsed once into a frozen SearchRequest (fanout/api/requests.py); the service, the server
and the API read its typed fields. The error messages themselves are checked in tests/test_serve_input.py."""

from __future__ import annotations

import dataclasses

import pytest

from fanout.api.requests import SearchRequest, parse_search_request
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
