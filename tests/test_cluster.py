"""The batch on a real 2-node Ray cluster (head + model node on loopback), as bench/cluster_2node.py runs it.

One module-scoped cluster: a head with 1 CPU and a worker with 1 CPU and `{"models": 1}`, each started with
`ray start` in its own session and temp dir, stopped and removed at the end. Checked on it: model actors land
on the model node; an actor killed mid-batch is restarted and the output equals the in-process output with
nothing lost or duplicated; impossible placements fail fast with a message that says why; an index in a
folder the worker node cannot see (its own mount namespace, a tmpfs over the folder) fails the Ray Data job at
start with the node and the path. Plus: a local Ray
(no address) starts quietly in a private temp dir and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.ray

QUERIES = [
    {"id": "c1", "query": "how do I keep notes in step across my devices", "short_query": "Sync",
     "rephrased_query": "synchronise a vault between phone and laptop",
     "expected_answer": "Open Settings > Sync, sign in and choose a remote vault."},
    {"id": "c2", "query": "colour the code in a fenced block", "rephrased_query": "syntax highlighting in code",
     "expected_answer": "Add the language name after the backticks."},
    {"id": "c3", "query": "link to a heading in another note", "short_query": "internal links heading",
     "expected_answer": "Add # and the heading after the note name."},
    {"id": "c4", "query": "restore an old version of a file", "rephrased_query": "sync version history"},
    {"id": "c5", "query": "как синхронизировать заметки", "rephrased_query": "настройка синхронизации"},
    {"id": "c6", "query": "pancake batter", "expected_answer": "Mix milk, eggs and flour, let the batter rest."},
]


def _bench():
    from bench import cluster_2node

    return cluster_2node


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def hidden(tmp_path_factory) -> Path:
    """A folder the head node (and this driver) sees and the worker node sees empty (the worker runs in its
    own mount namespace with a tmpfs over it): like a path on one machine's local disk."""
    return tmp_path_factory.mktemp("head-only")


@pytest.fixture(scope="module")
def cluster(bench, hidden):
    from bench import loopback

    why = loopback.can_hide()
    prefix = loopback.hidden_from_worker(hidden) if not why else None
    with bench.LoopbackCluster(head_cpus=1, worker_cpus=1, object_store_mb=128, worker_prefix=prefix) as c:
        c.cannot_hide = why  # the path-check test fails with this reason; the others need no hiding
        yield c
    assert not any(Path(d).exists() for d in c.dirs)


@pytest.fixture(scope="module")
def small_cfg(cfg):
    # small embedder batches so one map sends several calls (some are queued when the actor dies);
    # caches off so every run embeds and nothing is written into the shared tiny_db
    return cfg.replace(embedder={"batch_size": 4, "num_cpus": 0.5}, cache={"enabled": False})


@pytest.fixture(scope="module")
def queries(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("q") / "queries.jsonl"
    p.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in QUERIES), encoding="utf-8")
    return p


def _run(bench, runner, cfg, tiny_db, queries, out: Path):
    bench.run_one("t", runner, cfg, str(tiny_db), "t", queries, out, slice_size=3, setup_s=0.0)
    return pq.read_table(out)


def test_actor_killed_mid_batch_on_the_model_node_changes_nothing(bench, cluster, small_cfg, tiny_db, queries,
                                                                  tmp_path):
    from fanout.exec.runner import Runner

    with Runner(small_cfg) as r:
        expected = _run(bench, r, small_cfg, tiny_db, queries, tmp_path / "inproc.parquet")
    assert set(expected["qid"].to_pylist()) == {q["id"] for q in QUERIES}

    # the bench's slice loop (CrashingRayRunner): its model actors are the runner's own pool, which this test
    # kills and Ray restarts
    ccfg = small_cfg.replace(runner={"ray_address": cluster.address, "model_resource": "models",
                                     "placement_timeout_s": 90.0, "max_retries": 2})
    # two slices of 3 queries: the embedder actor dies 0.2 s into the second slice's calls
    with bench.CrashingRayRunner(ccfg, at_call=1, delay_s=0.2) as rr:
        got = _run(bench, rr, ccfg, tiny_db, queries, tmp_path / "cluster.parquet")
        info = rr.actor_info("embedder")
        assert rr.killed and rr.killed["batches_in_flight"] >= 2
        assert info[0]["pid"] != rr.killed["pid"]  # restarted, and its calls retried
    assert info[0]["resources"].get("models", 0) > 0  # placed on the model node (only the worker has it)
    problems, diff = bench.compare(expected, got, floor=1.0)
    assert problems == [] and diff.startswith("0 of ")  # identical (the same engine), nothing lost, no duplicates


def test_impossible_placement_fails_fast_and_says_why(cluster, small_cfg):
    import time

    from fanout.exec.ray_runner import RayRunner

    cases = [
        ({"embedder": {"num_cpus": 64}}, "no node has 64 CPUs"),
        ({"runner": {"model_resource": "gpu_nodes"}}, "no node offers resource 'gpu_nodes'"),
    ]
    for change, why in cases:
        runner = {"ray_address": cluster.address, "model_resource": "models", "placement_timeout_s": 2.0,
                  **change.get("runner", {})}
        bad = small_cfg.replace(runner=runner, **{k: v for k, v in change.items() if k != "runner"})
        t = time.perf_counter()
        with RayRunner(bad) as rr, pytest.raises(RuntimeError, match="embedder actors could not be placed") as e:
            rr.actor_handles("embedder")
        assert time.perf_counter() - t < 30
        assert why in str(e.value) and "models: 1" in str(e.value)  # the cluster's nodes are listed


def test_index_the_worker_cannot_read_fails_at_start_naming_node_and_path(cluster, hidden, tmp_path):
    """The index on the head's local disk only (the worker node sees an empty folder there): the Ray Data
    job fails before any actor starts, naming the worker node, the path, who needs it and the fix."""
    import time

    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.config import load_config
    from fanout.exec.node_paths import check_paths
    from fanout.exec.ray_runner import RayRunner
    from fanout.exec.runner import Runner
    from tests.support.vault import write_vault

    if cluster.cannot_hide:
        pytest.fail(f"this test hides a folder from the worker node with `unshare --mount` (root): {cluster.cannot_hide}")
    fake = load_config("fake")
    db = hidden / "db"  # what an operator gets who keeps --db on the head's local disk
    with Runner(fake) as r:
        index_vault(write_vault(tmp_path / "vault"), db, "t", fake, r)
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in QUERIES), encoding="utf-8")
    out = tmp_path / "out" / "answers.parquet"  # the parts folder: visible on both nodes (one machine's /tmp)
    out.parent.mkdir()
    cfg = fake.replace(runner={"ray_address": cluster.address, "mode": "ray",
                               "placement_timeout_s": 120.0})
    with RayRunner(cfg) as rr:
        searcher = Searcher(db, "t", cfg, rr)
        t = time.perf_counter()
        with pytest.raises(RuntimeError, match="the index .* must be readable on node ") as e:
            run_batch(q, out, searcher, SearchOptions(n=5))
        took = time.perf_counter() - t
        msg = str(e.value)
        worker = next(n for n in rr._ray.nodes() if n["Alive"] and n["Resources"].get("models"))
        node = f"on node {worker['NodeManagerAddress']} (id {worker['NodeID'][:8]})"  # the worker, not the head
        assert f"{str(db)!r} must be readable {node}, but there: no such folder" in msg
        assert f"{str(db)!r} must be readable and writable {node}, but there: no such folder" in msg
        assert msg.count(" on node ") == 2  # the head (and the driver) reach it: not named
        assert "the retriever pool (ProbeBM25, LookupExpansions, CleanFields, LookupVectors, Retrieve) open it" in msg
        # one retrieval actor (the fake profile's default) is the one cache writer (pipelines/write_caches.py)
        assert "the retriever pool (WriteCaches) write the caches into it" in msg
        assert "shared file system" in msg and "s3://" in msg
        assert took < 60  # fails at start, long before runner.placement_timeout_s (120 s)
        assert not list(out.parent.glob("answers.parquet.parts/results/*.parquet"))  # no part was written
        assert not out.exists()

        # the same check passes for an index both nodes see (the control: it is the folder, not the check)
        shared = tmp_path / "shared-db"
        shutil.copytree(db, shared)
        check_paths(rr, Searcher(shared, "t", cfg, rr).stages(SearchOptions(n=5)))

        # the output (and so the job's parts folder) on the head's disk only: the read/write tasks' need
        hidden_out = hidden / "answers.parquet"
        with pytest.raises(RuntimeError, match="the job's parts folder .* must be readable and writable on node"
                           ) as e:
            run_batch(q, hidden_out, Searcher(shared, "t", cfg, rr), SearchOptions(n=5))
        assert f"{node}, but there: no such folder" in str(e.value) and "--out s3://" in str(e.value)
        assert str(e.value).count(" on node ") == 1


def test_local_ray_is_quiet_private_and_cleaned_up(tmp_path):
    """No address: a local Ray in its own temp dir, nothing on stderr (even with lancedb loaded), nothing left."""
    code = """
import os, sys
from fanout.store.db import Collection
Collection(sys.argv[1], "x").table_names()  # lancedb loaded first, as in `fanout batch`
from fanout.config import load_config
from fanout.exec.ray_runner import RayRunner
r = RayRunner(load_config("local").replace(runner={"object_store_mb": 128}))
tmp = r._tmp
def cmdline(p):
    try:
        return open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        return ""
print(tmp, sum(tmp in cmdline(p) for p in os.listdir("/proc") if p.isdigit()))
r.close()
"""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=180, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    tmp, n_procs = res.stdout.split()
    assert tmp.startswith("/tmp/fanout-ray-") and int(n_procs) >= 2  # gcs + raylet live in the private dir
    assert not Path(tmp).exists()
    leftover = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, tmp)]
    assert leftover == []


def _cmdline_has(pid: str, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_ray_processor_on_two_nodes(cluster, tmp_path):
    """fanout.ray.search on the caller's session attached to the 2-node cluster: the model pool lands on the
    model node, the caller's columns come through, and the pages and ranks equal `kb.batch` in-process."""
    import ray

    import fanout
    import fanout.ray as fray
    from fanout.config import data_dir, load_config

    samples = data_dir("samples")
    cfg = load_config("fake").replace(embedder={"num_cpus": 0.25}, runner={"model_resource": "models"})
    rows = [json.loads(line) for line in (samples / "queries.jsonl").read_text().splitlines() if line.strip()]
    rows = [{"id": r["id"], "query": r["query"], "owner": f"u{i % 3}"} for i, r in enumerate(rows)]
    with fanout.open(tmp_path / "db", collection="samples", config=cfg) as kb:
        kb.index(samples / "vault")
        want = {}
        for r in kb.batch([{"id": r["id"], "query": r["query"]} for r in rows], runner="inproc"):
            if r["path"] is not None:
                want.setdefault(r["qid"], []).append((r["rank"], r["path"], r["score"]))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address=cluster.address, logging_level="ERROR", configure_logging=False)
    try:
        answered = fray.search(ray.data.from_items(rows), db=tmp_path / "db", collection="samples", config=cfg,
                               id_column="id").take_all()
    finally:
        ray.shutdown()
    assert {r["id"]: r["owner"] for r in answered} == {r["id"]: r["owner"] for r in rows}
    assert {r["id"]: [(h["rank"], h["path"], h["score"]) for h in r["hits"]] for r in answered if r["hits"]} == want
