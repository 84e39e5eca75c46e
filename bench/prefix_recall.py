"""Does a prefix of the real embedder's vectors rank chunks like the full vectors? (the Matryoshka first pass
of the exact search, `index.exact_prefix_dims`; prints one table)

    PYTHONPATH=. .venv/bin/python bench/prefix_recall.py --db DB -c COLLECTION [--chunks 600] [--chars 700]
                                                         [--cache /tmp/prefix.npz] [--dims 128,256,384,512]

Embeds, with the local profile's embedder (embeddinggemma-300m), `--chunks` chunk texts (cut to `--chars`
characters: a CPU embeds ~0.3 full chunks a second) drawn from the chunks table of an index of the benchmark
corpus (any profile: only its `text` and `title` are read) and the benchmark's English queries with their
agent fields (rephrased_query, expected_answer: 345 query texts). Per prefix size D: the correlation of
the prefix cosine with the full cosine over each query's chunks, the candidates a query needs for its whole
exact top-10 (the largest prefix rank among them), and recall@10 of the exact re-rank of the best C prefix
cosines. `--cache` keeps the vectors (a rerun with the same file only analyses).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LANCEDB_LOG", "error")


def embed(db: str, collection: str, n: int, chars: int) -> tuple[np.ndarray, np.ndarray]:
    import lance
    import pyarrow as pa
    from fanout.actors.embedder import Embedder

    from fanout.config import load_config
    from fanout.evaluation.bench_data import load_agent_fields, load_queries

    t = lance.dataset(str(Path(db) / f"{collection}_chunks.lance")).to_table(columns=["title", "text"])
    idx = np.sort(np.random.default_rng(0).choice(t.num_rows, min(n, t.num_rows), replace=False))
    rows = t.take(pa.array(idx)).to_pylist()
    fields = load_agent_fields()
    texts = []
    for q in load_queries():
        if q.get("lang", "en") == "en":
            texts.append(q["query"])
            f = fields.get(q["id"]) or {}
            texts += [f[k] for k in ("rephrased_query", "expected_answer") if f.get(k)]
    emb = Embedder(load_config("local"))
    q = emb(pa.table({"text": texts, "role": ["query"] * len(texts)}))["vector"]
    x = emb(pa.table({"text": [r["text"][:chars] for r in rows], "title": [r["title"] for r in rows],
                      "role": ["document"] * len(rows)}))["vector"]
    as_np = lambda col: np.stack(col.to_numpy(zero_copy_only=False)).astype(np.float32)
    return as_np(x), as_np(q)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", help="an index of the benchmark corpus (its chunk texts are embedded)")
    ap.add_argument("-c", "--collection", default="bench-en")
    ap.add_argument("--chunks", type=int, default=600)
    ap.add_argument("--chars", type=int, default=700)
    ap.add_argument("--cache", default=None, help="npz of the vectors: written after embedding, read if present")
    ap.add_argument("--dims", default="128,256,384,512")
    ap.add_argument("--cands", default="10,20,30,50,100")
    args = ap.parse_args(argv)
    if args.cache and Path(args.cache).is_file():
        z = np.load(args.cache)
        x, q = z["X"], z["Q"]
    else:
        if not args.db:
            ap.error("--db is needed to embed (or --cache with a saved file)")
        x, q = embed(args.db, args.collection, args.chunks, args.chars)
        if args.cache:
            np.savez(args.cache, X=x, Q=q)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    s = q @ x.T
    top10 = np.argsort(-s, axis=1, kind="stable")[:, :10]
    cands = [int(c) for c in args.cands.split(",")]
    print(f"\n{len(x)} chunks, {len(q)} query texts; full cosine: top-1 {np.sort(s, 1)[:, -1].mean():.3f}, "
          f"10th {np.sort(s, 1)[:, -10].mean():.3f}, median {np.median(s):.3f}\n")
    print("| prefix dims | corr(prefix, full cosine) | candidates needed for the exact top-10: median / p95 / max | "
          + " | ".join(f"recall@10, C={c}" for c in cands) + " |")
    print("|---|---|---|" + "---|" * len(cands))
    for d in (int(v) for v in args.dims.split(",")):
        p = (q[:, :d] @ x[:, :d].T) / np.linalg.norm(x[:, :d], axis=1)  # prefix cosine (x the query's length)
        corr = np.mean([np.corrcoef(p[i], s[i])[0, 1] for i in range(len(q))])
        ranks = np.argsort(np.argsort(-p, axis=1, kind="stable"), axis=1)
        r10 = np.take_along_axis(ranks, top10, 1)
        need = r10.max(1) + 1
        print(f"| {d} | {corr:.3f} | {np.median(need):.0f} / {np.percentile(need, 95):.0f} / {need.max()} | "
              + " | ".join(f"{(r10 < c).mean():.4f}" for c in cands) + " |")
    print(json.dumps({"chunks": len(x), "queries": len(q)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
