"""`KnowledgeBase.watch(vault)`: keep a collection's index current while the notes change (`--watch`).

A `Watcher` is a background thread: the vault's file events (fanout/io/vault_events.py, watchfiles) come in batches
(`watch.step_ms` of quiet closes one, `watch.debounce_ms` caps it), and each batch runs the ordinary incremental
`KnowledgeBase.index` once, given the batch's paths: only those notes (a folder's: all under it) are stat'ed and
read. A whole walk (every file stat'ed, the stat fast path deciding what is read) runs instead on the first
round, after the OS watch (re)started (events may have been missed meanwhile; watchfiles gives Python no
overflow signal), after a failed round, when an event path is not inside the vault, and every
`watch.full_walk_every_s`, so an event the OS dropped is caught within that. Content hashes make unchanged notes cost nothing, so a burst of saves to one note
embeds it once and a `git checkout` of fifty notes is one round that embeds those fifty (a renamed note is
embedded again: its title, part of every chunk's embedded text, comes from its name). A round that fails is logged and retried (`watch.retry_s`); the watcher keeps
going until `stop()`.

Where a round runs (`watch.rounds_in`): under the in-process runner, in a worker process kept for the watcher's
life (fanout/api/round_worker.py, `KnowledgeBase.index_in`), so its Python never takes the searches' GIL; else
in this thread (`KnowledgeBase.index`, which takes the KnowledgeBase's lock only to publish). Either way the
embedder is shared, not copied, and lent per call: the round's embedding batches and a search's query embedding
take turns on the one model in this process (llama.cpp models are not thread-safe; a second copy would double
its memory). A search never sees half a round: the round publishes its tables by writing the manifest last
(fanout/store/manifest.py), and the KnowledgeBase's searches move to the new version once it is ready
(fanout/api/next_version.py; a round counts as done then: `rounds`, `wait`). At its
first idle tick the watcher loads what a writing round loads on first use (`KnowledgeBase.warm_index`), so the
first save's round costs what later ones do (docs/performance.md#watch-mode).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

from fanout.api.types import as_path

if TYPE_CHECKING:
    from fanout.api.round_worker import RoundWorker
    from fanout.config import Config
    from fanout.pipelines.index import IndexReport

log = logging.getLogger(__name__)
WORKER_TRIES = 2  # worker processes in a row that cannot start (or die before answering) before rounds run here


class Indexes(Protocol):
    """What a watcher needs of its KnowledgeBase (a protocol, so this module does not import kb.py, which
    imports it)."""

    cfg: Config
    db: str
    collection: str

    def index(self, vault: str | os.PathLike, *, progress: bool | Callable[[int, int], Any] = False,
              paths: list[str] | None = None) -> IndexReport:
        ...

    def warm_index(self) -> None:
        ...

    def warm(self, collections: list[str] | tuple[str, ...] = ()) -> None:
        ...

    def index_in(self, worker: RoundWorker, vault: str | os.PathLike, *,
                 progress: bool | Callable[[int, int], Any] = False, paths: list[str] | None = None) -> IndexReport:
        ...

    def wait_ready(self, timeout: float | None = None) -> bool:
        ...


@dataclass(frozen=True)
class WatchRound:
    """One index round of a `Watcher`: which events started it, what the index run did (or why it failed)."""

    number: int  # 1-based
    changes: tuple[tuple[str, str], ...]  # (added|modified|deleted, vault-relative path); () for the first round
    report: IndexReport | None  # None when the round failed
    error: str | None  # the failure, as one line
    started: float  # time.time() when the index run began
    seconds: float  # how long the index run took

    def text(self) -> str:
        """One line: when, what changed, and the index run's line (or the error)."""
        when = time.strftime("%H:%M:%S", time.localtime(self.started))
        if not self.changes:
            what = "first round"
        else:
            names = ", ".join(f"{kind} {path}" for kind, path in self.changes[:3])
            more = f" and {len(self.changes) - 3} more" if len(self.changes) > 3 else ""
            what = f"{len(self.changes)} change{'s' if len(self.changes) != 1 else ''} ({names}{more})"
        outcome = self.report.text() if self.report is not None else f"failed: {self.error}"
        return f"[{when}] watch round {self.number}, {what}: {outcome}"


class Watcher:
    """Keeps `kb`'s collection current with `vault`; built and started by `KnowledgeBase.watch`.

    `stop()` (or the end of a `with` block) ends it: the round in progress finishes first (a killed round would
    resume anyway). `rounds` counts the rounds done, `last` is the latest `WatchRound`, `wait(n, timeout)`
    blocks until `n` rounds are done. `on_round` is called with each `WatchRound` from the watcher's thread."""

    def __init__(self, kb: Indexes, vault: str | os.PathLike, *, initial: bool = True,
                 on_round: Callable[[WatchRound], Any] | None = None,
                 progress: bool | Callable[[int, int], Any] = False):
        from fanout.io.vault_events import VaultEvents

        if on_round is not None and not callable(on_round):
            from fanout.errors import UserError

            raise UserError(f"`on_round` must be a callable taking a WatchRound, got {type(on_round).__name__}")
        self.kb, self.vault = kb, as_path(vault, "vault")
        self.events = VaultEvents(self.vault)  # a missing or bad vault is refused here, not in the thread
        self.cfg = kb.cfg.watch
        self.initial, self.on_round, self.progress = initial, on_round, progress
        self.rounds = 0
        self.errors = 0
        self.last: WatchRound | None = None
        self.walked: float | None = None  # time.monotonic() of the last whole walk; None: the next round is one
        self.warmed = threading.Event()  # set once what a round loads on first use is loaded (`_warm`)
        self.worker = round_worker(kb)  # the process its rounds run in (None: this watcher's thread)
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="fanout-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> bool:
        """Stop watching; waits for a round in progress (at most `timeout` seconds). True when stopped."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self.running

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the watcher's thread to end (after `stop()`, or a failure it could not survive)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def wait(self, rounds: int, timeout: float) -> bool:
        """Block until at least `rounds` rounds are done (True) or `timeout` seconds passed (False)."""
        with self._done:
            return self._done.wait_for(lambda: self.rounds >= rounds, timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Watcher(vault={self.vault!r}, rounds={self.rounds}, running={self.running})"

    # -- the thread ---------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._rounds()
        finally:
            if self.worker is not None:
                self.worker.close()

    def _rounds(self) -> None:
        from fanout.io.vault_events import batches

        due = 0.0 if self.initial else None  # monotonic time a round is owed by (first round, a retry)
        pending: set[tuple[str, str]] = set()  # changes of failed rounds, shown again in the retry's line
        while not self._stop.is_set():
            try:
                for changes in batches(self.events, self._stop, step_ms=self.cfg.step_ms,
                                       debounce_ms=self.cfg.debounce_ms, tick_ms=self.cfg.tick_ms):
                    if not changes and (due is None or time.monotonic() < due):
                        if not self.warmed.is_set():
                            self._warm()
                        continue  # an idle tick
                    pending.update(changes)
                    if self._round(sorted(pending, key=lambda x: (x[1], x[0]))):
                        pending, due = set(), None
                    else:
                        due = time.monotonic() + self.cfg.retry_s
            except Exception as e:  # noqa: BLE001 - the file watch itself failed (the vault went away, a limit)
                log.error("watching %s failed (%s: %s); trying again in %g s", self.vault, type(e).__name__, e,
                          self.cfg.retry_s)
                due, self.walked = 0.0, None
                self._stop.wait(self.cfg.retry_s)

    def _warm(self) -> None:
        """At the first idle tick (after the first round, if any): load what a round with something to write
        loads on first use (lancedb, the embedder, its tokenizer), so the first save's round does not pay it
        (1-5 s on 2 cores, lancedb's import alone; docs/performance.md#watch-mode). Events meanwhile wait."""
        try:
            if self.worker is not None:
                self.worker.warm()  # (the worker's process started, what its rounds load loaded there)
                self.kb.warm()  # the embedder it borrows, here
            else:
                self.kb.warm_index()
        except Exception as e:  # noqa: BLE001 - the round that needs it loads it again, and says why it fails
            log.warning("watch: loading ahead what a round needs failed (%s: %s)", type(e).__name__, e)
        self.warmed.set()

    def _paths(self, changes: list[tuple[str, str]]) -> list[str] | None:
        """The paths this round reads (its events'), or None for a whole walk (see the module's docstring)."""
        if self.events.rescan or self.walked is None or not changes or \
                time.monotonic() - self.walked >= self.cfg.full_walk_every_s:
            return None
        if any(kind not in ("added", "modified", "deleted") or rel in (".", "") or os.path.isabs(rel)
               for kind, rel in changes):
            return None  # (the vault folder replaced, or a path watchfiles gave outside it)
        # a file link's note changes with its target, whose event names only the target: links are always read
        return sorted({rel for _, rel in changes} | self.events.links)

    def _round(self, changes: list[tuple[str, str]]) -> bool:
        started, t0 = time.time(), time.perf_counter()
        report, error, t1 = None, None, None
        paths = self._paths(changes)
        self.events.rescan = False
        try:
            progress = self.progress if self.rounds == 0 else False
            report = self.kb.index(self.vault, progress=progress, paths=paths) if self.worker is None else \
                self.kb.index_in(self.worker, self.vault, progress=progress, paths=paths)
            t1 = time.perf_counter()
            self.kb.wait_ready()  # its version made ready for the searches (a round counts once it is searchable)
            if paths is None:
                self.walked = time.monotonic()
        except Exception as e:  # noqa: BLE001 - logged; the watcher keeps going and retries
            error = f"{type(e).__name__}: {e}".splitlines()[0][:500]
        try:
            # the ignore rules may have changed, and the folders that hold notes (a whole walk: all of them)
            self.events.reload(None if paths is None or report is None else [rel for _, rel in changes])
        except Exception as e:  # noqa: BLE001 - the vault is gone: the next round says so
            log.warning("watch: cannot re-read %s (%s)", self.vault, e)
        r = WatchRound(number=self.rounds + 1, changes=tuple(changes), report=report, error=error,
                       started=started, seconds=(t1 or time.perf_counter()) - t0)
        if error is not None:
            self.errors += 1
            self.walked = None  # its retry walks the whole vault
            if self.worker is not None and self.worker.unusable >= WORKER_TRIES:
                log.warning("watch: the round worker process could not start or ended before answering, %d "
                            "times in a row; rounds run in the watcher's thread from now on (watch.rounds_in: "
                            "thread says so ahead)", self.worker.unusable)
                self.worker.close()
                self.worker = None
            log.error("%s; retrying in %g s (or at the next change)", r.text(), self.cfg.retry_s)
        else:
            log.info("%s", r.text())
        if self.on_round is not None:  # before the round counts as done: `wait` returns after the hook ran
            try:
                self.on_round(r)
            except Exception:  # a caller's hook must not end the watcher
                log.exception("watch: on_round failed")
        with self._done:
            self.rounds, self.last = r.number, r
            self._done.notify_all()
        return error is None


def round_worker(kb: Indexes) -> RoundWorker | None:
    """The process a watcher of `kb` runs its rounds in (`watch.rounds_in`; "auto": one when the in-process runner
    would run them on a POSIX system, the Ray runner's rounds stay in the watcher's thread), or None."""
    from fanout.exec.runner_mode import job_mode

    how = kb.cfg.watch.rounds_in
    if how == "thread" or (how == "auto" and (job_mode(kb.cfg, rows=0) != "inproc" or os.name != "posix")):
        return None  # (the worker's pipes are POSIX file descriptors)
    from fanout.api.round_worker import RoundWorker

    return RoundWorker(kb.db, kb.collection, kb.cfg)
