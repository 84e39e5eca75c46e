"""Files only their owner may read (0600): the server's port file with its token, the MCP bearer token.
Written atomically without following a planted link (`write_private`), read only when private (`read_private`).
Light to import (the standard library and fanout.errors): `fanout serve` and `fanout mcp` use it at start.
"""

from __future__ import annotations

import contextlib
import os

from fanout.errors import UserError


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
