"""fanout: batch hybrid search over markdown notes (full text + vectors + agent fields, fused by RRF).

Everyday use: `fanout index VAULT`, then `fanout query "..."` (the whole pipeline), `fanout search` (full text
only), `fanout vsearch` (vectors only), `fanout get NOTE`, `fanout status`. Start `fanout serve` once and those
commands answer from a warm process (milliseconds instead of seconds). Batches: `fanout batch FILE --out FILE`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

TYPE_CHECKING = False  # typing and pathlib cost the warm `fanout query` path ~13 ms of imports

from fanout.cli.args import TOOL_COMMANDS, _fmt, filter_arg
from fanout.cli.args import build_parser as _build_parser
from fanout.cli.startup import collections_arg, config_from_args, open_kb, setup_logging
from fanout.errors import UserError

# -- commands ---------------------------------------------------------------------------------------------


def cmd_index(args: argparse.Namespace) -> int:
    from fanout.exec.progress import EMBED_STARTING, Progress

    if getattr(args, "watch", False):
        from fanout.cli.index_watch import index_watch

        return index_watch(open_kb(args), args)
    with open_kb(args) as kb, Progress("embedding", "chunk", starting=EMBED_STARTING) as progress:
        s = kb.index(args.vault, progress=progress, rebuild=getattr(args, "rebuild", False),
                     full_check=getattr(args, "full_check", False))
    from fanout.safe_text import for_terminal

    for sk in s.skipped:  # a note's name and a parser's message may hold control characters
        print(for_terminal(f"skipped {sk['path']}: {sk['reason']} ({sk['detail']})"), file=sys.stderr)
    print(s.text())
    return 3 if s.skipped else 0


def _request(args: argparse.Namespace, mode: str) -> dict:
    req = {"mode": mode, "collections": collections_arg(args.collection), "query": args.text, "n": args.n,
           "min_score": args.min_score, "explain": args.explain, "full": args.full,
           "line_numbers": args.line_numbers, "filter": filter_arg(args)}
    if args.sections is not None:  # left out otherwise: a server of the previous release takes the request
        req["sections"] = args.sections
    if mode == "query":
        req.update(intent=args.intent, short_query=args.short_query, rephrased_query=args.rephrased_query,
                   expected_answer=args.expected_answer, expand=args.expand, rerank=args.rerank)
    return req


def run_request(args: argparse.Namespace, req: dict) -> dict:
    """Ask a running `fanout serve` for this db, else run the pipeline here."""
    from fanout.serve.client import ask_server

    if not args.no_server and not getattr(args, "runner", None) and not getattr(args, "ray_address", None):
        resp = ask_server(args.db, req, args.config)
        if resp is not None:
            return resp
    setup_logging(args.verbose)  # main leaves it to here: the warm path above never logs
    with open_kb(args, req["collections"][0]) as kb:
        return kb.answer(req)


def cmd_search(args: argparse.Namespace) -> int:
    """query / search / vsearch: one query, printed in the chosen format."""
    from fanout.cli.render import render

    resp = run_request(args, _request(args, args.mode))
    resp["min_score"] = args.min_score
    fmt = _fmt(args)
    text = render(resp, fmt, args.snippet_chars, args.line_numbers, args.explain, args.full)
    if fmt == "files0":
        sys.stdout.write(text)
    elif text:
        print(text)
    for e in resp["errors"]:
        print(f"error: {e['field']}: {e['error']}", file=sys.stderr)
    if args.verbose:
        where = f"fanout serve :{resp['served_by']}" if resp.get("served_by") else "in-process"
        if resp.get("answered") == "memory":
            where += " (a repeated request: its answer from memory; timings of the first)"
        print(f"{where}; " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in resp["timings"].items()),
              file=sys.stderr)
        if resp.get("expansion"):  # "cache": a precomputed expansion (`fanout expand`) was used
            print("expansion: " + ", ".join(f"{c} {src}" for c, src in resp["expansion"].items()), file=sys.stderr)
    return 2 if resp["errors"] else 0


def cmd_get(args: argparse.Namespace) -> int:
    from fanout.cli.reading import get_note

    return get_note(args)


def cmd_multi_get(args: argparse.Namespace) -> int:
    from fanout.cli.reading import get_notes

    return get_notes(args)


def cmd_ls(args: argparse.Namespace) -> int:
    from fanout.cli.reading import list_notes

    return list_notes(args)


def cmd_status(args: argparse.Namespace) -> int:
    from fanout.api.catalog import status_text
    from fanout.safe_text import for_terminal

    with open_kb(args) as kb:
        st = kb.status(detail=True)
    print(json.dumps(st, ensure_ascii=False, indent=2) if args.json else for_terminal(status_text(st), keep_lines=True))
    return 0


def cmd_collection(args: argparse.Namespace) -> int:
    from fanout.api.catalog import list_collections, remove_collection
    from fanout.safe_text import for_terminal

    if args.action == "add":
        args.collection = args.name
        return cmd_index(args)
    if args.action == "remove":
        for n in remove_collection(args.db, args.name, config_from_args(args)):
            print(f"removed {n}")
        return 0
    rows = list_collections(args.db, config_from_args(args))
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    elif not rows:
        print(for_terminal(f"no collections in {args.db}; add one with `fanout collection add NAME VAULT --db "
                           f"{args.db}`"))
    for r in [] if args.json else rows:
        print(f"{r['collection']}\t{r['notes']} notes\t{r['chunks']} chunks\t{r['indexed_at']}\t"
              f"{for_terminal(r['vault'])}")
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    """Exit 0 when every row was answered, 3 when some rows are error rows (the rest is in --out)."""
    from fanout.api import KnowledgeBase

    if args.engine is not None:
        raise UserError(f"--engine is gone (given {args.engine!r}): where a batch runs is --runner auto|inproc|ray "
                        "(config runner.mode); on Ray it always runs as one Ray Data Dataset")
    cfg = config_from_args(args)
    if args.slice:
        cfg = cfg.replace(runner={"slice_rows": args.slice})
    with KnowledgeBase(args.db, args.collection, cfg) as kb:
        st = kb.batch(args.file, out=args.out, n=args.n, min_score=args.min_score, expand=args.expand,
                      rerank=args.rerank, filter=filter_arg(args), explain=args.explain, runner=args.runner,
                      sections=args.sections, progress=True).stats
    times = " ".join(f"{k} {v:.2f}s" for k, v in st["timings"].items())
    exp = ", ".join(f"{k} {v}" for k, v in sorted(st["expansion"].items()))
    print(f"{st['queries']} queries ({st['resumed']} resumed), {st['errors']} errors, {st['seconds']:.1f}s "
          f"-> {args.out}\nexpansion: {exp or 'none'} ({st['cached_expansions']} used a cached expansion)"
          + (f"\nstages: {times}" if times else f"\nrunner: {st['runner']}"))
    return 3 if st["errors"] else 0


def cmd_expand(args: argparse.Namespace) -> int:
    """Precompute expansions for a query file into the cache (no retrieval); resumable, streaming."""
    with open_kb(args, args.collection) as kb:
        st = kb.expand(args.file, runner=args.runner, progress=None)
    print(f"{st['queries']} queries in {st['seconds']:.1f}s: {st['expanded']} expanded, {st['cached']} already "
          f"cached, {st['agent']} had agent variants, {st['errors']} bad rows")
    return 3 if st["errors"] else 0


def cmd_optimize(args: argparse.Namespace) -> int:
    from fanout.cli.startup import config_from_args
    from fanout.pipelines.optimize_tables import optimize_tables, optimize_text

    print(optimize_text(optimize_tables(args.db, args.collection, args.keep_days, cfg=config_from_args(args))))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from fanout.models import files as models

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
    from fanout.cli.demo import run_demo

    return run_demo(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from fanout.evaluation.evaluate import main_eval

    return main_eval(args)


def cmd_analyze(args: argparse.Namespace) -> int:
    from fanout.cli.analyze import main_analyze

    return main_analyze(args)


def cmd_gaps(args: argparse.Namespace) -> int:
    """`fanout gaps ANSWERS --db DB -c NAME --out DIR`."""
    from fanout.exec.progress import Progress
    from fanout.gaps.report import make_report, summary_text

    with Progress("gaps: reading answers", "byte") as progress:
        res = make_report(args.answers, args.out, args.db, args.collection, config_from_args(args),
                          previous=args.previous, progress=progress)
    print(summary_text(res, args.out))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from fanout.serve.mcp import main_mcp

    return main_mcp(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from fanout.serve.http import serve

    args.warm = collections_arg(args.collection) if args.collection else []
    return serve(args)


# -- the parser -------------------------------------------------------------------------------------------


COMMANDS = ("index", "query", "search", "vsearch", "get", "multi-get", "status", "ls", "collection", "batch",
            "expand", "optimize", "models", "demo", "eval", "analyze", "gaps", "mcp", "serve")

FNS = {name: globals()["cmd_" + name.replace("-", "_")] for name in COMMANDS if name not in ("query", "vsearch")}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The one parser (fanout/cli/args.py, the tools' subcommands fanout/cli/tool_args.py); `only` builds just
    that command's subparser."""
    if only is None or only in TOOL_COMMANDS:
        from fanout.cli.tool_args import add_tool_commands

        return _build_parser(FNS, __doc__, only, add_tool_commands)
    return _build_parser(FNS, __doc__, only)


EXIT_DISK_FULL = 4  # no space (or quota) left where the command writes


def disk_full_line(e: BaseException, args: argparse.Namespace) -> str:
    """The one line for a full disk: DiskFull's own message, else the locations this command writes."""
    from fanout.store.storage import DiskFull, free_bytes, free_text

    if isinstance(e, DiskFull):
        return str(e)
    where = [w for w in (getattr(e, "filename", None), getattr(args, "out", None), getattr(args, "db", None)) if w]
    where = list(dict.fromkeys(str(w) for w in where))
    full = [w for w in where if (f := free_bytes(w)) is not None and f < 3e6]  # the full ones, if known
    shown = " or ".join(f"{w}{free_text(w)}" for w in full or where) or "the output location"
    rerun = " (finished parts are kept: the same command resumes)" if args.cmd == "batch" else ""
    return (f"no space left on the device while writing {shown}; free space there (or write to another disk) "
            f"and run the same command again{rerun}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
    if args.fn is not cmd_search or args.verbose:  # a search sets it up only when it runs in-process
        setup_logging(getattr(args, "verbose", False))
    try:
        return int(args.fn(args) or 0)
    except BrokenPipeError:  # `fanout ls | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a full disk, whatever raised it, is one line and exit 4
        from fanout.store.storage import is_disk_full

        if is_disk_full(e):
            print(f"fanout: {disk_full_line(e, args)}", file=sys.stderr)
            return EXIT_DISK_FULL
        if isinstance(e, (FileNotFoundError, ValueError, RuntimeError)):  # incl. UserError, ModelError, NoteError
            from fanout.safe_text import for_terminal

            print(for_terminal(f"fanout: {e}", keep_lines=True), file=sys.stderr)
            return 2
        raise


def entry() -> None:
    """The `fanout` command: `main`, the exit handlers (a runner left open closes; logging flushes), then out
    without the interpreter's teardown: with Ray, lancedb and pandas loaded, finalizing their modules took
    0.4-0.6 s of every command's wall, more than a cached `fanout search` takes. An exception leaves the usual
    way, with its traceback."""
    import atexit
    import contextlib

    rc = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(rc)


if __name__ == "__main__":
    entry()
