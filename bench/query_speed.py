"""Query speed on a batch of benchmark queries; prints one comparison table.

    .venv/bin/python -m bench.query_speed [--db .fanout/bench-db] [--collection bench-en] [--n 100] [--slow-n 4]

Rows: the agent-fields batch (no expansion, no rerank) cold and repeated from the caches, per stage; the
full pipeline with local expansion + rerank batched vs a sequential per-query baseline doing qmd's flow on
the same models (expand -> embed -> search -> rerank 40, no caches, no prefix reuse), both on `--slow-n`
queries (those model calls cost seconds each on 2 CPU cores, so 100 queries would take an hour); wall time vs
time inside model calls; peak RSS. Caches start empty: the index tables are copied into a temp folder.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LANCEDB_LOG", "error")

from fanout.pipelines.search import Searcher, SearchOptions

from fanout.config import load_config
from fanout.evaluation.bench_data import load_agent_fields, load_queries
from fanout.exec.runner import Runner


def fresh_db(src: Path, collection: str, dst: Path) -> Path:
    for p in src.iterdir():
        if p.name.startswith(collection + "_") and "_cache_" not in p.name or p.name == f"{collection}.manifest.json":
            (shutil.copytree if p.is_dir() else shutil.copy)(p, dst / p.name)
    return dst


def model_seconds(runner: Runner) -> float:
    return sum(v for k, v in runner.seconds.items() if not k.startswith("load_"))


def timed(searcher: Searcher, runner: Runner, rows: list[dict], opts: SearchOptions) -> tuple[float, float, dict]:
    before = model_seconds(runner)
    t = time.perf_counter()
    res = searcher.search(rows, opts)
    return time.perf_counter() - t, model_seconds(runner) - before, res.timings


def sequential_qmd(searcher: Searcher, rows: list[dict]) -> float:
    """qmd's flow, one query at a time, every model call made (caches off, no prefix reuse)."""
    searcher = Searcher(searcher.db, searcher.collection, searcher.cfg.replace(cache={"enabled": False}),
                        searcher.runner)
    reranker = searcher.runner.actor("reranker")
    reranker.prefix_reuse = False
    t = time.perf_counter()
    for r in rows:
        searcher.search([{"id": r["id"], "query": r["query"]}],
                        SearchOptions(n=10, expand=True, rerank=True))
    reranker.prefix_reuse = True
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", default=".fanout/bench-db")
    ap.add_argument("--collection", default="bench-en")
    ap.add_argument("--lang", default="en")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--slow-n", type=int, default=4, help="queries for the expansion+rerank rows (0 = skip)")
    args = ap.parse_args()
    cfg = load_config().replace(probe={"enabled": False})  # every query takes the full path
    fields = load_agent_fields()
    qs = [q for q in load_queries() if q["lang"] == args.lang][: args.n]
    rows = [{"id": q["id"], "query": q["query"], **{k: v for k, v in fields.get(q["id"], {}).items() if v}}
            for q in qs]
    table = []
    with tempfile.TemporaryDirectory() as tmp, Runner(cfg) as runner:
        db = fresh_db(Path(args.db), args.collection, Path(tmp))
        searcher = Searcher(db, args.collection, cfg, runner)
        runner.actor("embedder")
        fast = SearchOptions(n=10, expand=False, rerank=False)
        cold, cold_model, stages = timed(searcher, runner, rows, fast)
        warm, _, warm_stages = timed(searcher, runner, rows, fast)
        n = len(rows)
        table.append(("agent fields, no rerank: cold", cold, n, cold_model, stages))
        table.append(("agent fields, no rerank: repeated (caches)", warm, n, 0.0, warm_stages))
        if args.slow_n:
            slow_rows = [{"id": r["id"], "query": r["query"]} for r in rows[: args.slow_n]]
            runner.actor("expander")
            runner.actor("reranker")
            full = SearchOptions(n=10, expand=True, rerank=True)
            fcold, fmodel, fstages = timed(searcher, runner, slow_rows, full)
            fwarm, _, fwstages = timed(searcher, runner, slow_rows, full)
            seq = sequential_qmd(Searcher(db, args.collection, cfg, runner), slow_rows)
            k = len(slow_rows)
            table.append(("local expansion + rerank, batched: cold", fcold, k, fmodel, fstages))
            table.append(("local expansion + rerank: repeated (caches)", fwarm, k, 0.0, fwstages))
            table.append(("qmd flow, sequential per query, no caches", seq, k, seq, {}))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n{args.collection}: {len(rows)} queries with agent fields; peak RSS {rss:.0f} MiB\n")
    print("| run | queries | wall s | ms/query | model s | wall/model | stages (s) |\n|---|---|---|---|---|---|---|")
    for name, wall, n, model, st in table:
        ratio = f"{wall / model:.2f}" if model > 0.05 else "-"
        stage = ", ".join(f"{k} {v:.2f}" for k, v in st.items() if v >= 0.005)
        print(f"| {name} | {n} | {wall:.2f} | {1000 * wall / n:.0f} | {model:.2f} | {ratio} | {stage} |")
    print(f"\ncached repeat vs cold (agent fields): {table[0][1] / table[1][1]:.0f}x (goal >= 100x)")
    print(f"agent fields without rerank, cold: {1000 * table[0][1] / table[0][2]:.0f} ms/query, "
          f"repeated: {1000 * table[1][1] / table[1][2]:.1f} ms/query (goal <= 20)")
    if len(table) > 2:
        print(f"full pipeline batched vs sequential qmd flow: {table[4][1] / table[2][1]:.1f}x (goal >= 10x); "
              f"cached repeat vs cold: {table[2][1] / table[3][1]:.0f}x")


if __name__ == "__main__":
    main()
