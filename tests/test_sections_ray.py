"""fanout.ray.search with `sections=N`: each hit of a row gains its `sections` list (one row per input row still),
the same sections as `KnowledgeBase.search` gives; a bad N fails at once. One small case on a local Ray."""

from __future__ import annotations

import pytest

import fanout
from fanout.errors import FanoutError
from tests.support.vault import write_vault

pytestmark = pytest.mark.ray


def test_ray_search_with_sections_equals_the_api(tmp_path):
    import os

    import ray

    import fanout.ray as fray

    db = tmp_path / "db"
    with fanout.open(db, "t", "fake") as kb:
        kb.index(write_vault(tmp_path / "vault"))
        want = {q: [(h.path, h.sections) for h in kb.search(q, n=3, sections=2, expand=False, rerank=False)]
                for q in ("wikilinks", "code blocks syntax")}
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", configure_logging=False,
             object_store_memory=256 * 2**20)
    try:
        ds = ray.data.from_items([{"query": q} for q in want])
        with pytest.raises(FanoutError, match="`sections` must be a whole number from 1 to 20"):
            fray.search(ds, db=db, collection="t", config="fake", sections=0)
        rows = fray.search(ds, db=db, collection="t", config="fake", n=3, sections=2, expand=False,
                           rerank=False).take_all()
    finally:
        ray.shutdown()
    assert len(rows) == 2
    for r in rows:
        assert [(h["path"], h["sections"]) for h in r["hits"]] == want[r["query"]]
