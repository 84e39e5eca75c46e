"""Matryoshka dimensions: nDCG@5 per benchmark set (from `fanout eval` runs) and vector-search cost per dim.

Quality: run `fanout eval` once per dimension into its own folder, then point --runs at them:

    cp -r /work/main/.fanout/bench-db .fanout/bench-db
    for d in 768 512 256 128; do
      PYTHONPATH=$PWD python -m faces.cli eval --modes vector,hybrid,fields --db .fanout/bench-db \\
        --out out/mat-$d --set index.vector_dim=$d
    done
    nice -n 10 python bench/matryoshka.py --runs out/mat-768,out/mat-512,out/mat-256,out/mat-128 \\
        --db .fanout/bench-db

(the index re-derives its vectors from the kept full ones at each change: nothing is re-embedded).

Cost: a batched search of --queries query vectors in ONE call (what retrieve_variants does), brute force,
on (a) the benchmark's English chunks with real query vectors from the query-vector cache and (b) --rows
synthetic clustered chunks (bench/index_scale.py's generator), each cut to every dimension and re-normalised;
plus the bytes per vector. Prints one table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LANCEDB_LOG", "error")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import pyarrow as pa

SETS = ("en-base", "en-tricky", "ru-base", "ru-tricky")


def quality(runs: list[str]) -> dict[tuple[str, str], dict[str, float]]:
    """(run folder, mode) -> {set: mean nDCG@5}."""
    import pyarrow.parquet as pq

    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in runs:
        t = pq.read_table(Path(r) / "per_query.parquet").to_pylist()
        acc: dict[tuple[str, str], list[float]] = {}
        for row in t:
            acc.setdefault((row["system"].removeprefix("fanout-"), row["set"]), []).append(row["ndcg_5"])
        for (mode, s), v in acc.items():
            out.setdefault((r, mode), {})[s] = float(np.mean(v))
    return out


def time_search(vectors: np.ndarray, queries: np.ndarray, k: int = 60, reps: int = 5) -> float:
    """ms per query of one batched brute-force search over `vectors` (a temporary Lance table)."""
    import lancedb

    with tempfile.TemporaryDirectory(prefix="mat-") as d:
        db = lancedb.connect(d)
        tbl = db.create_table("t", pa.table({
            "chunk_id": pa.array([str(i) for i in range(len(vectors))]),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()),
                                                        vectors.shape[1])}))
        search = (lambda: tbl.search(list(queries)).distance_type("cosine").select(["chunk_id"]).limit(k)
                  .to_arrow())
        search()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            search()
            ts.append(time.perf_counter() - t)
    return 1000 * statistics.median(ts) / len(queries)


def bench_vectors(db: str, collection: str, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """(full chunk vectors, up to n real query vectors from the cache, else chunk vectors) of a collection."""
    from fanout.db import VECTOR_FULL, Collection

    col = Collection(db, collection)
    t = col.table(col.chunks_name).to_arrow()
    src = VECTOR_FULL if VECTOR_FULL in t.column_names else "vector"
    full = np.asarray(t[src].to_pylist(), np.float32)
    qname = f"{collection}_cache_qvec"
    if col.has(qname):
        q = np.asarray(col.table(qname).to_arrow()["vector"].to_pylist()[:n_queries], np.float32)
    else:
        q = full[:n_queries]
    return full, q


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="", help="comma list of eval output folders, one per dimension")
    ap.add_argument("--db", default=".fanout/bench-db", help="the benchmark index (for real vectors)")
    ap.add_argument("--dims", default="768,512,256,128")
    ap.add_argument("--rows", type=int, default=100_000, help="synthetic chunks for the cost column")
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args(argv)

    from index_scale import BATCH, Synth

    from fanout.db import truncate_vectors

    dims = [int(d) for d in args.dims.split(",")]
    runs = [r for r in args.runs.split(",") if r]
    q_of = quality(runs) if runs else {}
    real, real_q = bench_vectors(args.db, "bench-en", args.queries) if Path(args.db).exists() else (None, None)
    syn = Synth(args.rows, 768)
    parts = [syn.batch(b).column(5).flatten().to_numpy().reshape(-1, 768) for b in range(-(-args.rows // BATCH))]
    synth, synth_q = np.concatenate(parts), syn.queries(args.queries)
    cost = {}
    for d in dims:  # interleaved per dim: the same machine state for real and synthetic
        cost[d] = {
            "real": time_search(truncate_vectors(real, d), truncate_vectors(real_q, d)) if real is not None else None,
            "synth": time_search(truncate_vectors(synth, d), truncate_vectors(synth_q, d)),
        }
        print(f"dim {d}: {cost[d]}", file=sys.stderr)

    modes = sorted({m for _, m in q_of})
    n_real = 0 if real is None else len(real)
    head = ("| dim | " + " | ".join(f"{m} {s}" for m in modes for s in SETS)
            + f" | ms/query, bench-en ({n_real} chunks) | ms/query, {args.rows} synthetic | bytes/vector |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for i, d in enumerate(dims):
        run = runs[i] if i < len(runs) else None
        cells = [f"{q_of.get((run, m), {}).get(s, float('nan')):.3f}" for m in modes for s in SETS]
        c = cost[d]
        lines.append(f"| {d} | " + " | ".join(cells) + f" | {c['real'] if c['real'] is None else round(c['real'], 2)}"
                     f" | {c['synth']:.2f} | {4 * d} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
