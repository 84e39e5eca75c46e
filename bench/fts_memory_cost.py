"""CPU of the memory full-text engine's query side (fanout/store/fts_memory.py): this code against the one it
replaced (908d953's `top`/`topk`/`search`, copied below), the same postings and query texts, the same run.

    .venv/bin/python -m bench.fts_memory_cost [--index /tmp/cost/qc/template-20000-768]
                                                           [--notes 20000] [--queries 1600] [--repeat 3]
                                                           [--small N] [--work DIR]

`--index`: a built index of the synthetic vault (bench/query_cost.py --scale-notes 20000 --work W keeps it as
W/template-20000-768: ~60,000 chunks), collection `bench`, config `fake` at 768 dimensions; it is copied to a
temporary folder first (never opened in place). `--small N` builds a synthetic vault of N notes instead (about
two chunks a note; 300 notes: ~4 s in all). Query texts: `topic_queries(--queries, 1, --notes)`, each query's
`query` and `short_query` through `fts_text`, as a batch's two full-text lists. The postings are the ones the
engine uses (`fts.memory_columns`: the index's postings files, else built); k = 3 x retrieve.k, as Retrieve.

Per `search` call (tokenize included) and per `MemoryColumn.top` call (split by how the new code adds the
postings up: one token; short postings, the union of their rows; long ones, a pass over every row): CPU ms per
call, old and new, each the median of `--repeat` runs taking turns. Every result of both is compared
(positions, order, float32 scores bit for bit) before timing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from tests.support.fts_dense_reference import old_search as dense_search
from tests.support.fts_dense_reference import old_top, same


# -- the old code (908d953), the tests' oracle (tests/support/fts_dense_reference.py) -------------------------
def old_search(columns, boosts, text, k, allowed=None):
    import lance

    tokens: dict[tuple, list[str]] = {}

    def of(col):
        if col.analyzer not in tokens:
            tokens[col.analyzer] = [t.text for t in lance.tokenize(text, **col.tokenize_args)]
        return tokens[col.analyzer]

    return dense_search(columns, boosts, of, k, allowed)


# -- the run ------------------------------------------------------------------------------------------------
def columns(db: Path):
    """(MemoryColumns, boosts, k) of the index at `db`, as a search of the pipeline gets them."""
    from fanout.pipelines.lanes import fts_targets

    from fanout.config import load_config
    from fanout.store import fts
    from fanout.store.db import Collection

    cfg = load_config("fake").replace(fake={"dim": 768}, retrieve={"fts_memory_after": 0})
    col = Collection(str(db), "bench", cfg)
    col.refresh()
    cols, boosts = fts_targets(col, cfg)
    keys = col.row_keys(("path", "chunk_id"))
    mem = fts.memory_columns(col.dataset(col.chunks_name), cols, keys[0], col.cfg.retrieve)
    if mem is None:
        raise SystemExit(f"the memory engine does not serve {cols} of {db}")
    return mem, boosts, 3 * cfg.retrieve.k


def cpu(fn, items) -> float:
    t = time.process_time()
    for x in items:
        fn(*x)
    return time.process_time() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", default="/tmp/cost/qc/template-20000-768", help="a built index (copied first)")
    ap.add_argument("--notes", type=int, default=20000, help="the synthetic vault's notes (its query words)")
    ap.add_argument("--queries", type=int, default=1600)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--small", type=int, default=0, help="build a synthetic vault of this many notes instead")
    ap.add_argument("--work", default=None,
                    help="work folder, kept: its copy of the index is reused (default: a new one, removed)")
    args = ap.parse_args(argv)
    import lance
    from fanout.pipelines.lanes import fts_text

    from bench.synthetic_vault import synthetic_vault, topic_queries
    from fanout.store import fts_memory

    work = Path(args.work or tempfile.mkdtemp(prefix="fanout-ftsmem-", dir="/tmp"))
    try:
        db = work / "db"
        if (db / "bench.manifest.json").is_file():  # kept in --work by an earlier run
            args.notes = args.small or args.notes
        elif args.small:
            from bench.query_cost import build

            args.notes = args.small
            build(synthetic_vault(work / "vault", args.small), db, {"fake": {"dim": 768}})
        else:
            shutil.copytree(args.index, db)
        mem, boosts, k = columns(db)
        qs = topic_queries(args.queries, 1, args.notes)
        texts = [t for q in qs for t in (fts_text(q["query"]), fts_text(q["short_query"])) if t.strip()]
        calls, kinds = [], []  # (column, tokens) of every `top` call the searches make; which path it takes
        for text in texts:
            toks = {}
            for m in mem:
                toks.setdefault(m.analyzer, [t.text for t in lance.tokenize(text, **m.tokenize_args)])
                calls.append((m, toks[m.analyzer], k))
                hits = [m.slices[t] for t in toks[m.analyzer] if t in m.slices]
                size = sum(e - s for s, e in hits)
                short = (size + fts_memory.SPARSE_BASE) * fts_memory.SPARSE_RATIO < m.n_rows
                kinds.append("none" if not hits else "one token" if len(hits) == 1 else
                             "short postings" if short else "long postings")
        bad = [t for t in texts
               if not same(old_search(mem, boosts, t, k), fts_memory.search(mem, boosts, t, k))]
        bad += [c for c in calls if not same(old_top(*c), c[0].top(c[1], c[2]))]
        if bad:
            print(f"DIFFERENT results: {len(bad)}, e.g. {bad[0]!r}")
            return 1
        searches = [(mem, boosts, t, k) for t in texts]
        groups = {"all": list(range(len(calls)))}
        for kind in ("one token", "short postings", "long postings", "none"):
            groups[kind] = [i for i, x in enumerate(kinds) if x == kind]
        runs: dict[str, list[float]] = {}
        for _ in range(args.repeat):  # old and new take turns (the box's speed drifts)
            runs.setdefault("search old", []).append(cpu(old_search, searches) / len(searches))
            runs.setdefault("search new", []).append(cpu(fts_memory.search, searches) / len(searches))
            for g, idx in groups.items():
                if idx:
                    sub = [calls[i] for i in idx]
                    runs.setdefault(f"top {g} old", []).append(cpu(old_top, sub) / len(sub))
                    runs.setdefault(f"top {g} new", []).append(
                        cpu(lambda m, toks, kk: m.top(toks, kk), sub) / len(sub))
        med = {name: 1000 * statistics.median(v) for name, v in runs.items()}
        print(f"\n{mem[0].n_rows} chunks, {len(texts)} query texts, columns x{len(mem)}, k {k}, "
              f"SPARSE_RATIO {fts_memory.SPARSE_RATIO}, DENSE_RATIO {fts_memory.DENSE_RATIO}, STRIDE "
              f"{fts_memory.STRIDE}, median of {args.repeat}; all results identical\n")
        print(f"| {'call':<28} | {'calls':>6} | {'old ms':>7} | {'new ms':>7} | {'saved':>6} |")
        print(f"|{'-' * 30}|{'-' * 8}:|{'-' * 8}:|{'-' * 8}:|{'-' * 7}:|")
        rows = [("search", len(searches), "search")] + \
            [(f"top ({g})", len(idx), f"top {g}") for g, idx in groups.items() if idx]
        for label, n, key in rows:
            o, w = med[f"{key} old"], med[f"{key} new"]
            print(f"| {label:<28} | {n:>6} | {o:>7.4f} | {w:>7.4f} | {100 * (1 - w / o):>5.0f}% |")
        print(f"\nper query (2 searches): old {2 * med['search old']:.3f} ms, "
              f"new {2 * med['search new']:.3f} ms")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
