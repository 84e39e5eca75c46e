"""Storage at scale: vector index vs brute force, FTS and `chunk_id IN` at N chunks, cache upserts with a BTREE.

Synthetic chunks: 768-d unit vectors drawn around N/1000 cluster centres (so nearest neighbours exist, as with
real embeddings; uniform random vectors have none and make every ANN look bad) plus ~60 Zipf-distributed
words of text. 100 query vectors are fresh draws around the centres of 100 random rows. Ground truth is the
exact top-10 by cosine, computed with numpy while the data is generated (never held in memory at once).

Measured (one table at the end):
- a batched vector search of all queries in ONE call (what retrieve_variants does), brute force vs each index
  type at a few nprobes / refine_factor / ef settings: ms per query, recall@10 against the exact top-10;
- index build time and size on disk;
- the fanout path (Collection.vector_search_many with the profile's index settings, k=60);
- full-text search (Collection.fts_search_many, 100 queries), `chunk_id IN` lookups (fetch_chunks) without
  and with the BTREE;
- cache upserts (merge_insert on `key`) of --upsert keys into a --cache-rows cache without and with the BTREE
  (a comma list of sizes, e.g. `--cache-rows 300000,1000000`, to see how the upsert grows with the cache).

    nice -n 10 python -m bench.index_scale                 # 100k rows, quick
    nice -n 10 python -m bench.index_scale --rows 1000000  # the issue's size
    flock /tmp/fanout-heavy.lock nice -n 10 python -m bench.index_scale --rows 200000 --types IVF_HNSW_SQ \
        --cache-rows 300000,1000000          # what fits in ~15 min on the shared 2-core box
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LANCEDB_LOG", "error")

import numpy as np
import pyarrow as pa

BATCH = 50_000
K = 10


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def timed(fn, reps: int = 3) -> tuple[float, object]:
    """Median seconds of `reps` calls (after one warm-up call) and the last result."""
    out = fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), out


class Synth:
    """Deterministic clustered unit vectors + Zipf text, generated batch by batch."""

    def __init__(self, rows: int, dim: int, seed: int = 7, vocab: int = 30_000, gen_rows: int = 0):
        self.rows, self.dim, self.seed = rows, dim, seed
        rng = np.random.default_rng(seed)
        # ~1000 rows per topic: the top-10 is decided inside one. gen_rows: the size the topics were drawn
        # for (a table kept from a larger, interrupted run keeps its topics)
        self.n_clusters = max(10, (gen_rows or rows) // 1000)
        c = rng.standard_normal((self.n_clusters, dim)).astype(np.float32)
        self.centres = c / np.linalg.norm(c, axis=1, keepdims=True)
        self.sigma = 1.2 / np.sqrt(dim)  # noise norm 1.2: cosine to the centre ~0.64, to a neighbour ~0.4
        letters = np.array(list("etaoinshrdlucmfwypvbgkqjxz"))
        lens = rng.integers(3, 10, vocab)
        self.words = np.array(["".join(rng.choice(letters, n)) for n in lens])
        p = 1.0 / np.arange(1, vocab + 1) ** 1.05
        self.p = p / p.sum()

    def vectors(self, ids: np.ndarray, rng) -> np.ndarray:
        v = self.centres[ids] + self.sigma * rng.standard_normal((len(ids), self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def batch(self, b: int, text: bool = True) -> pa.RecordBatch:
        """Rows b*BATCH ...; text=False leaves the text empty (the vectors are the same either way)."""
        rng = np.random.default_rng((self.seed, b))
        start = b * BATCH
        n = min(BATCH, self.rows - start)
        clusters = rng.integers(0, self.n_clusters, n)
        vec = self.vectors(clusters, rng)
        if text:
            words = self.words[rng.choice(len(self.words), size=(n, 60), p=self.p)]
            text = [" ".join(w) for w in words]
        else:
            text = [""] * n
        ids = np.arange(start, start + n)
        return pa.RecordBatch.from_arrays([
            pa.array([f"note{i // 5}.md#{i % 5}" for i in ids]),
            pa.array([f"note{i // 5}.md" for i in ids]),
            pa.array([f"Note {i // 5}" for i in ids]),
            pa.array([f"Part {i % 5}" for i in ids]),
            pa.array(text),
            pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1), pa.float32()), self.dim),
        ], names=["chunk_id", "path", "title", "heading", "text", "vector"])

    def queries(self, n: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, 10**6))
        return self.vectors(rng.integers(0, self.n_clusters, n), rng)


def build_table(col, syn: Synth, q: np.ndarray, write: bool = True) -> tuple[np.ndarray, float]:
    """Write the chunks table batch by batch; return the exact top-K row ids per query and seconds.

    write=False regenerates the same rows only to compute the exact top-K (a table kept with --dir).
    """
    best_s = np.full((len(q), K), -np.inf, np.float32)
    best_i = np.zeros((len(q), K), np.int64)
    t = time.perf_counter()
    tbl = None
    for b in range((syn.rows + BATCH - 1) // BATCH):
        rb = syn.batch(b, text=write)
        vec = rb.column(5).flatten().to_numpy().reshape(-1, syn.dim)
        s = q @ vec.T
        cand_s = np.concatenate([best_s, s], axis=1)
        cand_i = np.concatenate([best_i, np.arange(b * BATCH, b * BATCH + len(vec))[None, :].repeat(len(q), 0)],
                                axis=1)
        top = np.argpartition(-cand_s, K, axis=1)[:, :K]
        best_s, best_i = np.take_along_axis(cand_s, top, 1), np.take_along_axis(cand_i, top, 1)
        if not write:
            continue
        if tbl is None:
            tbl = col.db.create_table(col.chunks_name, data=pa.Table.from_batches([rb]), mode="overwrite")
        else:
            tbl.add(pa.Table.from_batches([rb]))
        print(f"\rwrote {min(syn.rows, (b + 1) * BATCH)}/{syn.rows} rows", end="", file=sys.stderr)
    print(file=sys.stderr)
    if tbl is not None:
        tbl.optimize()  # one compaction, as `fanout optimize` would leave it
    return best_i, time.perf_counter() - t


def recall(res: pa.Table, truth: np.ndarray) -> float:
    got: dict[int, set[int]] = {}
    for qi, cid in zip(res["query_index"].to_pylist(), res["chunk_id"].to_pylist()):
        n, o = cid.removeprefix("note").split(".md#")
        got.setdefault(qi, set()).add(int(n) * 5 + int(o))
    return float(np.mean([len(got.get(i, set()) & set(truth[i].tolist())) / K for i in range(len(truth))]))


def vsearch(tbl, q: np.ndarray, k: int = K, nprobes: int = 0, refine: int = 0, ef: int = 0, exact=False):
    s = tbl.search(list(q)).distance_type("cosine").select(["chunk_id"]).limit(k)
    if exact:
        s = s.bypass_vector_index()
    if nprobes:
        s = s.nprobes(nprobes)
    if refine:
        s = s.refine_factor(refine)
    if ef:
        s = s.ef(ef)
    return s.to_arrow()


GRIDS = {  # search settings tried per index type: (nprobes, refine_factor, ef)
    "IVF_PQ": [(10, 0, 0), (20, 0, 0), (20, 5, 0), (20, 10, 0), (50, 10, 0)],
    "IVF_HNSW_SQ": [(10, 0, 0), (20, 0, 0), (20, 0, 100), (20, 2, 0), (20, 2, 100), (50, 0, 100)],
    "IVF_HNSW_PQ": [(10, 0, 0), (20, 5, 0), (20, 10, 0)],
    "IVF_FLAT": [(10, 0, 0), (20, 0, 0), (50, 0, 0)],
    "IVF_RQ": [(20, 0, 0), (20, 5, 0), (20, 10, 0), (50, 10, 0)],
    "IVF_SQ": [(20, 0, 0), (20, 5, 0), (50, 5, 0)],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="chunks in the synthetic collection")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--queries", type=int, default=100, help="query vectors searched as one batch")
    ap.add_argument("--types", default="IVF_HNSW_SQ,IVF_PQ", help=f"index types to compare: {sorted(GRIDS)}")
    ap.add_argument("--cache-rows", default="3000000",
                    help="rows in the cache table, or a comma list of sizes (0 = skip)")
    ap.add_argument("--upsert", type=int, default=10_000, help="keys per cache upsert (half of them new)")
    ap.add_argument("--dir", default=None,
                    help="work folder, kept (a second run reuses its chunks table); default: a temp folder")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    ap.add_argument("--partitions", type=int, default=0, help="IVF partitions (0 = the rule in fanout/store/db.py)")
    ap.add_argument("--gen-rows", type=int, default=0,
                    help="rows the generator's topics were drawn for (reusing the first --rows rows of a "
                         "larger --dir table that was cut short); default --rows")
    args = ap.parse_args(argv)

    from fanout.pipelines.lanes import fetch_chunks

    from fanout.config import load_config
    from fanout.store.db import Collection
    from fanout.store.vectors import ensure_scalar_index

    work = Path(args.dir or tempfile.mkdtemp(prefix="index-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = load_config()
    if args.partitions:
        cfg = cfg.replace(index={"vector_partitions": args.partitions})
    col = Collection(str(work), "scale", cfg)
    syn = Synth(args.rows, args.dim, gen_rows=args.gen_rows)
    q = syn.queries(args.queries)
    rows: list[dict] = []

    def add(what: str, setting: str = "", ms_q: float | None = None, rec: float | None = None,
            build_s: float | None = None, mb: float | None = None, note: str = "") -> None:
        rows.append({"what": what, "setting": setting, "ms_per_query": ms_q, "recall_at_10": rec,
                     "build_s": build_s, "size_mb": mb, "note": note})
        print(f"  {what} {setting}: ms/q {ms_q} recall {rec} build {build_s} MB {mb} {note}", file=sys.stderr)

    reuse = col.has(col.chunks_name) and col.table(col.chunks_name).count_rows() == args.rows
    truth, write_s = build_table(col, syn, q, write=not reuse)
    tbl = col.table(col.chunks_name)
    tdir = work / f"{col.chunks_name}.lance"
    if reuse:  # drop the indexes a previous run left, so brute force is brute force and sizes add up
        for ix in tbl.list_indices():
            tbl.drop_index(ix.name)
    add("write chunks table", f"{args.rows} rows" + (" (kept from a previous run)" if reuse else ""),
        build_s=None if reuse else round(write_s, 1), mb=round(du(tdir) / 2**20, 1))
    nq = len(q)
    sec, res = timed(lambda: vsearch(tbl, q, exact=True), reps=3 if args.rows < 500_000 else 1)
    add("vector brute force", f"{nq} queries in one call", round(1000 * sec / nq, 2), round(recall(res, truth), 3))

    from fanout.store.vectors import build_vector_index

    last_built = ""
    for kind in [t for t in args.types.split(",") if t]:
        icfg = dataclasses.replace(cfg.index, vector_index_type=kind)
        last_built = kind
        before = du(tdir / "_indices")
        t = time.perf_counter()
        info = build_vector_index(tbl, icfg)
        build = time.perf_counter() - t
        size = (du(tdir / "_indices") - before) / 2**20
        params = ", ".join(f"{k}={info[k]}" for k in ("num_partitions", "num_sub_vectors", "m", "ef_construction")
                           if k in info)
        add(f"build {kind}", params, build_s=round(build, 1), mb=round(size, 1))
        for nprobes, refine, ef in GRIDS[kind]:
            sec, res = timed(lambda n=nprobes, r=refine, e=ef: vsearch(tbl, q, nprobes=n, refine=r, ef=e))
            setting = f"nprobes={nprobes}" + (f" refine={refine}" if refine else "") + (f" ef={ef}" if ef else "")
            add(f"vector {kind}", setting, round(1000 * sec / nq, 2), round(recall(res, truth), 3))

    from fanout.store.vectors import build_vector_index

    final = cfg.index.vector_index_type
    if not last_built or last_built != final:
        build_vector_index(tbl, cfg.index)  # the profile's choice, as `fanout index` builds it
    col2 = Collection(str(work), "scale", cfg)  # a fresh handle, as a new query process would open
    sec, res = timed(lambda: col2.vector_search_many([list(x) for x in q], 60, ["path", "chunk_id"]))
    by_q: dict[int, list[dict]] = {}
    for r in sorted(res.select(["query_index", "chunk_id", "_distance"]).to_pylist(),
                    key=lambda r: (r["query_index"], r["_distance"])):
        by_q.setdefault(r["query_index"], []).append(r)
    top10 = pa.Table.from_pylist([r for v in by_q.values() for r in v[:K]])
    setting = (f"{final} nprobes={cfg.index.nprobes}" + (f" refine={cfg.index.refine_factor}"
               if cfg.index.refine_factor else "") + (f" ef={cfg.index.ef}" if cfg.index.ef else "") + ", k=60")
    add("fanout path (vector_search_many)", setting, round(1000 * sec / nq, 2), round(recall(top10, truth), 3))

    # -- full text --------------------------------------------------------------------------------------
    from lancedb.index import FTS

    before = du(tdir / "_indices")
    t = time.perf_counter()
    tbl.create_index("text", config=FTS(language="English", stem=True, remove_stop_words=True,
                                           ascii_folding=True, lower_case=True), replace=True)
    fts_build = time.perf_counter() - t
    add("build FTS (text)", "English stemmer", build_s=round(fts_build, 1),
        mb=round((du(tdir / "_indices") - before) / 2**20, 1))
    rng = np.random.default_rng(3)
    texts = [" ".join(syn.words[rng.integers(50, 3000, 3)]) for _ in range(nq)]
    sec, _ = timed(lambda: col2.fts_search_many(texts, ["text"], [1.0], 60, ["path", "chunk_id"]))
    add("full-text search", f"{nq} queries, 3 words, k=60, async gather", round(1000 * sec / nq, 2))

    # -- chunk_id IN -------------------------------------------------------------------------------------
    ids = {f"note{i // 5}.md#{i % 5}" for i in rng.integers(0, args.rows, 200)}
    sec, got = timed(lambda: fetch_chunks(col2, ids))
    assert len(got) == len(ids)
    add("chunk_id IN lookup", f"{len(ids)} ids, no scalar index", round(1000 * sec, 1), note="ms per lookup")
    t = time.perf_counter()
    ensure_scalar_index(tbl, "chunk_id")
    bt = time.perf_counter() - t
    col3 = Collection(str(work), "scale", cfg)
    sec, got = timed(lambda: fetch_chunks(col3, ids))
    add("chunk_id IN lookup", f"{len(ids)} ids, BTREE", round(1000 * sec, 1), build_s=round(bt, 1),
        note="ms per lookup")

    # -- cache upserts -----------------------------------------------------------------------------------
    for n in [int(x) for x in str(args.cache_rows).split(",") if int(x)]:
        cache_rows(col, n, args.upsert, add)

    print(table(rows, args))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def cache_rows(col, cache_rows: int, upsert_keys: int, add) -> None:
    from fanout.store.vectors import ensure_scalar_index

    def keys(rng, n):
        return [f"{x:032x}" for x in rng.integers(0, 2**62, n, dtype=np.int64) * 7919 + 13]

    def chunk(ks: list[str]) -> pa.Table:
        n = len(ks)
        return pa.table({"key": ks, "query": [f"query {k[:6]}" for k in ks], "intent": [None] * n,
                         "passage_hash": [k[:16] for k in ks], "model": ["m"] * n,
                         "score": np.linspace(0, 1, n), "created": [time.time()] * n})

    rng = np.random.default_rng(11)
    name = f"{col.name}_cache_rerank_{cache_rows}"
    t = time.perf_counter()
    existing: list[str] = []
    tbl = None
    for start in range(0, cache_rows, 500_000):
        ks = keys(rng, min(500_000, cache_rows - start))
        existing.extend(ks[:max(2000, upsert_keys)])  # old keys the upserts rewrite
        data = chunk(ks)
        if tbl is None:
            tbl = col.db.create_table(name, data=data, mode="overwrite")
        else:
            tbl.add(data)
    tbl.optimize()
    add("write cache table", f"{cache_rows} rows", build_s=round(time.perf_counter() - t, 1))

    def upsert(seed: int) -> float:
        r = np.random.default_rng(seed)
        old = [existing[i] for i in r.choice(len(existing), upsert_keys // 2, replace=False)]
        new = keys(r, upsert_keys - len(old))
        data = chunk(old + new)
        t0 = time.perf_counter()
        tbl.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(data)
        return time.perf_counter() - t0

    def lookup() -> float:
        ks = existing[:500]
        t0 = time.perf_counter()
        where = "key IN (" + ", ".join(f"'{k}'" for k in ks) + ")"
        n = tbl.search().where(where).select(["key", "score"]).limit(len(ks)).to_arrow().num_rows
        assert n == len(ks), n
        return time.perf_counter() - t0

    no_idx = statistics.median([upsert(s) for s in (1, 2, 3)])
    look0 = statistics.median([lookup() for _ in range(3)])
    t = time.perf_counter()
    ensure_scalar_index(tbl, "key")
    bt = time.perf_counter() - t
    with_idx = statistics.median([upsert(s) for s in (4, 5, 6)])
    look1 = statistics.median([lookup() for _ in range(3)])
    setting = f"{upsert_keys} keys ({upsert_keys - upsert_keys // 2} new) into {cache_rows} rows"
    add("cache upsert (merge_insert key)", setting + ", no index", round(1000 * no_idx, 0), note="ms per upsert")
    add("cache upsert (merge_insert key)", setting + ", BTREE", round(1000 * with_idx, 0), build_s=round(bt, 1),
        note="ms per upsert")
    add("cache lookup key IN (500)", f"{cache_rows} rows, no index", round(1000 * look0, 1), note="ms per lookup")
    add("cache lookup key IN (500)", f"{cache_rows} rows, BTREE", round(1000 * look1, 1), note="ms per lookup")
    col.db.drop_table(name)  # the next size starts from an empty disk budget


def table(rows: list[dict], args) -> str:
    head = (f"\nindex_scale: {args.rows} chunks x {args.dim} dims, {args.queries} queries per batch, "
            f"cache {args.cache_rows} rows\n\n"
            "| what | setting | ms/query | recall@10 | build s | size MB | note |\n|---|---|---|---|---|---|---|")
    fmt = (lambda v: "" if v is None else str(v))
    return head + "\n" + "\n".join(
        f"| {r['what']} | {r['setting']} | {fmt(r['ms_per_query'])} | {fmt(r['recall_at_10'])} | "
        f"{fmt(r['build_s'])} | {fmt(r['size_mb'])} | {r['note']} |" for r in rows)


if __name__ == "__main__":
    sys.exit(main())
