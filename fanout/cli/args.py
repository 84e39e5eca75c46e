"""fanout's command line: the argument types, the shared flags and the one parser (fanout/cli/main.py runs it);
the subcommands of the tools around search (maintenance, the other faces) are fanout/cli/tool_args.py's.

Kept apart from the commands so that each half reads on its own; `build_parser(only=...)` still builds only
the command being run (the warm `fanout query` path).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

TYPE_CHECKING = False  # typing costs the warm `fanout query` path imports
if TYPE_CHECKING:
    from collections.abc import Callable

from fanout.defaults import DEFAULT_COLLECTION, DEFAULT_DB

# -- argument types: reject nonsense at parse time with what is allowed ------------------------------------


MAX_INT = 2**31 - 1  # the largest count a flag takes (Lance and Arrow take 32/64-bit limits, not any int)


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text[:40]!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    if v > MAX_INT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_INT}, got {text[:40]}")
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
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]  # None: caught
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


def add_command(sub, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description or help, formatter_class=Formatter)


def db_flags(p: argparse.ArgumentParser, collection: bool = True, many: bool = False) -> None:
    p.add_argument("--db", default=DEFAULT_DB, help="index folder or LanceDB URI: a path, file://, s3://, gs://, az:// (env FANOUT_DB)")
    if collection:
        p.add_argument("-c", "--collection", default=DEFAULT_COLLECTION,
                       help="collection name" + ("; a comma list searches several, merged by score" if many else ""))


def config_flags(p: argparse.ArgumentParser, runner: bool = True) -> None:
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
    p.add_argument("--sections", type=positive_int, default=None, metavar="N",
                   help="add each page's N best sections: heading, file lines, score, snippet and a ref that "
                        "`fanout get` reads back (at most retrieve.max_sections; pages ranked as without)")
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
    g.add_argument("--files", action="store_true", help="print page paths only, one per line (control "
                   "characters in a name shown as \\xNN)")
    # no `-0` here: a digit option makes argparse read `-n -1` as an option, not a bad number (`ls -0` has it)
    p.add_argument("--null", action="store_true", help="with --files (or alone): the paths exact, each "
                   "ended by NUL instead of a newline (like find -print0; for xargs -0)")
    p.add_argument("--full", action="store_true", help="print each page's whole best section, not a snippet")
    p.add_argument("--line-numbers", action="store_true", help="show path:LINE where each snippet starts")
    p.add_argument("--snippet-chars", type=positive_int, default=160, help="snippet length in characters "
                   "(text and markdown output; the pipeline keeps up to 300, use --full for more)")
    p.add_argument("--no-server", action="store_true",
                   help="search in this process even when `fanout serve` runs (env FANOUT_NO_SERVER=1)")


def _fmt(args: argparse.Namespace) -> str:
    if getattr(args, "null", False):
        if other := next((f for f in ("json", "csv", "md") if getattr(args, f, False)), None):
            from fanout.errors import UserError

            raise UserError(f"--null prints paths only; it does not go with --{other}: drop one of them")
        return "files0"
    return next((f for f in ("json", "csv", "md", "files") if getattr(args, f, False)), "text")


# the commands fanout/cli/tool_args.py adds (`add_tools`): fanout/cli/main.py imports it only for one of these, or
# for the whole parser, so the warm `fanout query` path never does
TOOL_COMMANDS = ("optimize", "models", "demo", "eval", "analyze", "gaps", "mcp", "serve")


def build_parser(fns: dict[str, Callable[[argparse.Namespace], int]], doc: str | None, only: str | None = None,
                 add_tools: Callable[..., None] | None = None) -> argparse.ArgumentParser:
    """The one parser; `fns` maps each command to its function. `only` builds just that command's subparser (what `main` does for a known command:
    the warm `fanout query` path then skips the other commands' set-up and imports, ~30-45 ms)."""
    def want(name: str) -> bool:
        return only is None or name == only

    ap = argparse.ArgumentParser(prog="fanout", description=doc, formatter_class=Formatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    if want("index"):
        p = add_command(sub, "index", "index (or incrementally update) a markdown vault")
        p.add_argument("vault", help="the folder that holds the notes")
        p.add_argument("--rebuild", action="store_true",
                       help="drop the collection's tables and index from scratch (repairs a damaged index)")
        p.add_argument("--full-check", action="store_true",
                       help="read and hash every note and check every stored vector, instead of reading only the "
                       "notes whose size, mtime, inode or ctime changed since the last run")
        p.add_argument("--watch", action="store_true",
                       help="then keep watching VAULT: each batch of file changes runs one incremental index "
                       "round (config `watch:`) until Ctrl-C")
        db_flags(p)
        config_flags(p)
        p.set_defaults(fn=fns["index"])

    for mode, help_ in (("query", "search one query with the whole pipeline (agent fields, expansion, rerank)"),
                        ("search", "full-text (BM25) search only: no model is loaded"),
                        ("vsearch", "vector search only (the embedder, no expansion or rerank)")):
        if not want(mode):
            continue
        p = add_command(sub, mode, help_)
        p.add_argument("text", help="the question")
        if mode == "query":
            p.add_argument("--intent", help="what the user is trying to do (context for expander and reranker)")
            p.add_argument("--short-query", help="agent field: the feature's name (searched by full text)")
            p.add_argument("--rephrased-query", help="agent field: the question in other words (vectors)")
            p.add_argument("--expected-answer", help="agent field: a sentence that could stand in the note")
        db_flags(p, many=True)
        config_flags(p)
        _ranking(p, model_flags=mode == "query")
        _filters(p)
        _output(p)
        p.set_defaults(fn=fns["search"], mode=mode)

    if want("get"):
        p = add_command(sub, "get", "print a note or one section, by path, title, alias or Note#Heading",
                    "print a note or one section: REF is a path relative to the vault (.md optional), a title or an "
                    "alias, optionally with #Heading and :LINE or :FROM-TO (file line numbers).\n"
                    "  fanout get 'Sync/Sync your notes#Version history'\n  fanout get Sync/Sync.md:10 -l 5")
        p.add_argument("ref", help="Note, Note#Heading, Note:LINE or Note:FROM-TO")
        p.add_argument("-l", "--lines", type=positive_int, default=None, help="at most this many lines (default: all)")
        p.add_argument("--line-numbers", action="store_true", help="prefix each line with its file line number")
        p.add_argument("--json", action="store_true", help="print JSON (path, title, heading, lang, text)")
        db_flags(p)
        config_flags(p, runner=False)
        p.set_defaults(fn=fns["get"])

    if want("multi-get"):
        p = add_command(sub, "multi-get", "print several notes: a glob over indexed paths or a comma list",
                    "print several notes: PATTERN is a glob over the indexed paths ('Plugins/*.md') or a comma list "
                    "of references (paths, titles, aliases).")
        p.add_argument("pattern", help="glob ('Plugins/*') or comma list ('Note A,Folder/Note B.md')")
        p.add_argument("-l", "--lines", type=positive_int, default=None, help="at most this many lines per note")
        p.add_argument("--max-bytes", type=positive_int, default=100_000, help="skip notes larger than this")
        p.add_argument("--line-numbers", action="store_true", help="prefix each line with its file line number")
        p.add_argument("--json", action="store_true", help="print JSON")
        db_flags(p)
        config_flags(p, runner=False)
        p.set_defaults(fn=fns["multi-get"])

    if want("status"):
        p = add_command(sub, "status", "an index's collection, vault, notes, chunks, languages, models, tables, caches")
        db_flags(p)
        p.add_argument("--json", action="store_true", help="print JSON")
        config_flags(p, runner=False)
        p.set_defaults(fn=fns["status"])

    if want("ls"):
        p = add_command(sub, "ls", "list the notes of a collection, optionally under a path prefix")
        p.add_argument("prefix", nargs="?", default="", help="path prefix, e.g. Plugins/ (default: all)")
        db_flags(p)
        g = p.add_mutually_exclusive_group()
        g.add_argument("--json", action="store_true", help="print JSON")
        g.add_argument("-0", "--null", action="store_true", help="print the paths only, exact, each ended by "
                       "NUL (like find -print0; for xargs -0)")
        config_flags(p, runner=False)
        p.set_defaults(fn=fns["ls"])

    if want("collection"):
        p = add_command(sub, "collection", "add (index), list or remove collections of a db folder")
        csub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        c = add_command(csub, "add", "index VAULT as collection NAME (again: update it)")
        c.add_argument("name", help="collection name")
        c.add_argument("vault", help="the folder that holds the notes")
        db_flags(c, collection=False)
        config_flags(c)
        c = add_command(csub, "list", "list the collections with their vault, notes and index time")
        db_flags(c, collection=False)
        config_flags(c, runner=False)  # --config: its storage section reaches an object-store db
        c.add_argument("--json", action="store_true", help="print JSON")
        c = add_command(csub, "remove", "drop a collection's tables, caches and manifest (the vault is not touched)")
        c.add_argument("name", help="collection name")
        db_flags(c, collection=False)
        config_flags(c, runner=False)
        p.set_defaults(fn=fns["collection"])

    if want("batch"):
        p = add_command(sub, "batch", "answer a query file (JSONL/parquet/CSV) into --out; resumable")
        p.add_argument("file", help="query rows: {id, query, short_query, rephrased_query, expected_answer, intent, filter}")
        p.add_argument("--out", required=True, help="results file: .parquet, .jsonl or .csv")
        p.add_argument("--slice", type=positive_int, default=None,
                       help="queries per in-process resumable part (default: config's runner.slice_rows)")
        p.add_argument("--engine", default=None, help=argparse.SUPPRESS)  # retired: an error naming --runner
        db_flags(p)
        config_flags(p)
        _ranking(p, explain=False)
        p.add_argument("--explain", action="store_true", help="add columns: the query text, the probe decision "
                       "and every list that found each page (README: batch output)")
        _filters(p)
        p.set_defaults(fn=fns["batch"])

    if want("expand"):
        p = add_command(sub, "expand", "precompute expansions of a query file into the cache")
        p.add_argument("file", help="query rows (JSONL/parquet/CSV)")
        db_flags(p)
        config_flags(p)
        p.set_defaults(fn=fns["expand"])

    if add_tools is not None:  # the other tools' subcommands (fanout/cli/tool_args.py, given by fanout/cli/main.py)
        add_tools(sub, fns, want)
    return ap
