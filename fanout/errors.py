"""The base of every error fanout raises on purpose (base layer: imports nothing).

Each message says what was given, what is allowed and how to fix it. Subclasses keep the builtin they always
were (a `ConfigError` is still a `ValueError`), so existing `except ValueError` code keeps working, and
`except fanout.FanoutError` catches every one of them (the CLI does exactly that).
"""

from __future__ import annotations

import re


class FanoutError(Exception):
    """An error fanout raised on purpose; its message names the input, what is allowed and the fix."""


class UserError(FanoutError, ValueError):
    """A mistake in what the user asked for (an argument, a path, a name); the CLI prints the message (no
    traceback) and exits 2."""


class PlacementError(FanoutError, RuntimeError):
    """A job's actor pools cannot be placed on the Ray cluster as it is (nothing was started); the message
    lists the pools and the nodes and says what to change."""


class InputMissing(UserError, FileNotFoundError):
    """A file the user named (a query file, a vault) does not exist; still a FileNotFoundError."""


class ModelError(FanoutError, RuntimeError):
    """A model could not be resolved, downloaded, assembled or verified, or a served model (an `openai:` spec)
    failed to answer: the message names the backend (`openai:<model>@<host>`), what fanout sent and what came
    back, never a key."""


class RequestError(FanoutError, ValueError):
    """A malformed request or query (a 400 from `fanout serve`); the message names the field and what is
    allowed, `field` holds the field's name."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        # the field a message names first (`n`, `mode`, ...) unless given
        self.field = field or (m.group(1) if (m := re.search(r"`(\w+)`", message)) else None)
