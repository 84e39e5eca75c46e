"""Scaling of the batch job with the number of model actors, on a 2-node Ray cluster on loopback.

    PYTHONPATH=. .venv/bin/python bench/scale_curve.py [--actors 1,2,4,8,16] [--per-actor 60] [--sleep 0.05]

Fake models (configs/fake.yaml) with a fixed sleep per embedded text, so the curve is bound by the model
latency, not by this machine's 2 cores: each query carries a rephrasing and an expected answer (3 texts to
embed), caches are off (every run embeds everything), and the number of queries grows with the actors
(`--per-actor` each) so every run does the same work per actor. Both engines run on the same cluster in the
same invocation, interleaved per actor count:

- `slices`: the pre-Ray-Data runner: the driver runs every stage for 64-query slices, one after another;
  only the embedder calls fan out over the model actors.
- `data`: ONE Ray Data Dataset: every stage is an actor pool; the embedder pool has N actors.

The head node (2 logical CPUs) runs the driver and the CPU pools; the worker node advertises `models` and
enough logical CPUs for 16 embedder actors at num_cpus 0.1 (they sleep; the real limit is the 2 cores).
Prints one table: queries/s, speed-up over 1 actor, efficiency (speed-up / actors), driver CPU-seconds per
1,000 queries (user + system time of this process during the job).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("LANCEDB_LOG", "error")

from cluster_2node import LoopbackCluster

from fanout.config import load_config
from fanout.runner import RayRunner, Runner

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["backup", "snapshot", "vlan", "router", "vpn", "media", "server", "power", "ups", "sourdough", "dal",
         "train", "lisbon", "packing", "glossary", "meeting", "borscht", "kvass", "baikal", "kazan"]


def queries(n: int, seed: int) -> list[dict]:
    out = []
    for i in range(n):
        a, b, c = WORDS[(i + seed) % 20], WORDS[(3 * i + seed) % 20], WORDS[(7 * i + 1) % 20]
        out.append({"id": f"q{seed}-{i}", "query": f"{a} {b} settings {i}", "rephrased_query": f"how to {b} {c}",
                    "expected_answer": f"The {a} notes explain the {c} setup."})
    return out


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(engine: str, actors: int, cfg, db: str, work: Path, per_actor: int, seed: int) -> dict:
    from pipelines.batch import run_batch
    from pipelines.search import Searcher, SearchOptions

    n = per_actor * actors
    q = work / f"q-{engine}-{actors}.jsonl"
    q.write_text("".join(json.dumps(r) + "\n" for r in queries(n, seed)))
    out = work / f"out-{engine}-{actors}.parquet"
    ecfg = cfg.replace(embedder={"count": actors}, runner={"engine": engine})
    with RayRunner(ecfg) as rr:
        searcher = Searcher(db, "samples", ecfg, rr)
        if engine == "slices":  # start the actor pool first: the slice runner creates it on first use
            rr.actor_handles("embedder")
        c0, t0 = cpu_s(), time.perf_counter()
        st = run_batch(q, out, searcher, SearchOptions(n=10, expand=False, rerank=False))
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    assert st["errors"] == 0 and st["queries"] == n, st
    return {"engine": engine, "actors": actors, "queries": n, "wall_s": wall, "qps": n / wall,
            "driver_cpu_per_1k": 1000 * cpu / n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actors", default="1,2,4,8,16")
    ap.add_argument("--per-actor", type=int, default=60, help="queries per model actor in each run")
    ap.add_argument("--sleep", type=float, default=0.05, help="fake embedder seconds per text")
    ap.add_argument("--engines", default="slices,data")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    counts = [int(x) for x in args.actors.split(",")]
    cfg = load_config("fake").replace(
        fake={"embed_sleep_s": args.sleep}, cache={"enabled": False},
        embedder={"num_cpus": 0.1, "batch_size": 8}, retriever={"count": 2, "num_cpus": 0.25},
        runner={"model_resource": "models", "placement_timeout_s": 120.0})
    work = Path(tempfile.mkdtemp(prefix="fanout-scale-", dir="/tmp"))
    cluster = None
    rows = []
    try:
        from pipelines.index import index_vault

        db = str(work / "db")
        with Runner(cfg) as r:
            index_vault(ROOT / "samples" / "vault", db, "samples", cfg, r)
        cluster = LoopbackCluster(head_cpus=2, worker_cpus=max(4, 0.1 * max(counts) + 1),
                                  worker_resources={"models": 1000}, object_store_mb=256).start()
        cfg = cfg.replace(runner={"ray_address": cluster.address})
        for actors in counts:
            for engine in args.engines.split(","):
                rows.append(run(engine, actors, cfg, db, work, args.per_actor, seed=actors))
                r = rows[-1]
                print(f"  {engine:6} {actors:2} actors: {r['queries']} queries in {r['wall_s']:.1f}s", flush=True)
    finally:
        if cluster:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    base = {r["engine"]: r["qps"] for r in rows if r["actors"] == counts[0]}
    print(f"\nfake embedder {args.sleep * 1000:.0f} ms/text, 3 texts/query, {args.per_actor} queries/actor, "
          f"caches off; 2-node loopback cluster on {os.cpu_count()} cores\n")
    print("| engine | model actors | queries | wall s | queries/s | speed-up | efficiency | driver CPU s / 1k q |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        up = r["qps"] / base[r["engine"]]
        print(f"| {r['engine']} | {r['actors']} | {r['queries']} | {r['wall_s']:.1f} | {r['qps']:.1f} | "
              f"{up:.2f}x | {up / (r['actors'] / counts[0]):.2f} | {r['driver_cpu_per_1k']:.2f} |")
    ideal = 1 / (3 * args.sleep)
    print(f"\nideal per actor: {ideal:.1f} queries/s (3 texts x {args.sleep * 1000:.0f} ms); "
          "efficiency = speed-up / (actors / first actor count); goal >= 0.8 to 16 actors, driver <= 1 s / 1k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
