"""What every command does first: its config from its parsed arguments (`--config`, `--runner`,
`--ray-address`), its collections (`-c a,b`), its logging. Light to import.

The commands of `fanout/cli/main.py` and those whose entry points live with their server (`fanout serve`,
`fanout mcp` in fanout/serve/) import from here; the shared defaults are fanout/defaults.py, the 0600 files
fanout/io/private_files.py. Nothing here imports lancedb, pyarrow or the pipelines at module level, so the
warm-path client (`fanout query` talking to `fanout serve`) starts in milliseconds.
"""

from __future__ import annotations

import os
import sys

from fanout.defaults import DEFAULT_COLLECTION
from fanout.errors import UserError

TYPE_CHECKING = False  # typing itself costs the warm client ~5 ms of import
if TYPE_CHECKING:
    import argparse
    from typing import Any

os.environ.setdefault("LANCEDB_LOG", "error")


def config_from_args(args: argparse.Namespace):
    """The config named by `--config`, with `--runner` / `--ray-address` applied."""
    from fanout.config import load_config

    cfg = load_config(getattr(args, "config", None))
    runner = {}
    if getattr(args, "runner", None):
        runner["mode"] = args.runner
    if getattr(args, "ray_address", None):
        runner["ray_address"] = args.ray_address
    return cfg.replace(runner=runner) if runner else cfg


def collections_arg(value: str | None) -> list[str]:
    """`-c a,b` -> ["a", "b"] (order kept, duplicates dropped)."""
    names = [c.strip() for c in (value or DEFAULT_COLLECTION).split(",") if c.strip()]
    if not names:
        raise UserError(f"--collection {value!r} names no collection; give NAME or NAME1,NAME2")
    return list(dict.fromkeys(names))


def setup_logging(verbose: bool = False) -> None:
    import copy
    import logging  # here, not at the top: the warm `fanout query` client never logs (~20 ms of imports)

    from fanout.safe_text import for_terminal

    class TerminalFormatter(logging.Formatter):
        """Log lines as the terminal may show them: a message (which may name a note, e.g. a watch round's
        changes or its error) with its control characters as `\\xNN`, a traceback with its lines kept."""

        def formatMessage(self, record: logging.LogRecord) -> str:
            shown = copy.copy(record)  # other handlers (a caller's, pytest's) keep the exact message
            shown.message = for_terminal(record.message)
            return super().formatMessage(shown)

        def formatException(self, ei: Any) -> str:
            return for_terminal(super().formatException(ei), keep_lines=True)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TerminalFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])


def open_kb(args: argparse.Namespace, collection: str | None = None):
    """The API object the command works through (fanout.open with the command's db, collection and config)."""
    from fanout.api import KnowledgeBase

    return KnowledgeBase(args.db, collection or one_collection(args), config_from_args(args))


def one_collection(args: argparse.Namespace) -> str:
    names = collections_arg(args.collection)
    if len(names) > 1:
        raise UserError(f"{args.cmd} works on one collection at a time, got {names}; run it once per collection")
    return names[0]


def open_collection(args: argparse.Namespace):
    """The command's one collection, opened at the table versions its manifest pins (what searches are served)."""
    from fanout.store.db import Collection

    col = Collection(args.db, one_collection(args), config_from_args(args))
    col.refresh()
    return col
