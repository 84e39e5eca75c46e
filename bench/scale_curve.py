"""Scaling of the batch job with the number of model actors, on a 2-node Ray cluster on loopback.

    .venv/bin/python -m bench.scale_curve [--actors 1,2,4,8,16] [--per-actor 60] [--sleep 0.05]

Fake models (configs/fake.yaml) with a fixed sleep per embedded text, so the curve is bound by the model
latency, not by this machine's 2 cores: each query carries a rephrasing and an expected answer (3 texts to
embed), caches are off (every run embeds everything), and the number of queries grows with the actors
(`--per-actor` each) so every run does the same work per actor. Each run first answers a 1-query job in the
same runner (a warm-up), then the n queries, then 1 query again: every job pays a fixed cost (pools
starting, planning, teardown: 16-19 s for a 16-actor job on 2 cores in 2026-12, mostly each actor process
starting Python and importing Ray Data), which the last 1-query job measures; the table prints the raw rate and the rate net of that
cost, with the driver CPU per query net of it; scaling is judged on the net figures. Every query's three
texts are unique (no dedupe inside a batch), so the ideal rate per actor is 1 / (3 x sleep). Both modes run on the same cluster in the
same invocation, interleaved per actor count:

- `slices`: the pre-Ray-Data runner, kept here only as a baseline (`SliceRunner`): the driver runs every
  stage for 64-query slices, one after another; only the embedder calls fan out over the model actors.
- `data`: ONE Ray Data Dataset: every stage is an actor pool; the embedder pool has N actors.
- `inproc`: the in-process loop (no Ray), one embedder whatever N: run only at the first actor count, as the
  baseline the `x in-process` column divides by (a job of Q queries takes about Q / rate + fixed there).

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

os.environ.setdefault("LANCEDB_LOG", "error")

from bench.loopback import LoopbackCluster
from bench.query_cost import overrides
from fanout.config import load_config
from fanout.exec.ray_runner import RayRunner
from fanout.exec.runner import Runner

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["backup", "snapshot", "vlan", "router", "vpn", "media", "server", "power", "ups", "sourdough", "dal",
         "train", "lisbon", "packing", "glossary", "meeting", "borscht", "kvass", "baikal", "kazan"]


def queries(n: int, seed: int) -> list[dict]:
    out = []
    for i in range(n):
        a, b, c = WORDS[(i + seed) % 20], WORDS[(3 * i + seed) % 20], WORDS[(7 * i + 1) % 20]
        out.append({"id": f"q{seed}-{i}", "query": f"{a} {b} settings {i}",
                    "rephrased_query": f"how to {b} {c} number {seed}-{i}",
                    "expected_answer": f"The {a} notes explain the {c} setup ({seed}-{i})."})
    return out


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _job(mode: str, rows: list[dict], cfg, db: str, work: Path, name: str, rr) -> tuple[float, float, dict]:
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import Searcher, SearchOptions

    q = work / f"q-{name}.jsonl"
    q.write_text("".join(json.dumps(r) + "\n" for r in rows))
    searcher = Searcher(db, "samples", cfg, rr)
    c0, t0 = cpu_s(), time.perf_counter()
    st = run_batch(q, work / f"out-{name}.parquet", searcher, SearchOptions(n=10, expand=False, rerank=False))
    assert st["errors"] == 0 and st["queries"] == len(rows), st
    return time.perf_counter() - t0, cpu_s() - c0, st


class SliceRunner(RayRunner):
    """The `slices` baseline (fanout itself runs every Ray job as one Ray Data Dataset): the in-process loop
    (`Runner.run`) in the driver, the model calls fanned out to this runner's Ray actor pool (`RayRunner.map`)."""

    run = Runner.run


def run(mode: str, actors: int, cfg, db: str, work: Path, per_actor: int, seed: int, label: str = "",
        per_process: int = 1) -> dict:
    """One mode at one actor count, three jobs in one runner: a 1-query warm-up (a driver's first job
    also starts Ray Data's own actors), the n-query job, then a 1-query job again: its wall and driver CPU
    are the fixed cost every job pays (pools starting, planning, teardown), subtracted from the n-query
    job's to give the net rate and the marginal driver CPU per query, which is what scaling is about."""
    n = per_actor * actors
    if mode == "inproc":  # the plain loop, no Ray: one embedder in this process
        ecfg = cfg.replace(embedder={"count": 1}, runner={"ray_address": "", "mode": "inproc"})
    else:
        per = min(per_process, actors)  # `actors` models in ceil(actors / per) processes of `per` each
        ecfg = cfg.replace(embedder={"count": -(-actors // per), "instances": per})
    with {"inproc": Runner, "slices": SliceRunner}.get(mode, RayRunner)(ecfg) as rr:
        if mode == "slices":  # the slice runner creates its pool on first use: start it before timing
            rr.actor_handles("embedder")
        _job(mode, queries(1, seed + 1000), ecfg, db, work, f"{mode}-{actors}-warm", rr)
        wall, cpu, _ = _job(mode, queries(n, seed), ecfg, db, work, f"{mode}-{actors}-n", rr)
        w1, c1, _ = _job(mode, queries(1, seed + 2000), ecfg, db, work, f"{mode}-{actors}-one", rr)
    net = max(wall - w1, 1e-9)
    return {"mode": label or mode, "actors": actors, "queries": n, "wall_s": wall, "fixed_s": w1, "qps": n / wall,
            "net_qps": n / net, "driver_cpu_per_1k": 1000 * max(cpu - c1, 0.0) / n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actors", default="1,2,4,8,16")
    ap.add_argument("--per-actor", type=int, default=60, help="queries per model actor in each run")
    ap.add_argument("--sleep", type=float, default=0.05, help="fake embedder seconds per text")  # 16 actors:
    # 107 queries/s ideal, whose CPU stages (~5 ms CPU/query here) need about half of one of the 2 cores
    ap.add_argument("--modes", default="slices,data")
    ap.add_argument("--model-blocks-per-actor", default="", help="data mode: runner.model_blocks_per_actor values to run "
                    "side by side, e.g. 0,8 (default: the config's)")
    ap.add_argument("--instances", default="", help="data mode: models per actor process (embedder.instances) to "
                    "run side by side, e.g. 1,4: N model actors are then N models in ceil(N / per) processes")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL:SEC.KEY=VAL[,...]",
                    help="data mode: run again with config values changed (repeatable), as bench/query_cost.py")
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
        from fanout.pipelines.index import index_vault

        db = str(work / "db")
        with Runner(cfg) as r:
            index_vault(ROOT / "samples" / "vault", db, "samples", cfg, r)
        cluster = LoopbackCluster(head_cpus=2, worker_cpus=max(4, 0.1 * max(counts) + 1),
                                  worker_resources={"models": 1000}, object_store_mb=256).start()
        # every job starts all its pools' actors (runner.size_pools_to_job off; --also can turn it on), so the
        # 1-query job's wall is the start-up the n-query job pays too
        cfg = cfg.replace(runner={"ray_address": cluster.address, "size_pools_to_job": False})
        modes = args.modes.split(",")
        also = list(args.also)
        if "data" in modes and args.model_blocks_per_actor:  # the config's value gives way to these
            modes.remove("data")
            also += [f"data, model_blocks_per_actor {v}:runner.model_blocks_per_actor={v}"
                     for v in args.model_blocks_per_actor.split(",")]
        per_process = [int(v) for v in args.instances.split(",")] if "data" in modes and args.instances else []
        if per_process:  # the data mode at each of these models-per-process values instead
            modes.remove("data")
        variants = [(e, None, 1) for e in modes] + [("data", overrides(spec), 1) for spec in also]
        variants += [("data", (f"data, {v} per process" if v > 1 else "data", {}), v) for v in per_process]
        for actors in counts:
            for mode, extra, per in variants:
                if mode == "inproc" and actors != counts[0]:
                    continue
                vcfg = cfg if extra is None else cfg.replace(**extra[1])
                rows.append(run(mode, actors, vcfg, db, work, args.per_actor, seed=actors,
                                label="" if extra is None else extra[0], per_process=per))
                r = rows[-1]
                print(f"  {mode:6} {actors:2} actors: {r['queries']} queries in {r['wall_s']:.1f}s (fixed {r['fixed_s']:.1f}s)", flush=True)
    finally:
        if cluster:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    base = {r["mode"]: r["net_qps"] for r in rows if r["actors"] == counts[0]}
    print(f"\nfake embedder {args.sleep * 1000:.0f} ms/text, 3 texts/query, {args.per_actor} queries/actor, "
          f"caches off; 2-node loopback cluster on {os.cpu_count()} cores\n")
    loop = base.get("inproc")
    print("| mode | model actors | queries | wall s | fixed s (1-query job) | queries/s (wall) | "
          "queries/s (net of fixed) | speed-up (net) | efficiency | x in-process (net) | "
          "driver CPU s / 1k q (net) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        up = r["net_qps"] / base[r["mode"]]
        vs = f"{r['net_qps'] / loop:.2f}x" if loop else "-"
        print(f"| {r['mode']} | {r['actors']} | {r['queries']} | {r['wall_s']:.1f} | {r['fixed_s']:.1f} | "
              f"{r['qps']:.1f} | {r['net_qps']:.1f} | {up:.2f}x | {up / (r['actors'] / counts[0]):.2f} | {vs} | "
              f"{r['driver_cpu_per_1k']:.2f} |")
    if loop:
        inproc = next(r for r in rows if r["mode"] == "inproc")
        for r in rows:
            if r["mode"] != "inproc":
                print(f"- 10,000 queries, {r['mode']} with {r['actors']} model actors: ~{10_000 / r['net_qps'] + r['fixed_s']:.0f} s"
                      f" against ~{10_000 / loop + inproc['fixed_s']:.0f} s in-process (net rate x 10,000 + fixed)")
    ideal = 1 / (3 * args.sleep)
    print(f"\nideal per actor: {ideal:.1f} queries/s (3 texts x {args.sleep * 1000:.0f} ms); "
          "efficiency = net speed-up / (actors / first actor count); goal >= 0.8 to 16 actors, driver <= 1 s / 1k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
