"""Served roles on Ray Data: light pools (remote.num_cpus, no GPU, no model resource) whose actors each hold an
HTTP client with at most remote.concurrency requests in flight; a batch job gives the in-process job's results.
The server is tests/support/served_server.py on 127.0.0.1 (no model)."""

from __future__ import annotations

import json

import pytest

from tests.support.served import served_cfg
from tests.support.served_server import FakeServer
from tests.support.vault import write_vault

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def srv():
    with FakeServer(delay_s=0.02) as s:
        yield s


def test_served_pools_are_light_and_the_ray_job_equals_in_process(tmp_path, srv):
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions, search_stages

    from fanout.exec.ray_data import map_opts
    from fanout.exec.ray_runner import RayRunner
    from fanout.exec.runner import Runner

    cfg = served_cfg(srv.url, concurrency=2, batch_size=4).replace(
        models={"cache_dir": str(tmp_path / "cache")}, cache={"enabled": False},
        runner={"object_store_mb": 128, "model_resource": "models"}, embedder={"query_batch_size": 1})
    db = tmp_path / "db"
    with Runner(cfg) as runner:
        index_vault(write_vault(tmp_path / "vault"), db, "t", cfg, runner)
        q = tmp_path / "q.jsonl"
        q.write_text("".join(json.dumps({"id": f"q{i}", "query": w}) + "\n" for i, w in enumerate(
            ["version history", "code blocks", "sync settings", "синхронизация заметок", "internal links"] * 4)))
        run_batch(q, tmp_path / "a.jsonl", Searcher(db, "t", cfg, runner), SearchOptions(n=3))
    with RayRunner(cfg) as rr:
        specs = search_stages(cfg, db, "t")
        emb = next(s for s in specs if s.role == "embedder")
        opts = map_opts(rr, emb)
        # no model in the pool: a tenth of a CPU, no GPU, and any node (not only those offering `models`)
        assert opts["num_cpus"] == 0.1 and "num_gpus" not in opts and "resources" not in opts
        srv.max_in_flight = 0
        st = run_batch(q, tmp_path / "b.jsonl", Searcher(db, "t", cfg, rr), SearchOptions(n=3))
    assert st["runner"] == "ray"
    assert 1 <= srv.max_in_flight <= 2 * cfg.embedder.count  # remote.concurrency per pool actor
    a, b = (tmp_path / "a.jsonl").read_text(), (tmp_path / "b.jsonl").read_text()
    assert a.count("\n") == 20 and [json.loads(x) for x in a.splitlines()] == [json.loads(x) for x in b.splitlines()]
