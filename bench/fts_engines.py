"""The `memory` full-text engine against Lance itself on real indexes: identical lists, CPU per search, build.

    .venv/bin/python -m bench.fts_engines --db /work/bench-db --collections bench-en,bench-ru
                                                       [--bench ../shared/eval/obsidian-help] [--random 1500] [--k 60]

Query texts per collection (its language taken from the name's `-en` / `-ru`, else English): the benchmark's
queries of that language, the strong agent's three fields for each, and `--random` draws of 1-6 words from
them (ties, stop words, repeated words), passed through `fts_text` as the pipeline does. Each engine runs
every text through `Collection.fts_search_many` over the columns of the languages the index holds, with the
configured boosts; a search's result (path, chunk_id, float32 score) must be equal as a table. The memory
engine's build is timed on its first call (`retrieve.fts_memory_after` 0). Prints one table.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def texts_for(bench: Path, lang: str, n_random: int, seed: int = 1) -> list[str]:
    from fanout.pipelines.lanes import fts_text

    qs = [json.loads(line) for line in (bench / "queries" / "obsidian-help.jsonl").read_text("utf-8").splitlines()
          if line.strip()]
    out = [q["query"] for q in qs if q.get("lang") == lang]
    fields = bench / "agent-fields" / f"agent-fields-{lang}.json"
    if fields.exists():
        for r in json.loads(fields.read_text("utf-8")):
            out += [r.get(f) or "" for f in ("short_query", "rephrased_query", "expected_answer")]
    words = " ".join(out).split()
    rnd = random.Random(seed)
    out += [" ".join(rnd.sample(words, rnd.randint(1, 6))) for _ in range(n_random)] if words else []
    return [t for t in (fts_text(x) for x in out) if t.strip()]


def run(db: str, name: str, texts: list[str], k: int) -> dict:
    from fanout.pipelines.lanes import fts_targets

    from fanout.config import load_config
    from fanout.store.db import Collection

    base = load_config("fake")
    res, row = {}, {"collection": name, "texts": len(texts)}
    for engine in ("memory", "lance"):
        cfg = base.replace(retrieve={"fts_engine": engine, "fts_memory_after": 0})
        col = Collection(db, name, cfg)
        col.refresh()
        cols, boosts = fts_targets(col, cfg)
        t0 = time.process_time()
        col.fts_search_many(texts[:1], cols, boosts, k, ["path", "chunk_id"])  # opens the version (and builds)
        row[f"{engine} first call s"] = time.process_time() - t0
        t1 = time.process_time()
        res[engine] = col.fts_search_many(texts, cols, boosts, k, ["path", "chunk_id"])
        row[f"{engine} ms CPU/search"] = 1000 * (time.process_time() - t1) / len(texts)
        row["columns"] = len(cols)
        row["chunks"] = len(col.row_keys(("path", "chunk_id"))[0])
    row["identical"] = sum(a.equals(b) for a, b in zip(res["memory"], res["lance"]))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--collections", required=True, help="comma-separated")
    ap.add_argument("--bench", default=str(ROOT.parent / "shared" / "eval" / "obsidian-help"))
    ap.add_argument("--random", type=int, default=1500, help="random word draws per collection")
    ap.add_argument("--k", type=int, default=60, help="hits per search (the pipeline asks for retrieve.k x 3)")
    args = ap.parse_args(argv)
    rows = []
    for name in args.collections.split(","):
        lang = "ru" if name.endswith("-ru") else "en"
        rows.append(run(args.db, name, texts_for(Path(args.bench), lang, args.random), args.k))
    print("\n| collection | chunks | columns | texts | identical | memory ms CPU/search | lance ms CPU/search "
          "| memory build + first call s | lance first call s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['collection']} | {r['chunks']} | {r['columns']} | {r['texts']} | {r['identical']} / {r['texts']} "
              f"| {r['memory ms CPU/search']:.3f} | {r['lance ms CPU/search']:.3f} | {r['memory first call s']:.2f} "
              f"| {r['lance first call s']:.2f} |")
    return 0 if all(r["identical"] == r["texts"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
