"""`fanout demo`: index the bundled sample vault, answer its query batch, print a result table.

The index stays in `.fanout/demo-db` (collection `samples`) under the repository (or `--db DIR`), so the
commands the demo prints at the end work as printed, and a second run only checks the vault for changes.
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path
from typing import Any

from fanout.config import data_dir, load_config

SAMPLES = data_dir("samples")
# git-ignored in a checkout (README "Quick start" names it); an installed fanout keeps it in the working folder
DEMO_DB = (SAMPLES.parent if (SAMPLES.parent / "pyproject.toml").is_file() else Path.cwd()) / ".fanout" / "demo-db"


def next_commands(db: str) -> list[str]:
    """Three commands to try on the demo's index, as a shell would take them (run from the repo root)."""
    d = shlex.quote(db)
    return [f'.venv/bin/fanout query "how long are backup snapshots kept" --db {d} -c samples',
            f'.venv/bin/fanout search "naming" --db {d} -c samples --tag team --files',
            f".venv/bin/fanout serve --db {d} -c samples"]


def run_demo(args: argparse.Namespace) -> int:
    from fanout.exec.progress import EMBED_STARTING, Progress
    from fanout.exec.runner_mode import make_runner
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    cfg = load_config(args.config)
    if args.runner:
        cfg = cfg.replace(runner={"mode": args.runner})
    db = args.db or str(DEMO_DB.relative_to(Path.cwd()) if DEMO_DB.is_relative_to(Path.cwd()) else DEMO_DB)
    rows = [json.loads(x) for x in (SAMPLES / "queries.jsonl").read_text(encoding="utf-8").splitlines() if x]
    with make_runner(cfg, n_rows=len(rows)) as runner:
        t = time.perf_counter()
        with Progress("embedding", "chunk", starting=EMBED_STARTING) as progress:
            s = index_vault(SAMPLES / "vault", db, "samples", cfg, runner, progress=progress)
        print(f"indexed samples/vault in {time.perf_counter() - t:.1f}s: {s.text()}")
        searcher = Searcher(db, "samples", cfg, runner)
        t = time.perf_counter()
        res = searcher.search(rows, SearchOptions(n=3))
        secs = time.perf_counter() - t
        t = time.perf_counter()
        searcher.search(rows, SearchOptions(n=3))
        again = time.perf_counter() - t
    top: dict[str, Any] = {}
    for r in res.results.to_pylist():
        top.setdefault(r["qid"], []).append(r)
    hit = 0
    print("\n| id | query | top page | score | right? |\n|---|---|---|---|---|")
    for q in rows:
        best = top.get(q["id"], [{}])[0]
        ok = best.get("path") in q.get("relevant", [])
        hit += ok
        mode = "fields" if q.get("short_query") else "plain"
        print(f"| {q['id']} ({mode}) | {q['query'][:48]} | {best.get('path', '-')} | "
              f"{best.get('score', 0):.3f} | {'yes' if ok else 'no'} |")
    print(f"\nright page first for {hit}/{len(rows)} queries; batch {secs:.2f}s "
          f"({1000 * secs / len(rows):.0f} ms/query), repeated from caches {again:.2f}s; "
          f"runner {runner.kind}; stages " + ", ".join(f"{k} {v:.2f}s" for k, v in res.timings.items()))
    print(f"\nthe index is in {db} (collection samples); try next:")
    for c in next_commands(db):
        print(f"  {c}")
    print("(with `fanout serve` running, `fanout query` and `fanout search` in another terminal answer from it)")
    return 0
