"""Every error fanout raises on purpose, in one place (base layer: imports nothing of fanout).

Each message says what was given, what is allowed and how to fix it. Subclasses keep the builtin they always
were (a `RequestError` is still a `ValueError`), so existing `except ValueError` code keeps working, and
`except fanout.FanoutError` catches every one of them (the CLI does exactly that). Every class here is exported
by `fanout` and listed in docs/api.md (tests/test_errors.py checks both, and that none is declared elsewhere).
The modules that raise the store's and the config's errors import them from here and keep the old names
(`fanout.config.ConfigError`, `fanout.store.integrity.IndexMissing`, ...), so older imports keep working.
This module imports nothing heavy: the CLI's warm path imports it.
"""

from __future__ import annotations

import re


class FanoutError(Exception):
    """An error fanout raised on purpose; its message names the input, what is allowed and the fix."""


class UserError(FanoutError, ValueError):
    """A mistake in what the user asked for (an argument, a path, a name); the CLI prints the message (no
    traceback) and exits 2."""


class InputMissing(UserError, FileNotFoundError):
    """A file the user named (a query file, a vault) does not exist; still a FileNotFoundError."""


class RequestError(FanoutError, ValueError):
    """A malformed request or query (a 400 from `fanout serve`); the message names the field and what is
    allowed, `field` holds the field's name."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        # the field a message names first (`n`, `mode`, ...) unless given
        self.field = field or (m.group(1) if (m := re.search(r"`(\w+)`", message)) else None)


class FilterError(FanoutError, ValueError):
    """A bad filter value; `field` names it (`filter.tag`) for the row's error."""

    def __init__(self, field: str, msg: str):
        super().__init__(msg)
        self.field = field


class RowError(FanoutError, ValueError):
    """A bad query row (a batch row, a served or MCP query): `field` names the column (`query`,
    `searches[0].query`, ...); the row becomes an error row, the batch goes on."""

    def __init__(self, field: str, msg: str):
        super().__init__(msg)
        self.field = field


class NoteError(FanoutError, ValueError):
    """A note reference that cannot be served; the message names the field and the fix."""


class ToolArgError(NoteError, RequestError):
    """A bad MCP tool argument; the message names the field and the fix, `field` holds the field's name (a
    `RequestError` too: `search`'s arguments are parsed as a request, fanout/api/requests.py)."""


class VaultError(FanoutError, ValueError):
    """The vault path itself is unusable (empty, missing, not a folder)."""


class ConfigError(FanoutError, ValueError):
    """A config value is out of range or of the wrong type (fanout/config; also `fanout.config.ConfigError`)."""


class IndexStateError(FanoutError, ValueError):
    """A manifest, config or index table is damaged or does not match; the message says how to fix it
    (fanout/store/integrity.py; also importable from there)."""


class IndexMissing(IndexStateError, FileNotFoundError):
    """There is no index of that name in that db (yet); the message gives the command that builds it."""


class StorageError(FanoutError, ValueError):
    """A location string that fanout cannot use (unknown scheme, missing bucket, ...) (fanout/store/storage.py)."""


class DiskFull(FanoutError, RuntimeError):
    """No space (or quota) left where fanout writes: one line naming the location and the fix."""


class CollectionBusy(FanoutError, RuntimeError):
    """Another process holds the collection's lock (still a RuntimeError, as it was) (fanout/store/locks.py)."""


class RoundWorkerError(FanoutError, RuntimeError):
    """A watcher's round worker process (fanout/api/round_worker.py) ended before it answered (killed, out of
    memory): its round failed, the next round starts a new worker and resumes the index."""


class BenchNotFoundError(FanoutError, FileNotFoundError):
    """The benchmark folder (`--bench`, $FANOUT_BENCH) cannot be found."""


class PlacementError(FanoutError, RuntimeError):
    """A job's actor pools cannot be placed on the Ray cluster as it is (nothing was started, or a pool timed
    out starting); the message lists the pools and the nodes and says what to change."""


class ModelError(FanoutError, RuntimeError):
    """A model could not be resolved, downloaded, assembled, verified or run, or a served model (an `openai:`
    spec) failed to answer: the message names the backend (`openai:<model>@<host>`), what fanout sent and what
    came back, never a key."""


class BackendError(FanoutError, RuntimeError):
    """The llama.cpp library cannot run here: no ggml CPU variant this CPU can run, a forced one
    ($FANOUT_GGML_CPU) that is missing or unusable, a backend library that did not load."""


class GPUBackendMissing(BackendError):
    """A role asks for GPU offload (`n_gpu_layers != 0`) and no GPU backend is loaded in this process."""
