"""The batch on a real 2-node Ray cluster (head + model node on loopback), as bench/cluster_2node.py runs it.

One module-scoped cluster: a head with 1 CPU and a worker with 1 CPU and `{"models": 1}`, each started with
`ray start` in its own session and temp dir, stopped and removed at the end. Checked on it: model actors land
on the model node; an actor killed mid-batch is restarted and the output equals the in-process output with
nothing lost or duplicated; impossible placements fail fast with a message that says why. Plus: a local Ray
(no address) starts quietly in a private temp dir and leaves nothing behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

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
    spec = importlib.util.spec_from_file_location("cluster_2node", ROOT / "bench" / "cluster_2node.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def cluster(bench):
    with bench.LoopbackCluster(head_cpus=1, worker_cpus=1, object_store_mb=128) as c:
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
    from fanout.runner import Runner

    with Runner(small_cfg) as r:
        expected = _run(bench, r, small_cfg, tiny_db, queries, tmp_path / "inproc.parquet")
    assert set(expected["qid"].to_pylist()) == {q["id"] for q in QUERIES}

    # the slice engine: its model actors are the runner's own pool, which this test kills and Ray restarts
    ccfg = small_cfg.replace(runner={"ray_address": cluster.address, "model_resource": "models",
                                     "placement_timeout_s": 90.0, "max_retries": 2, "engine": "slices"})
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

    from fanout.ray_runner import RayRunner

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


def test_local_ray_is_quiet_private_and_cleaned_up(tmp_path):
    """No address: a local Ray in its own temp dir, nothing on stderr (even with lancedb loaded), nothing left."""
    code = """
import os, sys
from fanout.db import Collection
Collection(sys.argv[1], "x").table_names()  # lancedb loaded first, as in `fanout batch`
from fanout.config import load_config
from fanout.ray_runner import RayRunner
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
