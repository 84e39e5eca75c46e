"""Matryoshka dimensions: nDCG@5 per benchmark set (from `fanout eval` runs) and vector-search cost per dim.

Quality: run `fanout eval` once per dimension into its own folder, then point --runs at them:

    cp -r /work/main/.fanout/bench-db .fanout/bench-db
    for d in 768 512 256 128; do
      PYTHONPATH=$PWD python -m fanout.cli.main eval --modes vector,hybrid,fields --db .fanout/bench-db \\
        --out out/mat-$d --set index.vector_dim=$d
    done
    nice -n 10 python bench/matryoshka.py --runs out/mat-768,out/mat-512,out/mat-256,out/mat-128 \\
        --db .fanout/bench-db

(the index re-derives its vectors from the kept full ones at each change: nothing is re-embedded).

Quality straight from an existing index (--score-index DB): a copy of DB, its vectors re-derived per dimension
(fanout.store.vectors.rederive_vectors: nothing re-embedded, nothing re-chunked), then the eval's `vector` mode (the `vec`
lane only, n=20, no expansion, no rerank) per language through fanout.pipelines.search.Searcher, scored with
fanout.evaluation.score_runs. Use it when `fanout eval` would rebuild the index first (a chunker change since the index was
built re-chunks and re-embeds every page: ~40 min per language on this machine). Query vectors come from the
copy's query-vector cache (full 768-d, cut per dimension); misses are embedded and counted on stderr:

    flock /tmp/fanout-heavy.lock nice -n 10 python bench/matryoshka.py --score-index /work/main/.fanout/bench-db \
        --db /work/main/.fanout/bench-db

Cost: a batched search of --queries query vectors in ONE call (what retrieve_variants does, k=60), brute force,
on (a) the benchmark's English chunks with real query vectors from the query-vector cache and (b) --rows
synthetic clustered chunks (bench/index_scale.py's generator), each cut to every dimension and re-normalised;
plus the bytes per vector. Rounds interleave the dimensions (the median is reported) so that load from other
work on the machine hits every dimension alike. Prints one table.
"""

from __future__ import annotations

import argparse
import os
import shutil
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

    from fanout.evaluation.bench_data import load_queries
    from fanout.evaluation.score_runs import score_files

    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in runs:
        f = Path(r) / "per_query.parquet"
        if f.exists():
            t = pq.read_table(f).to_pylist()
        else:  # an eval still running: score the run files it has written
            t = score_files(sorted((Path(r) / "runs").glob("*.json")), load_queries(None)).to_pylist()
        acc: dict[tuple[str, str], list[float]] = {}
        for row in t:
            acc.setdefault((row["system"].removeprefix("fanout-"), row["set"]), []).append(row["ndcg_5"])
        for (mode, s), v in acc.items():
            out.setdefault((r, mode), {})[s] = float(np.mean(v))
    return out


def quality_from_index(src: str, dims: list[int], langs: list[str]) -> dict[tuple[str, str], dict[str, float]]:
    """(f"index:{dim}", "vector") -> {set: mean nDCG@5}: vector-only search on a copy of `src` per dimension."""
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.config import load_config
    from fanout.evaluation.bench_data import load_queries
    from fanout.evaluation.evaluate import MODES, mode_rows
    from fanout.evaluation.score_runs import per_query_metrics
    from fanout.exec.engines import make_runner
    from fanout.store.db import Collection
    from fanout.store.vectors import rederive_vectors, vector_dims

    queries = load_queries(None)
    work = tempfile.mkdtemp(prefix="mat-q-")
    db = os.path.join(work, "bench-db")
    shutil.copytree(src, db)
    base = load_config().replace(**MODES["vector"][0])
    out: dict[tuple[str, str], dict[str, float]] = {}
    try:
        with make_runner(base, mode="inproc") as runner:
            for d in dims:
                cfg = base.replace(index={"vector_dim": d})
                for lang in langs:
                    col = Collection(db, f"bench-{lang}", cfg)
                    rederive_vectors(col.db, col.table(col.chunks_name), d)
                    col.forget(col.chunks_name)
                    manifest = col.require()  # searchers pin the manifest's table versions: record the new one
                    manifest["tables"] = col.table_versions()
                    col.write_manifest(manifest)
                    qs = [q for q in queries if q["lang"] == lang]
                    searcher = Searcher(db, f"bench-{lang}", cfg, runner)
                    t = time.perf_counter()
                    res = searcher.search(mode_rows(qs, {}, ()), SearchOptions(n=20, expand=False, rerank=False))
                    secs = time.perf_counter() - t
                    assert vector_dims(searcher.col.table(searcher.col.chunks_name))[0] == d
                    run: dict[str, list[str]] = {}
                    for r in res.results.to_pylist():
                        run.setdefault(r["qid"], []).append(r["path"])
                    per_q = per_query_metrics(run, qs, system=f"vector-{d}").to_pylist()
                    by_set: dict[str, list[float]] = {}
                    for row in per_q:
                        by_set.setdefault(row["set"], []).append(row["ndcg_5"])
                    out.setdefault((f"index:{d}", "vector"), {}).update(
                        {k: float(np.mean(v)) for k, v in by_set.items()})
                    cache = res.stats["cache"]
                    print(f"dim {d} {lang}: {len(qs)} queries in {secs:.1f}s, qvec cache hits "
                          f"{cache['hits'].get('qvec', 0)} misses {cache['misses'].get('qvec', 0)}, "
                          f"{res.errors.num_rows} errors", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def make_table(db, name: str, vectors: np.ndarray):
    return db.create_table(name, pa.table({
        "chunk_id": pa.array([str(i) for i in range(len(vectors))]),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), vectors.shape[1])}))


def search_ms(tbl, queries: np.ndarray, k: int = 60) -> float:
    """ms per query of one batched brute-force search (k=60, as retrieve_variants asks)."""
    t = time.perf_counter()
    tbl.search(list(queries)).distance_type("cosine").select(["chunk_id"]).limit(k).to_arrow()
    return 1000 * (time.perf_counter() - t) / len(queries)


def bench_vectors(db: str, collection: str, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """(full chunk vectors, up to n real query vectors from the cache, else chunk vectors) of a collection."""
    from fanout.store.db import Collection
    from fanout.store.vectors import VECTOR_FULL

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


def prepare_subset(src: str, db: str, subset_dir: str) -> None:
    """Copy a (possibly still growing) benchmark index and keep only what is complete in it.

    Writes `subset_dir/<lang>/...` (symlinks to the benchmark's pages that are fully indexed, so the eval's
    incremental index embeds nothing) and `subset_dir/queries.jsonl` (the judged queries whose relevant and
    partial pages are all indexed). The docs stay outside the repository.
    """
    import json

    from fanout.pipelines.write_index import delete_paths

    from fanout.evaluation.bench_data import corpus_dir, load_queries
    from fanout.store.db import Collection

    shutil.copytree(src, db, dirs_exist_ok=False)
    out = Path(subset_dir)
    keep_langs, have = [], set()
    for lang in ("en", "ru"):
        col = Collection(db, f"bench-{lang}")
        if not col.has(col.documents_name):
            continue
        docs = set(col.table(col.documents_name).to_arrow()["path"].to_pylist())
        chunk_paths = set(col.table(col.chunks_name).to_arrow()["path"].to_pylist())
        if chunk_paths - docs:  # a group cut off mid-write: drop its chunks
            delete_paths(col.table(col.chunks_name), chunk_paths - docs)
        root = corpus_dir(None, lang)
        for p in docs:
            link = out / lang / p
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(root / p)
        have |= {(lang, p) for p in docs}
        keep_langs.append(lang)
    qs = [q for q in load_queries(None) if q["lang"] in keep_langs
          and all((q["lang"], p) in have for p in (q.get("relevant") or []) + (q.get("partial") or []))]
    (out / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in qs))
    print(f"{len(have)} indexed pages ({','.join(keep_langs)}), {len(qs)} queries -> {out}/queries.jsonl",
          file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="", help="comma list of eval output folders, one per dimension")
    ap.add_argument("--db", default=".fanout/bench-db", help="the benchmark index (for real vectors)")
    ap.add_argument("--dims", default="768,512,256,128")
    ap.add_argument("--rows", type=int, default=100_000, help="synthetic chunks for the cost column")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds over all dims (median reported)")
    ap.add_argument("--subset-from", default=None,
                    help="copy this (partial) benchmark index to --db and write --subset-dir, then exit")
    ap.add_argument("--subset-dir", default="/tmp/fanout-mat-subset")
    ap.add_argument("--score-index", default=None,
                    help="score vector-only search on a copy of this benchmark index per dim (instead of --runs)")
    ap.add_argument("--langs", default="en,ru", help="languages for --score-index and the real-vector cost")
    args = ap.parse_args(argv)
    if args.subset_from:
        prepare_subset(args.subset_from, args.db, args.subset_dir)
        return 0

    from index_scale import BATCH, Synth

    from fanout.store.vectors import truncate_vectors

    dims = [int(d) for d in args.dims.split(",")]
    runs = [r for r in args.runs.split(",") if r]
    langs = args.langs.split(",")
    q_of = quality(runs) if runs else {}
    if args.score_index:
        q_of = quality_from_index(args.score_index, dims, langs)
        runs = [f"index:{d}" for d in dims]
    real = {lang: bench_vectors(args.db, f"bench-{lang}", args.queries) for lang in langs} \
        if Path(args.db).exists() else {}
    syn = Synth(args.rows, 768)
    parts = [syn.batch(b).column(5).flatten().to_numpy().reshape(-1, 768) for b in range(-(-args.rows // BATCH))]
    synth, synth_q = np.concatenate(parts), syn.queries(args.queries)
    import lancedb

    work = tempfile.mkdtemp(prefix="mat-")
    db = lancedb.connect(work)
    tables = {}
    for d in dims:
        tables[("synth", d)] = (make_table(db, f"s{d}", truncate_vectors(synth, d)), truncate_vectors(synth_q, d))
        for lang, (vecs, qv) in real.items():
            tables[(lang, d)] = (make_table(db, f"{lang}{d}", truncate_vectors(vecs, d)), truncate_vectors(qv, d))
    times: dict[tuple[str, int], list[float]] = {k: [] for k in tables}
    for rnd in range(args.rounds + 1):  # rounds interleave the dims: load spikes hit every dim alike
        for key, (tbl, qv) in tables.items():
            ms = search_ms(tbl, qv)
            if rnd:  # round 0 warms the caches
                times[key].append(ms)
    cost = {d: {kind: (statistics.median(times[(kind, d)]) if (kind, d) in times else None)
                for kind in (*real, "synth")} for d in dims}
    shutil.rmtree(work, ignore_errors=True)

    modes = sorted({m for _, m in q_of})
    sets = [s for s in SETS if any(s in v for v in q_of.values())]
    head = ("| dim | " + " | ".join(f"{m} {s}" for m in modes for s in sets)
            + "".join(f" | ms/query, bench-{lang} ({len(v)} chunks)" for lang, (v, _) in real.items())
            + f" | ms/query, {args.rows} synthetic | bytes/vector |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for i, d in enumerate(dims):
        run = runs[i] if i < len(runs) else None
        cells = [f"{q_of.get((run, m), {}).get(s, float('nan')):.3f}" for m in modes for s in sets]
        c = cost[d]
        lines.append(f"| {d} | " + " | ".join(cells) + "".join(f" | {c[lang]:.2f}" for lang in real)
                     + f" | {c['synth']:.2f} | {4 * d} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
