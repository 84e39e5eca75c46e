"""What the faces share: defaults, config from parsed arguments, logging set-up. Light to import.

Both `faces/cli.py` and `faces/mcp_server.py` import from here (never from each other); nothing here imports
lancedb, pyarrow or the pipelines at module level, so the warm-path client (`fanout query` talking to
`fanout serve`) starts in milliseconds.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing itself costs the warm client ~5 ms of import
if TYPE_CHECKING:
    from typing import Any

os.environ.setdefault("LANCEDB_LOG", "error")

DEFAULT_DB = os.environ.get("FANOUT_DB", ".fanout/db")
DEFAULT_COLLECTION = "notes"
ENV_NO_SERVER = "FANOUT_NO_SERVER"  # set to 1: never use a running `fanout serve`


class UserError(ValueError):
    """A mistake in what the user asked for; the CLI prints the message (no traceback) and exits 2."""


def config_from_args(args: Any):
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
    import logging  # here, not at the top: the warm `fanout query` client never logs (~20 ms of imports)

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
