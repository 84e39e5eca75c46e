"""A query's vector search alone at a size a full synthetic vault does not fit here (400,000 chunks): CPU per
query, fixed cost, peak RSS and recall@10 against exact search, this code against `--baseline` in one run.

    .venv/bin/python -m bench.vector_cost --rows 400000 --baseline /tmp/base --work /tmp/vc
                                                       [--sizes 256,1024] [--also LABEL:SEC.KEY=VAL[,...]]

The chunks table holds `--rows` clustered 768-d unit vectors (bench/index_scale.py's `Synth`: ~1000 rows per
topic, neighbours inside it, as real embeddings have) and is indexed as `fanout index` would (the profile's
vector index above `index.vector_index_min_rows`). A job is a child process in its own cpuacct cgroup that
opens the collection and runs `Collection.vector_search_many` the way Retrieve does: per block of 256
queries (runner.block_rows) one call with their 3 query vectors each (query, rephrased_query,
expected_answer), k = 60 (3 x retrieve.k). Marginal CPU per query = the difference between the two sizes'
jobs over the difference in queries; the fixed cost (imports, opening the table, loading the vectors) is what
is left of the small job. Recall@10: the first 100 query vectors' top 10 against the exact top 10 (numpy,
computed while the rows are generated). `--work DIR` keeps the table for the next run (generating 400,000
rows and building the index takes minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LANCEDB_LOG", "error")

from bench.query_cost import in_cgroup, merged, overrides
from bench.query_cost_child import peak_rss_mb

BLOCK = 256  # queries per vector_search_many call (runner.block_rows)
PER_QUERY = 3  # query vectors per query (query, rephrased_query, expected_answer)


def child(work: str, n: int, dim: int) -> None:
    from bench.index_scale import Synth
    from fanout.config import load_config
    from fanout.store.db import Collection

    t0 = time.process_time()
    cfg = load_config("fake")
    sections = json.loads(os.environ.get("FANOUT_QC_SET") or "{}")
    if sections:
        cfg = cfg.replace(**sections)
    meta = json.loads((Path(work) / "meta.json").read_text())
    q = Synth(meta["rows"], dim).queries(n * PER_QUERY)
    col = Collection(work, "scale", cfg)
    top10: list[list[str]] = []
    for a in range(0, len(q), BLOCK * PER_QUERY):
        block = q[a:a + BLOCK * PER_QUERY]
        res = col.vector_search_many([list(map(float, v)) for v in block], 60, ["path", "chunk_id"])
        if a == 0:
            res = res.sort_by([("query_index", "ascending"), ("_distance", "ascending")])
            got: dict[int, list[str]] = {}
            for qi, cid in zip(res["query_index"].to_pylist(), res["chunk_id"].to_pylist()):
                got.setdefault(qi, []).append(cid)
            top10 = [got.get(i, [])[:10] for i in range(min(100, len(block)))]
    print(json.dumps({"cpu_self_s": time.process_time() - t0, "top10": top10, "rss_mb": peak_rss_mb()}))


def build(work: Path, rows: int, dim: int, nq: int) -> list[list[str]]:
    """The table (kept in `work` when already there) and the exact top 10 of the first 100 of the `nq` query
    vectors the largest job searches."""
    import numpy as np

    from bench.index_scale import Synth, build_table
    from fanout.config import load_config
    from fanout.store.db import Collection
    from fanout.store.vectors import build_vector_index, has_vector_index

    meta_f = work / "meta.json"
    keep = meta_f.is_file() and json.loads(meta_f.read_text()).get("rows") == rows
    cfg = load_config("fake")
    col = Collection(str(work), "scale", cfg)
    syn = Synth(rows, dim)
    q = syn.queries(nq)[:100]
    t = time.perf_counter()
    truth, _ = build_table(col, syn, q, write=not keep)
    tbl = col.table(col.chunks_name)
    if rows >= cfg.index.vector_index_min_rows and not has_vector_index(tbl):
        info = build_vector_index(tbl, cfg.index)
        print(f"  built {info['index_type']} in {info['seconds']} s", file=sys.stderr, flush=True)
    from fanout.store import exact_vectors

    ds = col.dataset(col.chunks_name)
    if exact_vectors.file_wanted(ds, cfg):  # `fanout index`'s last step: the version's vectors file (kept when
        t1 = time.process_time()  # there); code without it (a baseline) ignores the file
        print(f"  vectors file: {exact_vectors.ensure_file(ds)} in {time.process_time() - t1:.1f} CPU-s",
              file=sys.stderr, flush=True)
    meta_f.write_text(json.dumps({"rows": rows, "dim": dim}))
    print(f"  table of {rows} rows ready in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return [[f"note{i // 5}.md#{i % 5}" for i in row] for row in np.asarray(truth).tolist()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--sizes", default="256,1024", help="two job sizes (queries)")
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--also", action="append", default=[], metavar="LABEL:SEC.KEY=VAL[,...]")
    ap.add_argument("--work", default=None, help="work folder, kept (the table is reused)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    work = Path(args.work or tempfile.mkdtemp(prefix="fanout-vc-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in args.sizes.split(",")]
    truth = build(work, args.rows, args.dim, sizes[-1] * PER_QUERY)
    codes = [("", ROOT, {})] + ([("baseline", Path(args.baseline).resolve(), {})] if args.baseline else [])
    for tag, sections in map(overrides, args.also):
        codes.append((tag, ROOT, sections))
    out = []
    for label, code, sections in codes:
        runs = []
        for n in sizes:
            cmd = [sys.executable, "-m", "bench.vector_cost", "--child", str(work), str(n), str(args.dim)]
            cpu, line = in_cgroup(cmd, f"fanout-vc-{os.getpid()}-{len(out)}-{n}", code, merged({}, sections))
            r = json.loads(line)
            runs.append({"n": n, "cpu": cpu, **r})
            print(f"  {label or 'this code'} {n} queries: cpu {cpu:.1f} s, rss {r['rss_mb']:.0f} MB", flush=True)
        small, big = runs[0], runs[-1]
        m = (big["cpu"] - small["cpu"]) / (big["n"] - small["n"])
        got = big["top10"]
        rec = sum(len(set(g) & set(t)) for g, t in zip(got, truth)) / (10 * len(truth))
        out.append({"code": label or "this code", "ms_per_query": 1000 * m, "ms_per_vector": 1000 * m / PER_QUERY,
                    "fixed_s": small["cpu"] - small["n"] * m, "rss_mb": max(r["rss_mb"] for r in runs),
                    "recall": rec, "cpu": [r["cpu"] for r in runs]})
    print(f"\nvector search only: {args.rows} chunks x {args.dim} dims (clustered), {PER_QUERY} query vectors a query, "
          f"{BLOCK} queries per call, k=60; CPU of the job's process tree (cpuacct); marginal = ({sizes[-1]} - "
          f"{sizes[0]}) queries; {os.cpu_count()} cores\n")
    print("| code | CPU ms/query (marginal) | ms/query vector | fixed CPU s | peak RSS MB | recall@10 vs exact | "
          + " | ".join(f"CPU s, {n} q" for n in sizes) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(sizes))
    for r in out:
        print(f"| {r['code']} | {r['ms_per_query']:.2f} | {r['ms_per_vector']:.2f} | {r['fixed_s']:.1f} | "
              f"{r['rss_mb']:.0f} | {r['recall']:.3f} | " + " | ".join(f"{c:.1f}" for c in r["cpu"]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
