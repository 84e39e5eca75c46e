"""What `--sections N` adds to a query: ms per query with sections off, 1 and 3, one query at a time (as
`fanout query` and MCP ask), on the Obsidian Help corpus; and the PickSections stage's own seconds.

    PYTHONPATH=. .venv/bin/python bench/sections_cost.py [--config fake] [--lang en] [--n 10] [--repeat 3]

The first pass of each setting warms the caches (query vectors, expansions) and is not counted, so the figures
are the search's own work, not the models' first call. Prints one table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from fanout.evaluation.bench_data import corpus_dir, resolve_bench_dir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="fake")
    ap.add_argument("--lang", default="en")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--db", default=None, help="an index folder to reuse (bench-<lang> inside)")
    args = ap.parse_args()

    import fanout

    bench = resolve_bench_dir()
    qs = [json.loads(x) for x in (bench / "queries" / "obsidian-help.jsonl").read_text("utf-8").splitlines()]
    qs = [q["query"] for q in qs if q["lang"] == args.lang]
    db = Path(args.db or tempfile.mkdtemp(prefix="sections-cost-"))
    rows = []
    with fanout.open(db, f"bench-{args.lang}", args.config) as kb:
        kb.index(corpus_dir(None, args.lang))
        for secs in (None, 1, 3):
            for q in qs:  # warm-up pass: caches filled, pipelines built
                kb.search(q, n=args.n, sections=secs, expand=False, rerank=False)
            per: list[float] = []
            stage = 0.0
            for _ in range(args.repeat):
                t = time.perf_counter()
                for q in qs:
                    hits = kb.search(q, n=args.n, sections=secs, expand=False, rerank=False)
                    stage += hits.timings.get("PickSections", 0.0)
                per.append(1000 * (time.perf_counter() - t) / len(qs))
            rows.append((secs or "off", statistics.median(per), 1000 * stage / (len(qs) * args.repeat)))
    base = rows[0][1]
    print(f"config {args.config}, {args.lang}, {len(qs)} queries, n={args.n}, median of {args.repeat} passes")
    print("| --sections | ms/query | added | PickSections ms/query |\n|---|---|---|---|")
    for secs, ms, st in rows:
        print(f"| {secs} | {ms:.1f} | {ms - base:+.1f} | {st:.1f} |")


if __name__ == "__main__":
    main()
