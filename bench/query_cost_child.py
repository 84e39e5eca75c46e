"""The child side of bench/query_cost.py: what runs inside one measured job's process (its own cpuacct cgroup),
started as `python -m bench.query_cost --child ...` in the code under test (this checkout, or a `--baseline`
checkout, whose own bench.query_cost then runs): one batch job (`child`), the vector lists' recall against
exact search (`recall_child`), Ray Data's floor for the job's shape (`floor`), the process's peak RSS."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _mod(*names: str):
    """A module by its name in this layout, or by an older name in a --baseline checkout from before a rename
    (the first of `names` that imports)."""
    import importlib

    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ImportError:
            pass
    return importlib.import_module(names[-1])


def child(mode: str, db: str, qfile: str, out: str, cpus: int) -> None:
    t0 = time.perf_counter()
    from fanout.config import load_config

    make_runner = _mod("fanout.exec.runner_mode", "fanout.exec.engines", "fanout.engines").make_runner
    run_batch = _mod("fanout.pipelines.batch", "pipelines.batch").run_batch
    search = _mod("fanout.pipelines.search", "pipelines.search")
    Searcher, SearchOptions = search.Searcher, search.SearchOptions

    cfg = load_config("fake")
    sections: dict = json.loads(os.environ.get("FANOUT_QC_SET") or "{}")  # --also: config values changed
    if mode == "floor":  # the same shape: `--also` changes (pool counts, CPUs) apply to it too
        return floor(cfg.replace(**sections) if sections else cfg, db, qfile, t0)
    if mode == "data":
        sections["runner"] = {**sections.get("runner", {}), "mode": "ray"}
    if sections:
        cfg = cfg.replace(**sections)
    if mode == "api":  # the Python API's batch (fanout.open(...).batch): the same job, in-process
        import fanout

        with fanout.open(db, "bench", cfg, runner="inproc") as kb:
            t1 = time.perf_counter()
            st = kb.batch(qfile, out=out, n=10, expand=False, rerank=False).stats
            t2 = time.perf_counter()
    else:
        with make_runner(cfg, mode="ray" if mode == "data" else "inproc") as runner:
            t1 = time.perf_counter()
            searcher = Searcher(db, "bench", cfg, runner)
            st = run_batch(qfile, out, searcher, SearchOptions(n=10, expand=False, rerank=False))
            t2 = time.perf_counter()
    print(json.dumps({"start_s": t1 - t0, "job_s": t2 - t1, "total_s": time.perf_counter() - t0,
                      "queries": st["queries"], "errors": st["errors"], "timings": st["timings"],
                      "rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """Peak RSS of this process (the in-process job's only process; on Ray Data the driver's): VmHWM of its
    own address space, not `ru_maxrss`, which a forked-then-exec'd child inherits from its parent's at the fork
    (the bench's process after building a large table)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def recall_child(db: str, qfile: str) -> None:
    """Recall@10 of this code's vector lists (`Collection.vector_search_many`, k = Retrieve's 3 x
    retrieve.k) against exact search (numpy over every stored vector), for the vector-lane texts of the
    queries in `qfile` (query, rephrased_query, expected_answer), embedded with the fake embedder."""
    import numpy as np

    from fanout.config import load_config

    hashed_vector = _mod("fanout.actors.fake", "actors.fake").hashed_vector
    Collection = _mod("fanout.store.db", "fanout.db").Collection

    cfg = load_config("fake")
    sections: dict = json.loads(os.environ.get("FANOUT_QC_SET") or "{}")
    if sections:
        cfg = cfg.replace(**sections)
    rows = [json.loads(x) for x in Path(qfile).read_text(encoding="utf-8").splitlines() if x.strip()][:100]
    texts = [r[f] for r in rows for f in ("query", "rephrased_query", "expected_answer")]
    q = np.stack([hashed_vector(f" {t}", cfg.fake.dim) for t in texts])
    col = Collection(db, "bench", cfg)
    col.refresh()
    t = time.process_time()
    res = col.vector_search_many([list(map(float, v)) for v in q], 3 * cfg.retrieve.k, ["chunk_id"])
    cpu = time.process_time() - t
    ds = col.dataset(col.chunks_name)
    tab = ds.to_table(columns=["chunk_id", "vector"])
    v = tab["vector"].combine_chunks().flatten().to_numpy().reshape(tab.num_rows, -1).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    s = q @ v.T
    tenth = -np.partition(-s, 9, axis=1)[:, 9]  # each query's exact 10th best score
    pos = {c: i for i, c in enumerate(tab["chunk_id"].to_pylist())}
    got: dict[int, list[str]] = {}
    res = res.sort_by([("query_index", "ascending"), ("_distance", "ascending")])
    for qi, cid in zip(res["query_index"].to_pylist(), res["chunk_id"].to_pylist()):
        got.setdefault(qi, []).append(cid)
    # a returned chunk counts when its exact score reaches the 10th best: rows tied with the 10th (common with
    # the fake embedder's bag-of-words vectors of short texts) are all right answers
    rec = [sum(s[i, pos[c]] >= tenth[i] - 1e-6 for c in got.get(i, [])[:10]) / 10 for i in range(len(q))]
    print(json.dumps({"recall": float(np.mean(rec)), "vectors": len(q), "cpu_ms_per_vector": 1000 * cpu / len(q)}))


class Identity:
    def __call__(self, table):
        return table


def floor(cfg, db: str, qfile: str, t0: float) -> None:
    """Ray Data's own floor for the job's shape: the same private local Ray (fanout's runner), the job's rows
    as the same blocks, and one identity actor pool per pool the search would run (same count and CPUs),
    iterated to the end. What a Ray Data job costs before fanout does anything."""
    import pyarrow as pa
    from fanout.pipelines.search import SearchOptions, search_stages

    from fanout.exec.ray_data import pool_sizes, read_blocks
    from fanout.exec.runner import fuse_specs
    from fanout.exec.runner_mode import make_runner

    n = sum(1 for line in Path(qfile).read_text(encoding="utf-8").splitlines() if line.strip())
    cfg = cfg.replace(runner={"mode": "ray"})
    specs = fuse_specs(search_stages(cfg, db, "bench", SearchOptions(n=10, expand=False, rerank=False)))
    blocks = read_blocks(cfg, specs, n, 1)
    per = -(-n // blocks)
    with make_runner(cfg, mode="ray") as runner:
        t1 = time.perf_counter()
        rd = runner.ray_data()
        ctx = rd.DataContext.get_current()
        ctx.enable_progress_bars, ctx.wait_for_min_actors_s = False, -1
        ds = rd.from_blocks([pa.table({"_row": list(range(i, min(i + per, n)))}) for i in range(0, n, per)])
        sizes = pool_sizes(cfg, specs, [0] * len(specs), n, per)
        for k, (spec, size) in enumerate(zip(specs, sizes, strict=True)):
            acfg = getattr(cfg, spec.pool)
            ds = ds.map_batches(type(f"Identity{k}", (Identity,), {}), batch_format="pyarrow",
                                batch_size=spec.batch_rows or acfg.batch_size, num_cpus=acfg.num_cpus,
                                compute=rd.ActorPoolStrategy(size=size))
        rows = sum(t.num_rows for t in ds.iter_batches(batch_format="pyarrow", batch_size=None))
        t2 = time.perf_counter()
    print(json.dumps({"start_s": t1 - t0, "job_s": t2 - t1, "total_s": time.perf_counter() - t0,
                      "queries": rows, "errors": 0, "timings": {}}))
