"""The manifest a KnowledgeBase's searches keep serving while its own index round's new version is made ready.

`Collection.refresh` reads the stored manifest at the start of every request, so a search follows a re-index the
moment the round publishes it. A KnowledgeBase that runs a round beside its searches (fanout/api/kb.py) instead
keeps them on the version they pinned until the new one's query files are made and its first search's loading
is done (a search then never waits for a background job), and swaps the new version in at once: around each
of its searches it names, here, the manifest they serve (`serving`); every other reader (the round itself,
another KnowledgeBase, status, a Ray worker) reads the stored manifest as before. A context variable: it holds
for the thread (and context) that set it, only while it is set.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

_SERVED: contextvars.ContextVar[Mapping[tuple[str, str], dict[str, Any]] | None] = \
    contextvars.ContextVar("fanout_served_manifests", default=None)


@contextlib.contextmanager
def serving(manifests: Mapping[tuple[str, str], dict[str, Any]]) -> Iterator[None]:
    """Within the block, `Collection.refresh` of (db, collection) in `manifests` reads that manifest (checked
    when it was stored) instead of the stored one."""
    token = _SERVED.set(dict(manifests) if manifests else None)
    try:
        yield
    finally:
        _SERVED.reset(token)


def served(db: str, collection: str) -> dict[str, Any] | None:
    """The manifest the current context serves for `collection` of `db` (None: read the stored one)."""
    got = _SERVED.get()
    return None if got is None else got.get((db, collection))
