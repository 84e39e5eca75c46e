"""The same batch in-process, on a local Ray and on a 2-node Ray cluster on this machine (loopback).

    .venv/bin/python bench/cluster_2node.py [--db .fanout/bench-db --collection bench-en] [-n 100]

Steps: (1) the batch in-process (`Runner`); (2) on a quiet private local Ray (`RayRunner`); (3) a head node
and a worker node are started with `ray start --block`, each with its own temp dir, ports and process session;
the worker advertises `{"models": 1}` and `runner.model_resource=models` puts the embedder actor there; the
batch runs once clean (timed), then once more while the embedder actor is killed mid-batch (Ray restarts it
and retries the calls it had in flight). Each output is compared with the in-process one as closely as llama.cpp
allows (see OVERLAP_SLACK: the noise floor is measured in the same run),
with no query lost and none duplicated. Both nodes are stopped (their sessions' processes, by pid) and their
temp dirs removed, also when something fails. Prints one timing table with the batch's stage timings.

Queries: the first N English queries of the Obsidian Help benchmark with the agent's fields (short_query,
rephrased_query, expected_answer), run with --no-expand --no-rerank, so the only model is the embedder.
Caches are off so every run embeds. On a 2-core box no speedup is expected: the point is placement,
identical output and fault tolerance; the table shows what the distribution costs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LANCEDB_LOG", "error")

import pyarrow as pa
import pyarrow.parquet as pq

from bench.loopback import LoopbackCluster
from fanout.config import Config, load_config
from fanout.exec.ray_runner import RayRunner
from fanout.exec.runner import Runner

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("bench.cluster_2node")


class CrashingRayRunner(RayRunner):
    """A RayRunner that kills the role's first actor while its calls are in flight, once.

    On the `at_call`-th map of `role` (0-based) every batch is submitted first, then after `delay_s` the actor
    is killed the way a crash would (`ray.kill(..., no_restart=False)`); Ray restarts it and retries the calls.
    A job runs as the in-process loop in the driver with the model calls on this runner's own actor pool (the
    pre-Ray-Data baseline, kept here only), so the kill hits a pool the runner holds.
    """

    run = Runner.run

    def __init__(self, cfg: Config, role: str = "embedder", at_call: int = 0, delay_s: float = 0.3):
        super().__init__(cfg)
        self.crash_role, self.at_call, self.delay_s = role, at_call, delay_s
        self.n_maps = 0
        self.killed: dict[str, Any] = {}

    def _submit(self, role: str, batches: list[pa.Table]) -> list[Any]:
        if role != self.crash_role or self.killed or self.n_maps != self.at_call:
            self.n_maps += role == self.crash_role
            return super()._submit(role, batches)
        self.n_maps += 1
        pid = self.actor_info(role)[0]["pid"]
        refs = super()._submit(role, batches)
        time.sleep(self.delay_s)
        self.kill_actor(role, 0)
        self.killed = {"pid": pid, "batches_in_flight": len(batches), "at": time.time()}
        return refs


# -- queries and comparison ------------------------------------------------------------------------------
def bench_queries(n: int, lang: str = "en") -> list[dict]:
    """The first `n` benchmark queries of `lang` with the agent's fields (so no expander is needed)."""
    from fanout.evaluation.bench_data import load_agent_fields, load_queries

    fields = load_agent_fields()
    rows = []
    for q in load_queries():
        if q["lang"] == lang:
            rows.append({"id": q["id"], "query": q["query"], **fields.get(q["id"], {})})
    return rows[:n]


# llama.cpp's vectors depend slightly on which texts share an embed call, and Ray Data groups a job's texts
# into calls differently from the in-process loop. Measured on the 100 benchmark queries, in-process alone
# with embedder.batch_size 40 vs 7: 26 of 1,000 result rows differ (near-ties swap ranks), 996 of the 1,000
# (query, page) pairs are in both top-10s. So each run is compared with in-process as the noise floor is:
# never a query lost, added or duplicated; then the share of (query, page) pairs kept must be within
# OVERLAP_SLACK of the floor measured in the same run (in-process with another embed batch size).
NOISE_BATCH = 7
OVERLAP_SLACK = 0.01


def overlap(expected: pa.Table, got: pa.Table) -> float:
    """Share of the expected (query, page) result pairs that are also in `got`."""
    a = set(zip(expected["qid"].to_pylist(), expected["path"].to_pylist()))
    b = set(zip(got["qid"].to_pylist(), got["path"].to_pylist()))
    return len(a & b) / max(1, len(a))


def compare(expected: pa.Table, got: pa.Table, floor: float | None = None) -> tuple[list[str], str]:
    """(problems, what differs): lost or extra queries and duplicates are problems; rows that differ are
    counted, and a problem only when fewer (query, page) pairs are kept than `floor` - OVERLAP_SLACK."""
    problems = []
    a, b = expected.to_pylist(), got.to_pylist()
    qa, qb = {r["qid"] for r in a}, {r["qid"] for r in b}
    if qa - qb:
        problems.append(f"queries lost: {sorted(qa - qb)[:5]} ({len(qa - qb)})")
    if qb - qa:
        problems.append(f"queries added: {sorted(qb - qa)[:5]} ({len(qb - qa)})")
    keys = [(r["qid"], r["rank"], r["path"]) for r in b]
    if len(set(keys)) != len(keys) or len({(r["qid"], r["rank"]) for r in b}) != len(b):
        problems.append(f"duplicate rows: {len(keys) - len(set(keys))}")
    if {r["qid"] for r in a if r["error"]} != {r["qid"] for r in b if r["error"]}:
        problems.append("other queries failed")
    cols = ("qid", "rank", "path", "title", "heading", "snippet", "error")
    changed = sum(1 for x, y in zip(a, b) if any(x[c] != y[c] for c in cols) or x["score"] != y["score"])
    kept = overlap(expected, got)
    if floor is not None and kept < floor - OVERLAP_SLACK:
        problems.append(f"only {kept:.3f} of the (query, page) pairs kept; llama.cpp's batch noise keeps {floor:.3f}")
    return problems, f"{changed} of {len(a)} rows differ, {kept:.3f} of (query, page) pairs kept"


# -- runs ------------------------------------------------------------------------------------------------
def run_one(name: str, runner: Runner, cfg: Config, db: str, collection: str, queries: Path, out: Path,
            slice_size: int, setup_s: float) -> dict:
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import Searcher, SearchOptions

    t = time.perf_counter()
    load0 = os.getloadavg()[0]
    searcher = Searcher(db, collection, cfg, runner)
    st = run_batch(queries, out, searcher, SearchOptions(expand=False, rerank=False), slice_size)
    row = {"mode": name, "setup_s": setup_s, "batch_s": st["seconds"], "wall_s": time.perf_counter() - t,
           "load": f"{load0:.1f}-{os.getloadavg()[0]:.1f}",
           "load_s": runner.seconds.get("load_embedder", 0.0), "embed_s": runner.seconds.get("embedder", 0.0),
           "embed_calls": runner.calls.get("embedder", 0), "queries": st["queries"], "errors": st["errors"]}
    row.update({f"t_{k}": v for k, v in st["timings"].items()})
    return row


def print_table(rows: list[dict]) -> None:
    head = ["mode", "setup", "model load", "embed", "batch", "q/s", "load avg", "stage seconds (summed over workers)"]
    lines = [head]
    for r in rows:
        stages = "; ".join(f"{k[2:]} {v:.1f}" for k, v in r.items() if k.startswith("t_"))
        lines.append([r["mode"], f"{r['setup_s']:.1f}", f"{r['load_s']:.1f}", f"{r['embed_s']:.1f}",
                      f"{r['batch_s']:.1f}", f"{r['queries'] / r['batch_s']:.1f}", r["load"], stages])
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]

    def fmt(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    print(fmt(lines[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for cells in lines[1:]:
        print(fmt(cells))
    print("seconds; setup = Ray start/attach (in-process: none), model load = embedder actor creation "
          "and embed = time in embedder calls, both as the driver sees them (0 for the Ray Data engine: its actors "
          "live in the pools); stage seconds = the batch's `timings` (each stage's seconds inside it, summed "
          "over its actors on Ray Data); batch = run_batch total; load avg = 1-min load average "
          f"before-after the batch on this {os.cpu_count()}-CPU machine.")


def index_ready(db: str, collection: str) -> bool:
    from fanout.store.db import Collection

    col = Collection(Path(db), collection)
    return col.exists() and "stats" in col.read_manifest()  # stats are written when an index run finished


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default=str(ROOT / ".fanout" / "bench-db"))
    ap.add_argument("--collection", default="bench-en")
    ap.add_argument("-n", type=int, default=100, help="queries (first N English benchmark queries)")
    ap.add_argument("--samples", action="store_true",
                    help="use samples/vault + samples/queries.jsonl (indexed into a temp db) instead")
    ap.add_argument("--slice", type=int, default=50, help="queries per batch part (the kill hits part 2)")
    ap.add_argument("--kill-delay", type=float, default=0.5, help="seconds after submission the actor dies")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for sig in (signal.SIGTERM, signal.SIGHUP):  # turn a kill into SystemExit so the finally blocks run
        signal.signal(sig, lambda s, f: sys.exit(128 + s))

    cfg = load_config("local").replace(cache={"enabled": False}, runner={"object_store_mb": 256})
    work = Path(tempfile.mkdtemp(prefix="fanout-bench-2node-", dir="/tmp"))
    cluster: LoopbackCluster | None = None
    try:
        db, collection = args.db, args.collection
        if args.samples or not index_ready(db, collection):
            if not args.samples:
                print(f"index {collection!r} in {db} is not ready: using the sample vault instead")
            from fanout.pipelines.index import index_vault

            db, collection = str(work / "db"), "samples"
            with Runner(cfg) as r:
                index_vault(ROOT / "samples" / "vault", db, collection, cfg, r)
            rows = [json.loads(x) for x in (ROOT / "samples" / "queries.jsonl").read_text().splitlines() if x]
        else:
            rows = bench_queries(args.n)
        qfile = work / "queries.jsonl"
        qfile.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"{len(rows)} queries, collection {collection!r} in {db}; expand/rerank off, caches off")

        table = []
        with Runner(cfg) as r:
            table.append(run_one("in-process", r, cfg, db, collection, qfile, work / "inproc.parquet",
                                 args.slice, 0.0))
        expected = pq.read_table(work / "inproc.parquet")
        ncfg = cfg.replace(embedder={"batch_size": NOISE_BATCH})
        with Runner(ncfg) as r:
            table.append(run_one(f"in-process, embed batch {NOISE_BATCH}", r, ncfg, db, collection, qfile,
                                 work / "noise.parquet", args.slice, 0.0))
        _, floor_text = compare(expected, pq.read_table(work / "noise.parquet"))
        floor = overlap(expected, pq.read_table(work / "noise.parquet"))
        seen = {"noise floor (in-process, other embed batch)": floor_text}

        t = time.perf_counter()
        with RayRunner(cfg) as r:
            setup = time.perf_counter() - t
            table.append(run_one("local Ray", r, cfg, db, collection, qfile, work / "ray.parquet",
                                 args.slice, setup))
        problems: dict[str, list[str]] = {}
        problems["local Ray"], seen["local Ray"] = compare(expected, pq.read_table(work / "ray.parquet"), floor)

        t = time.perf_counter()
        cluster = LoopbackCluster(head_cpus=1, worker_cpus=2).start()
        started = time.perf_counter() - t
        ccfg = cfg.replace(runner={"ray_address": cluster.address, "model_resource": "models",
                                   "placement_timeout_s": 120.0, "max_retries": 2})
        t = time.perf_counter()
        with RayRunner(ccfg) as r:
            setup = started + time.perf_counter() - t
            table.append(run_one("2-node cluster", r, ccfg, db, collection, qfile, work / "cluster.parquet",
                                 args.slice, setup))
            where = r.actor_info("embedder")
        problems["2-node cluster"], seen["2-node cluster"] = compare(expected, pq.read_table(work / "cluster.parquet"), floor)
        print(f"embedder actor on node {where[0]['node_id'][:12]}, assigned {where[0]['resources']} "
              f"(cluster started in {started:.1f}s at {cluster.address})")
        if "models" not in where[0]["resources"]:
            problems["2-node cluster"].append(f"embedder not placed on the models node: {where}")

        t = time.perf_counter()
        kcfg = ccfg  # the kill hits the slice loop's own actor pool (CrashingRayRunner runs the loop)
        with CrashingRayRunner(kcfg, at_call=1, delay_s=args.kill_delay) as r:
            setup = time.perf_counter() - t
            table.append(run_one("2-node + kill", r, kcfg, db, collection, qfile, work / "killed.parquet",
                                 args.slice, setup))
            after = r.actor_info("embedder")[0]["pid"]
            killed = r.killed
        problems["2-node + kill"], seen["2-node + kill"] = compare(expected, pq.read_table(work / "killed.parquet"), floor)
        if not killed or after == killed["pid"]:
            problems["2-node + kill"].append(f"the embedder actor was not restarted: {killed}, pid now {after}")
        else:
            print(f"killed embedder pid {killed['pid']} with {killed['batches_in_flight']} batches in flight; "
                  f"restarted as pid {after}")
    finally:
        if cluster:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print_table(table)
    print()
    ok = True
    for mode, text in seen.items():
        probs = problems.get(mode, [])
        print(f"{mode}: {text}; " + ("no query lost, added or duplicated" if not probs else f"PROBLEMS: {probs}"))
        ok &= not probs
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
