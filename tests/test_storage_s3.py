"""A collection on a real S3-compatible server on loopback (moto's ThreadedMotoServer, started here).

Round trip: index a vault into s3://bucket/db, search, run a batch whose input AND output are s3:// objects
(its resumable parts folder lives next to the output, in the bucket), hit the caches on a repeat, optimize
(vector index folded in), re-index incrementally; the manifest lives in the bucket. Credentials and endpoint
come once from the config's `storage:` section (fake embedder, fast; the AWS_* variables are cleared, so
nothing but the config can reach the server) and once from the usual AWS_* environment variables (real
embedder, through the CLI).
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from fanout.store import storage
from fanout.store.db import Collection
from fanout.store.vectors import index_columns
from tests.support import s3 as _s3
from tests.support.vault import NOTES, write_vault

s3 = _s3.s3  # a fixture (tests/support/s3.py)


@pytest.mark.model
def test_s3_round_trip_index_search_caches_optimize_reindex(tmp_path, monkeypatch, cfg, s3):
    import fanout.pipelines.index as pi
    import fanout.pipelines.search as ps
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.optimize_tables import optimize_tables
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.io.batch_output import check_out
    from tests.support.storage import FakeRunner, many_notes

    def ident(c, r, provision=True):  # the manifest's embedder identity, as a stand-in file would give
        return "fake.gguf", "fake-sha"

    monkeypatch.setattr(pi, "model_identity", ident)
    monkeypatch.setattr(ps, "model_identity", ident)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    scfg = cfg.replace(storage={"endpoint": s3, "region": "us-east-1", "access_key_id": "testing",
                                "secret_access_key": "testing"},
                       index={"vector_index_min_rows": 200, "vector_index_type": "IVF_HNSW_SQ",
                              "vector_partitions": 2})
    db = "s3://fanout-test/kb/db"
    vault = write_vault(tmp_path / "v", {**many_notes(200), **NOTES})
    with FakeRunner(scfg) as r:
        s = index_vault(vault, db, "t", scfg, r)
        assert s.rebuilt and s.chunks > 200 and s.vector_index == "built IVF_HNSW_SQ"
        names = storage.list_dir(db, scfg.storage)
        assert {"t.manifest.json", "t_chunks.lance", "t_documents.lance"} <= set(names)
        manifest = json.loads(storage.read_text(f"{db}/t.manifest.json", scfg.storage))
        assert manifest["vector_index"]["index_type"] == "IVF_HNSW_SQ" and manifest["stats"]["chunks"] == s.chunks
        col = Collection(db, "t", scfg)
        assert {"chunk_id", "path", "vector", "body_en"} <= set(index_columns(col.table("t_chunks")))

        searcher = Searcher(db, "t", scfg, r)
        rows = [{"id": "a", "query": "Pancakes"}, {"id": "b", "query": "Obsidian Sync"}]
        first = searcher.search(rows)
        assert first.errors.num_rows == 0
        top = {q: p for q, p, k in zip(first.results["qid"].to_pylist(), first.results["path"].to_pylist(),
                                       first.results["rank"].to_pylist()) if k == 1}
        assert top == {"a": "Рецепты/Блины.md", "b": "Sync/Sync your notes.md"}
        again = Searcher(db, "t", scfg, r).search(rows)  # a new process would see the cached query vectors
        assert again.stats["cache"]["hits"].get("qvec", 0) == 2
        assert again.results["path"].to_pylist() == first.results["path"].to_pylist()

        # batch: input and output are objects in the bucket; a row without a query is an error row
        qfile = "s3://fanout-test/jobs/q.jsonl"
        storage.write_text(qfile, "".join(json.dumps(x) + "\n" for x in [*rows, {"id": "bad"}]), scfg.storage)
        out = "s3://fanout-test/jobs/out/r.parquet"
        bs = run_batch(qfile, out, Searcher(db, "t", scfg, r), SearchOptions(n=3))
        assert (bs["queries"], bs["errors"], bs["resumed"]) == (3, 1, 0)
        assert storage.list_dir("s3://fanout-test/jobs/out", scfg.storage) == ["r.parquet"]  # parts removed
        with storage.open_input(out, scfg.storage) as f:
            flat = pq.read_table(f).to_pylist()
        assert {x["qid"]: x["path"] for x in flat if x["rank"] == 1} == top
        assert [x["qid"] for x in flat if x["error"]] == ["bad"]
        # the same batch again, into JSONL: every query vector comes from the cache (in the bucket)
        repeat = Searcher(db, "t", scfg, r)
        out2 = "s3://fanout-test/jobs/out/r.jsonl"
        run_batch(qfile, out2, repeat, SearchOptions(n=3))
        assert repeat.cache_stats()["hits"].get("qvec", 0) == 2
        assert repeat.cache_stats()["misses"].get("qvec", 0) == 0
        lines = [json.loads(x) for x in storage.read_text(out2, scfg.storage).splitlines()]
        assert [x["id"] for x in lines] == ["a", "b", "bad"]
        assert {x["id"]: x["results"][0]["path"] for x in lines if x["results"]} == top
        with pytest.raises(ValueError, match="bucket 'no-such-bucket' does not exist"):
            check_out("s3://no-such-bucket/r.parquet", qfile, scfg.storage)
        with pytest.raises(ValueError, match="is the input file"):
            check_out(qfile, qfile, scfg.storage)

        (vault / "Sync/Sync your notes.md").write_text("---\naliases: [Obsidian Sync]\n---\nSync now also covers "
                                                       "plugins.\n", encoding="utf-8")
        upd = index_vault(vault, db, "t", scfg, r)
        assert upd.embedded_notes == 1 and not upd.rebuilt and upd.vector_index == "kept IVF_HNSW_SQ"
        stats = Collection(db, "t", scfg).table("t_chunks").index_stats("vector_idx")
        assert stats.num_unindexed_rows == 1
    out = optimize_tables(db, "t", keep_days=7, cfg=scfg)
    names = [o["table"] for o in out]
    assert names[:2] == ["t_chunks", "t_documents"] and "t_cache_qvec" in names
    assert Collection(db, "t", scfg).table("t_chunks").index_stats("vector_idx").num_unindexed_rows == 0
    assert "key" in index_columns(Collection(db, "t", scfg).table("t_cache_qvec"))
    with FakeRunner(scfg) as r:
        res = Searcher(db, "t", scfg, r).search([{"id": "c", "query": "Obsidian Sync"}])
    assert res.results["path"].to_pylist()[0] == "Sync/Sync your notes.md"
    assert res.results["snippet"].to_pylist()[0] == "Sync now also covers plugins."  # the re-indexed text


@pytest.mark.model
def test_cli_index_query_with_env_credentials(tmp_path, monkeypatch, s3, capsys):
    from fanout.cli.main import main

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    vault = write_vault(tmp_path / "v", {k: NOTES[k] for k in ("Sync/Sync your notes.md", "Рецепты/Блины.md")})
    db = "s3://fanout-test/cli-db"
    assert main(["index", str(vault), "--db", db, "--collection", "c"]) == 0
    assert main(["query", "pancakes with milk", "--db", db, "--collection", "c", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("["):])[0]["path"] == "Рецепты/Блины.md"
    qfile, out = "s3://fanout-test/cli-jobs/q.jsonl", "s3://fanout-test/cli-jobs/out/r.csv"
    storage.write_text(qfile, json.dumps({"id": "p", "query": "pancakes with milk"}) + "\n")  # AWS_* from env
    assert main(["batch", qfile, "--out", out, "--db", db, "--collection", "c", "-n", "1"]) == 0
    assert "1 queries (0 resumed), 0 errors" in capsys.readouterr().out
    lines = storage.read_text(out).splitlines()
    assert lines[0].startswith('"qid","rank","path"') and '"p",1,"Рецепты/Блины.md"' in lines[1], lines
    assert storage.list_dir("s3://fanout-test/cli-jobs/out") == ["r.csv"]
    assert main(["index", str(vault), "--db", db, "--collection", "c"]) == 0
    assert "embedded 0 notes" in capsys.readouterr().out
    assert main(["optimize", "--db", db, "--collection", "c"]) == 0


def test_s3_expand_job_then_batch_uses_the_bucket_cache(tmp_path, monkeypatch, s3):
    """`fanout expand` stages its job under the db's `.jobs/` in the bucket and fills the expansion cache
    there; a batch in and out of the bucket then reads every expansion from that cache (fake profile)."""
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.precompute import run_expand
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.config import load_config
    from fanout.exec.runner import Runner
    from fanout.store.caches import Caches

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    cfg = load_config("fake").replace(storage={"endpoint": s3, "region": "us-east-1", "access_key_id": "testing",
                                               "secret_access_key": "testing"})
    db = "s3://fanout-test/fake/db"
    qfile = "s3://fanout-test/fake/log.jsonl"
    rows = [{"id": f"q{i}", "query": f"question {i % 7} about sync"} for i in range(20)]
    storage.write_text(qfile, "".join(json.dumps(x) + "\n" for x in rows), cfg.storage)
    with Runner(cfg) as r:
        index_vault(write_vault(tmp_path / "v", NOTES), db, "t", cfg, r)
        first = run_expand(qfile, db, "t", cfg, r, progress=False)
        again = run_expand(qfile, db, "t", cfg, r, progress=False)
        st = run_batch(qfile, "s3://fanout-test/fake/out/r.jsonl", Searcher(db, "t", cfg, r),
                       SearchOptions(n=2, expand=True))
    assert first["queries"] == first["expanded"] + first["cached"] == 20 and first["errors"] == 0
    keys = Caches(Collection(db, "t", cfg), "", "x").table("expansions")["key"].to_pylist()
    assert len(keys) == len(set(keys)) == 7  # one row per distinct question, in the bucket
    assert again["expanded"] == 0 and again["cached"] == 20
    assert storage.list_dir(f"{db}/.jobs", cfg.storage) == []  # the job's staging folder is gone
    assert st["queries"] == 20 and st["errors"] == 0 and st["cached_expansions"] == 20
    out = [json.loads(x) for x in storage.read_text("s3://fanout-test/fake/out/r.jsonl", cfg.storage).splitlines()]
    assert [x["id"] for x in out] == [x["id"] for x in rows] and all(x["results"] for x in out)
