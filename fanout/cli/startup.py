"""What the faces share: defaults, config from parsed arguments, logging set-up. Light to import.

Both `fanout/cli/main.py` and `fanout/serve/mcp.py` import from here (never from each other); nothing here imports
lancedb, pyarrow or the pipelines at module level, so the warm-path client (`fanout query` talking to
`fanout serve`) starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import sys

from fanout.defaults import DEFAULT_COLLECTION
from fanout.errors import UserError

TYPE_CHECKING = False  # typing itself costs the warm client ~5 ms of import
if TYPE_CHECKING:
    import argparse
    from typing import Any

os.environ.setdefault("LANCEDB_LOG", "error")

DEFAULT_DB = os.environ.get("FANOUT_DB", ".fanout/db")

ENV_NO_SERVER = "FANOUT_NO_SERVER"  # set to 1: never use a running `fanout serve`


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


def write_private(path: str, text: str, replace: bool = True) -> bool:
    """Write `text` to `path`, readable by its owner only (0600), atomically.

    The text goes to a fresh temp file next to `path`, created with O_EXCL | O_NOFOLLOW (a file or link
    planted at any name is never written through), then is renamed over `path` (a link there is replaced, not
    followed), or with `replace=False` hard-linked to it, which fails when `path` exists: False then, and
    `path` is left as it was.
    """
    import secrets

    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path, follow_symlinks=False)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def read_private(path: str, what: str) -> str:
    """The text of a secret file that only its owner may read: a regular file (not a link), owned by this
    user, mode 0600 or stricter; anything else is refused with the fix."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise UserError(f"{what} {path!r} cannot be read ({e.strerror}); give a regular file that only you "
                        "can read (chmod 600)") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{what} {path!r} is not a regular file; give a file that holds the token")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise UserError(f"{what} {path!r} belongs to uid {st.st_uid}, not to you; use a file of your own")
        if st.st_mode & 0o077:
            raise UserError(f"{what} {path!r} can be read by others (mode {stat.S_IMODE(st.st_mode):o}); "
                            f"run `chmod 600 {path}`")
        data = f.read(1 << 16)
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise UserError(f"{what} {path!r} is not UTF-8 text") from None
