"""`fanout` command line: index, query, batch, expand, eval, analyze, optimize, models, mcp, demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

os.environ.setdefault("LANCEDB_LOG", "error")

DEFAULT_DB = os.environ.get("FANOUT_DB", ".fanout/db")
DEFAULT_COLLECTION = "notes"
log = logging.getLogger("fanout")


def _common(p: argparse.ArgumentParser, db: bool = True) -> None:
    p.add_argument("--config", default=None, help="profile name (local, production) or YAML path")
    if db:
        p.add_argument("--db", default=DEFAULT_DB, help=f"LanceDB folder (default {DEFAULT_DB}, env FANOUT_DB)")
        p.add_argument("--collection", default=DEFAULT_COLLECTION, help="collection name in the db")
    p.add_argument("--runner", choices=["auto", "inproc", "ray"], default=None, help="where model actors run")
    p.add_argument("--ray-address", default=None, help="attach to a Ray cluster (else $RAY_ADDRESS or local)")
    p.add_argument("-v", "--verbose", action="store_true")


def _search_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", type=int, default=10, help="pages per query")
    p.add_argument("--min-score", type=float, default=0.0)
    p.add_argument("--no-expand", dest="expand", action="store_false", default=None)
    p.add_argument("--expand", dest="expand", action="store_true")
    p.add_argument("--no-rerank", dest="rerank", action="store_false", default=None)
    p.add_argument("--rerank", dest="rerank", action="store_true")
    p.add_argument("--explain", action="store_true", help="every list's rank and score per result")


def _cfg(args: argparse.Namespace):
    from fanout.config import load_config

    cfg = load_config(args.config)
    runner = {}
    if getattr(args, "runner", None):
        runner["mode"] = args.runner
    if getattr(args, "ray_address", None):
        runner["ray_address"] = args.ray_address
    return cfg.replace(runner=runner) if runner else cfg


def _opts(args: argparse.Namespace):
    from pipelines.search import SearchOptions

    return SearchOptions(n=args.n, min_score=args.min_score, expand=args.expand, rerank=args.rerank,
                         explain=args.explain)


def cmd_index(args: argparse.Namespace) -> int:
    from fanout.runner import make_runner
    from pipelines.index import index_vault

    cfg = _cfg(args)
    with make_runner(cfg, n_rows=0 if args.runner is None else 10**9) as runner:
        s = index_vault(args.vault, args.db, args.collection, cfg, runner, progress=sys.stderr.isatty())
    for sk in s.skipped:
        print(f"skipped {sk['path']}: {sk['reason']} ({sk['detail']})", file=sys.stderr)
    print(s.text())
    return 3 if s.skipped else 0


def _print_results(res, fmt: str, explain: bool) -> None:
    from fanout.batch_io import flat_rows

    rows = res.results.to_pylist()
    if fmt == "json":
        keys = ["rank", "path", "title", "heading", "snippet", "score"] + (["_explain"] if explain else [])
        out = [{k: (json.loads(r[k]) if k == "_explain" and r[k] else r[k]) for k in keys} for r in rows]
        print(json.dumps(out, ensure_ascii=False, indent=2))
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(flat_rows(res.results, res.errors), sys.stdout.buffer)
    elif fmt == "md":
        print("| # | score | page | heading |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['rank']} | {r['score']:.3f} | {r['path']} | {r['heading']} |")
    else:
        for r in rows:
            head = f" > {r['heading']}" if r["heading"] else ""
            print(f"{r['rank']:>2}. {r['score']:.3f}  {r['path']}{head}\n      {r['snippet'][:160]}")
            if explain and r["_explain"]:
                print(f"      {r['_explain']}")
    for e in res.errors.to_pylist():
        print(f"error: {e['field']}: {e['error']}", file=sys.stderr)
    if res.stats.get("cached_expansions"):
        print(f"({res.stats['cached_expansions']} used a cached expansion)", file=sys.stderr)


def cmd_query(args: argparse.Namespace) -> int:
    from fanout.runner import make_runner
    from pipelines.search import Searcher

    cfg = _cfg(args)
    row = {"id": "q", "query": args.text, "intent": args.intent, "short_query": args.short_query,
           "rephrased_query": args.rephrased_query, "expected_answer": args.expected_answer}
    with make_runner(cfg, n_rows=1) as runner:
        res = Searcher(args.db, args.collection, cfg, runner).search([row], _opts(args))
    fmt = "json" if args.json else "csv" if args.csv else "md" if args.md else "text"
    _print_results(res, fmt, args.explain)
    return 2 if res.errors.num_rows else 0


def cmd_batch(args: argparse.Namespace) -> int:
    """Exit 0 when every row was answered, 3 when some rows are error rows (the rest is in --out)."""
    from fanout.batch_io import check_out
    from fanout.runner import make_runner
    from pipelines.batch import run_batch
    from pipelines.search import Searcher

    cfg = _cfg(args)
    if args.engine:
        cfg = cfg.replace(runner={"engine": args.engine})
    check_out(args.out, args.file)  # before any work (and before Ray starts)
    n = 0 if args.runner is None else 10**9
    mode = args.runner or ("ray" if _big_input(args.file, cfg) else "inproc")
    tty = sys.stderr.isatty()
    with make_runner(cfg, n_rows=n, mode=mode) as runner:
        searcher = Searcher(args.db, args.collection, cfg, runner)
        st = run_batch(args.file, args.out, searcher, _opts(args), args.slice, progress=tty,
                       on_slice=(lambda d, t: print(f"\r{d}/{t} queries", end="", file=sys.stderr)) if tty
                       else None)
    if tty:
        print(file=sys.stderr)
    times = " ".join(f"{k} {v:.2f}s" for k, v in st["timings"].items())
    exp = ", ".join(f"{k} {v}" for k, v in sorted(st["expansion"].items()))
    print(f"{st['queries']} queries ({st['resumed']} resumed), {st['errors']} errors, {st['seconds']:.1f}s "
          f"-> {args.out}\nexpansion: {exp or 'none'} ({st['cached_expansions']} used a cached expansion)"
          + (f"\nstages: {times}" if times else f"\nengine: {st['engine']}"))
    return 3 if st["errors"] else 0


def _big_input(path: str, cfg) -> bool:
    """auto mode: Ray for inputs of at least runner.ray_min_rows rows (counted by a streaming pass)."""
    from fanout.batch_io import read_input

    if cfg.runner.mode != "auto":
        return cfg.runner.mode == "ray"
    if cfg.runner.ray_address or os.environ.get("RAY_ADDRESS"):
        return True
    n = 0
    for t in read_input(path):
        n += t.num_rows
        if n >= cfg.runner.ray_min_rows:
            return True
    return False


def cmd_expand(args: argparse.Namespace) -> int:
    """Precompute expansions for a query file into the cache (no retrieval); resumable, streaming."""
    from fanout.runner import make_runner
    from pipelines.precompute import run_expand

    cfg = _cfg(args)
    mode = args.runner or ("ray" if _big_input(args.file, cfg) else "inproc")
    with make_runner(cfg, n_rows=0, mode=mode) as runner:
        st = run_expand(args.file, args.db, args.collection, cfg, runner)
    print(f"{st['queries']} queries in {st['seconds']:.1f}s: {st['expanded']} expanded, {st['cached']} already "
          f"cached, {st['agent']} had agent variants, {st['errors']} bad rows")
    return 3 if st["errors"] else 0


def cmd_optimize(args: argparse.Namespace) -> int:
    """Compact a collection's tables (or all tables) and delete versions older than --keep-days."""
    from pipelines.optimize_tables import optimize_tables, optimize_text

    print(optimize_text(optimize_tables(args.db, args.collection, args.keep_days)))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from fanout.models import main_models

    return main_models(args.rest)


def cmd_demo(args: argparse.Namespace) -> int:
    from faces.demo import run_demo

    return run_demo(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from faces.evaluate import main_eval

    return main_eval(args)


def cmd_analyze(args: argparse.Namespace) -> int:
    from faces.evaluate import main_analyze

    return main_analyze(args)


def cmd_mcp(args: argparse.Namespace) -> int:
    from faces.mcp_server import main_mcp

    return main_mcp(args)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fanout", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("index", help="index (or incrementally update) a markdown vault")
    p.add_argument("vault")
    _common(p)
    p.set_defaults(fn=cmd_index)
    p = sub.add_parser("query", help="search one query")
    p.add_argument("text")
    p.add_argument("--intent")
    p.add_argument("--short-query")
    p.add_argument("--rephrased-query")
    p.add_argument("--expected-answer")
    for f in ("json", "csv", "md"):
        p.add_argument(f"--{f}", action="store_true")
    _common(p)
    _search_flags(p)
    p.set_defaults(fn=cmd_query, runner=None)
    p = sub.add_parser("batch", help="answer a query file (JSONL/parquet/CSV) into --out; resumable")
    p.add_argument("file")
    p.add_argument("--out", required=True, help="results file: .parquet, .jsonl or .csv")
    p.add_argument("--slice", type=int, default=None, help="queries per in-process part (runner.slice_rows)")
    p.add_argument("--engine", choices=["data", "slices"], default=None,
                   help="on Ray: one Ray Data pipeline (data, default) or the driver slice loop (slices)")
    _common(p)
    _search_flags(p)
    p.set_defaults(fn=cmd_batch)
    p = sub.add_parser("expand", help="precompute expansions of a query file into the cache")
    p.add_argument("file")
    _common(p)
    p.set_defaults(fn=cmd_expand)
    p = sub.add_parser("optimize", help="compact Lance tables (chunks, documents, caches); readers keep working")
    p.add_argument("--db", default=DEFAULT_DB, help=f"LanceDB folder (default {DEFAULT_DB}, env FANOUT_DB)")
    p.add_argument("--collection", default=None, help="only this collection's tables (default: every table)")
    p.add_argument("--keep-days", type=float, default=7.0,
                   help="delete files of versions older than this (default 7; 0 breaks readers on old versions)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(fn=cmd_optimize)
    p = sub.add_parser("models", help="install / list models (fanout models install --profile local)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_models)
    p = sub.add_parser("demo", help="index the bundled sample notes and run a small query batch")
    _common(p, db=False)
    p.add_argument("--db", default=None, help="db folder (default: a fresh temp folder)")
    p.set_defaults(fn=cmd_demo)
    from faces.evaluate import add_eval_args

    p = sub.add_parser("eval", help="run and score the pipeline on a judged benchmark")
    add_eval_args(p)
    _common(p, db=False)
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser("analyze", help="duckdb SQL over an eval run's parquet files")
    p.add_argument("run_dir")
    p.add_argument("--sql", default=None, help="a query; tables: per_query, results, timings, expansions")
    p.set_defaults(fn=cmd_analyze)
    p = sub.add_parser("mcp", help="serve the search tool over MCP (stdio or streamable HTTP)")
    _common(p)
    p.add_argument("--http", default=None, help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
    p.set_defaults(fn=cmd_mcp)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.fn(args) or 0)
    except (FileNotFoundError, ValueError, RuntimeError) as e:  # incl. ModelError, placement errors
        print(f"fanout: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
