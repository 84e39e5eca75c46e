"""The Python API's input handling (issue 52, round 5, items 5-7): every bad argument is a `FanoutError` naming
the field, and one bad row never loses a batch's other results.

Hostile input built here: repeated and too many collection names, lone surrogates in `query` and `id`, filter
dicts with keys that are not text, `min_score` of NaN/inf/5/"abc"/None, a DataFrame query column of mixed types,
a db path holding NUL, and strings where booleans belong ("no" is truthy). Fake profile, no models, no Ray.
"""

from __future__ import annotations

import math

import pytest

import fanout
from fanout.errors import FanoutError


@pytest.fixture(scope="module")
def kb(tmp_path_factory, fake_cfg):
    root = tmp_path_factory.mktemp("api-input")
    vault = root / "v"
    vault.mkdir()
    (vault / "a.md").write_text("# Sync\nsync your devices\n", encoding="utf-8")
    (vault / "b.md").write_text("# Themes\nthemes and colours\n", encoding="utf-8")
    with fanout.open(root / "db", "t", fake_cfg) as k:
        k.index(vault)
        k.vault = vault
        yield k


# -- item 5: repeated collection names, and a cap on the list -------------------------------------------------
def test_repeated_or_too_many_collections_are_refused(kb):
    with pytest.raises(FanoutError, match="`collections` names 't' more than once"):
        kb.search("sync", collections=["t", "t"])
    with pytest.raises(FanoutError, match=r"names 5000 collections; at most 16 \(serve.max_collections\)"):
        kb.search("sync", collections=["t"] * 5000)
    for req in ({"query": "sync", "collections": ["t", "t"]}, {"query": "sync", "collections": ["t"] * 17}):
        with pytest.raises(FanoutError) as e:
            kb.answer(req)  # what `fanout serve` runs (a 400 there)
        assert e.value.field == "collections"
    assert [h.path for h in kb.search("sync devices", collections=["t"])][:1] == ["a.md"]


# -- item 6: a lone surrogate is one error row --------------------------------------------------------------
ROWS = [{"id": "a", "query": "sync devices"}, {"id": "b", "query": "lone \ud800 surrogate"},
        {"id": "\udfff", "query": "a lone surrogate in the id"}, {"id": "c", "query": "themes"}]


def test_a_lone_surrogate_in_query_or_id_is_one_error_row(kb):
    got = kb.batch(ROWS)
    assert got.queries == 4 and got.errors == 2
    rows = got.to_arrow().to_pylist()
    answered = {r["qid"] for r in rows if not r["error"]}
    assert answered == {"a", "c"}
    errors = [r for r in rows if r["error"]]
    assert all("lone surrogate" in r["error"] for r in errors), errors
    st = kb.expand(ROWS)
    assert st["queries"] == 4 and st["errors"] == 2


def test_a_dataframe_with_a_surrogate_or_mixed_types_keeps_its_good_rows(kb):
    pd = pytest.importorskip("pandas")
    got = kb.batch(pd.DataFrame(ROWS, dtype=object))  # (pandas' own string dtype refuses a surrogate itself)
    assert got.queries == 4 and got.errors == 2
    assert {r["qid"] for r in got.to_arrow().to_pylist() if not r["error"]} == {"a", "c"}
    got = kb.batch(pd.DataFrame({"id": ["1", "2", "3"], "query": ["sync devices", 2024, "themes"]}))  # ArrowTypeError
    rows = got.to_arrow().to_pylist()
    assert got.queries == 3 and got.errors == 1
    assert {r["qid"] for r in rows if not r["error"]} == {"1", "3"}
    err = next(r for r in rows if r["error"])
    assert err["qid"] == "2" and err["field"] == "query" and "must be a string" in err["error"]


# -- item 7: raw or silent input handling -------------------------------------------------------------------
@pytest.mark.parametrize("bad", [{1: "x"}, {None: "x"}, {("folder",): "x"}, {"folder": "a", 2: "b"}])
def test_filter_keys_that_are_not_text_are_a_filter_error(kb, bad):
    with pytest.raises(FanoutError, match="`filter` keys must be text"):
        kb.search("sync", filter=bad)
    with pytest.raises(FanoutError, match="`filter` keys must be text"):
        kb.batch([{"query": "sync"}], filter=bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, 5, -0.5, "abc", None, True])
def test_min_score_is_checked_in_batch_and_ray_search(kb, bad):
    import fanout.ray

    class Dataset:  # enough of a ray.data.Dataset for the checks made before Ray is used
        def map_batches(self, *a, **k):
            raise AssertionError("not reached")

        def schema(self, fetch_if_missing=False):
            return None

    with pytest.raises(FanoutError, match=r"`min_score` must be a number from 0 to 1"):
        kb.batch([{"query": "sync"}], min_score=bad)
    with pytest.raises(FanoutError, match=r"`min_score` must be a number from 0 to 1"):
        fanout.ray.search(Dataset(), db=kb.db, collection="t", config=kb.cfg, min_score=bad)
    assert kb.batch([{"query": "sync devices"}], min_score=0.0).queries == 1


def test_a_nul_in_a_path_is_named(tmp_path, fake_cfg):
    with pytest.raises(FanoutError, match=r"`db` holds a NUL character"):
        fanout.open(str(tmp_path / "d\x00b"), "t", fake_cfg)
    with fanout.open(tmp_path / "db", "t", fake_cfg) as k, \
            pytest.raises(FanoutError, match=r"`vault` holds a NUL character"):
        k.index(str(tmp_path) + "/v\x00")


@pytest.mark.parametrize("bad", ["no", "false", 0, 1, "yes"])
def test_strings_and_numbers_are_not_taken_as_booleans(kb, bad):
    with pytest.raises(FanoutError, match="`rebuild` must be True or False"):
        kb.index(kb.vault, rebuild=bad)
    with pytest.raises(FanoutError, match=r"`expand` must be True, False or None"):
        kb.batch([{"query": "sync"}], expand=bad)
    with pytest.raises(FanoutError, match=r"`explain` must be True or False"):
        kb.batch([{"query": "sync"}], explain=bad)
    with pytest.raises(FanoutError, match=r"`detail` must be True or False"):
        kb.status(detail=bad)
    with pytest.raises(FanoutError, match=r"`rerank` must be true, false or null"):
        kb.search("sync", rerank=bad)


def test_a_row_that_is_not_an_object_is_one_error_row_naming_the_row_and_the_fix(kb):
    """Batch rows are parsed at the edge (fanout/api/batch_rows.py BatchRow): a row that is no object, or holds
    a value JSON cannot, is its own error row; the batch's other rows still answer."""
    loop: list = []
    loop.append(loop)  # a value JSON cannot hold
    got = kb.batch([{"id": "a", "query": "sync devices"}, 5, {"id": "c", "query": "themes", "searches": loop}])
    rows = got.to_arrow().to_pylist()
    assert got.queries == 3 and got.errors == 2
    assert {r["qid"] for r in rows if not r["error"]} == {"a"}
    errors = {r["qid"]: r["error"] for r in rows if r["error"]}
    assert errors["row-2"].startswith("row 2 is not an object: 5; give each row as an object with a 'query'")
    assert errors["row-3"].startswith("row 3 cannot be read (ValueError: Circular reference detected); give its")
