"""fanout.ray.search: fanout's stages added to a caller's own Dataset, on the caller's Ray session.

Checked: a Dataset from `ray.data.from_items` with extra columns, a `.filter()` before and a
`.groupby(...).count()` after, gives the same pages and ranks as `fanout batch` on the same rows (fake models,
a local Ray the test starts as a user would); the caller's columns come through untouched, a bad row is that
row's error; no private Ray is started when one is running; bad arguments fail at once with a FanoutError.
(The 2-node loopback cluster run: tests/test_cluster.py::test_ray_processor_on_two_nodes.)
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

import fanout
from fanout.config import data_dir

pytestmark = pytest.mark.ray

SAMPLES = data_dir("samples")


@pytest.fixture(scope="module")
def user_ray():
    import os

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a user's plain local Ray, without the auth notice
    # 4 logical CPUs: the pools (1.25) and the caller's .filter() task (1) must fit, as on any real cluster
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", configure_logging=False,
             object_store_memory=256 * 2**20)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    db = tmp_path_factory.mktemp("rayapi") / "db"
    with fanout.open(db, collection="samples", config="fake") as kb:
        kb.index(SAMPLES / "vault")
    return db


def _rows() -> list[dict]:
    rows = [json.loads(line) for line in (SAMPLES / "queries.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for i, r in enumerate(rows):
        out.append({"id": r["id"], "query": r["query"], "team": "ops" if i % 2 else "docs", "weight": i,
                    "short_query": r.get("short_query"), "rephrased_query": r.get("rephrased_query")})
    out.append({"id": "bad", "query": "", "team": "ops", "weight": -1, "short_query": None,
                "rephrased_query": None})
    return out


def test_same_pages_as_fanout_batch_with_filter_before_and_groupby_after(user_ray, db, tmp_path):
    import fanout.ray as fray
    from fanout.cli.main import main

    rows = _rows()
    kept = [r for r in rows if r["weight"] != 3]  # what the caller's .filter() keeps
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(json.dumps({k: v for k, v in r.items() if v is not None}) for r in kept) + "\n")
    out = tmp_path / "out.parquet"
    assert main(["batch", str(inp), "--db", str(db), "-c", "samples", "--config", "fake", "--out", str(out),
                 "--runner", "inproc"]) == 3  # the bad row
    want = {}
    for r in pq.read_table(out).to_pylist():
        if r["path"] is not None:
            want.setdefault(r["qid"], []).append((r["rank"], r["path"], r["score"]))

    before = [n["NodeID"] for n in user_ray.nodes()]
    ds = user_ray.data.from_items(rows).filter(lambda r: r["weight"] != 3)
    answered = fray.search(ds, db=db, collection="samples", config="fake", id_column="id")
    got_rows = answered.take_all()
    assert len(got_rows) == len(kept)
    got = {r["id"]: [(h["rank"], h["path"], h["score"]) for h in r["hits"]] for r in got_rows if r["hits"]}
    assert got == want
    by_id = {r["id"]: r for r in got_rows}
    assert by_id["bad"]["error"] and by_id["bad"]["error_field"] == "query" and not by_id["bad"]["hits"]
    assert by_id["bad"]["error"].startswith("id 'bad': ") and "row " not in by_id["bad"]["error"]
    assert "_stage_stats" not in got_rows[0]  # fanout's own counters stay inside
    assert all(by_id[r["id"]]["team"] == r["team"] and by_id[r["id"]]["weight"] == r["weight"] for r in kept)
    counts = {r["team"]: r["count()"] for r in answered.groupby("team").count().take_all()}
    assert counts == {t: sum(1 for r in kept if r["team"] == t) for t in ("ops", "docs")}
    # the caller's session was used: the same single node, still running
    assert user_ray.is_initialized() and [n["NodeID"] for n in user_ray.nodes()] == before


def test_bad_arguments_fail_at_once(user_ray, db, tmp_path):
    import fanout.ray as fray

    ds = user_ray.data.from_items([{"q": "x"}])
    with pytest.raises(fanout.UserError, match="`query_column` 'query' is not a column"):
        fray.search(ds, db=db, collection="samples", config="fake")
    with pytest.raises(fanout.IndexStateError, match="fanout index"):
        fray.search(ds, db=tmp_path / "none", collection="samples", config="fake", query_column="q")
    with pytest.raises(fanout.UserError, match="must be a ray.data.Dataset"):
        fray.search([{"query": "x"}], db=db)
    with pytest.raises(fanout.UserError, match="already has column"):
        fray.search(user_ray.data.from_items([{"query": "x", "hits": 1}]), db=db, collection="samples",
                    config="fake")
    with pytest.raises(fanout.ConfigError, match="not found"):
        fray.search(ds, db=db, config="nope", query_column="q")
    # pools that leave no CPU for the caller's own tasks would wait forever: said at once, with the fix
    from fanout.config import load_config

    big = load_config("fake").replace(embedder={"num_cpus": 3.0}, runner={"fit_pools": False})
    with pytest.raises(fanout.PlacementError, match=r"your Dataset's own tasks.*ray.init\(num_cpus"):
        fray.search(ds, db=db, collection="samples", config=big, query_column="q")
    # unless the config pins the pools, they are scaled to fit (logged): the same config then runs
    fitted = fray.search(ds, db=db, collection="samples", config=big.replace(runner={"fit_pools": True}),
                         query_column="q")
    assert fitted.take_all()[0]["hits"]
