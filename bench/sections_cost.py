"""What `--sections N` adds to a query: ms per query with sections off, 1 and 3, one query at a time (as
`fanout query` and MCP ask), on the Obsidian Help corpus; and the PickSections stage's own seconds.

    .venv/bin/python -m bench.sections_cost [--config fake] [--lang en] [--n 10] [--repeat 3]

The first pass of each setting fills the caches (query vectors; with sections, the pages' chunks, kept per index
version) and is shown apart; the median of the later passes is the steady cost. Prints one table.
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
            t = time.perf_counter()
            for q in qs:  # first pass: caches filled (query vectors; with sections, each page's chunks)
                kb.search(q, n=args.n, sections=secs, expand=False, rerank=False)
            first = 1000 * (time.perf_counter() - t) / len(qs)
            per: list[float] = []
            stage = 0.0
            for _ in range(args.repeat):
                t = time.perf_counter()
                for q in qs:
                    hits = kb.search(q, n=args.n, sections=secs, expand=False, rerank=False)
                    stage += hits.timings.get("PickSections", 0.0)
                per.append(1000 * (time.perf_counter() - t) / len(qs))
            rows.append((secs or "off", first, statistics.median(per), 1000 * stage / (len(qs) * args.repeat)))
    base = rows[0][2]
    print(f"config {args.config}, {args.lang}, {len(qs)} queries, n={args.n}, median of {args.repeat} passes")
    print("| --sections | first pass ms/query | ms/query | added | PickSections ms/query |\n|---|---|---|---|---|")
    for secs, first, ms, st in rows:
        print(f"| {secs} | {first:.1f} | {ms:.1f} | {ms - base:+.1f} | {st:.1f} |")


if __name__ == "__main__":
    main()
