"""A watcher's index rounds in a process of their own (`watch.rounds_in`), so searches never share a GIL with one.

A round beside searches in one process (a thread) takes turns with them on the GIL: at 20,000 notes its 0.7-1.3
CPU-s of Python made a search's p99 7-12x its idle p99, against ~1x with the round in another process
(docs/performance.md#searches-beside-a-round). A `RoundWorker` is that process, started once and kept: it opens the
same collection with the same config (a KnowledgeBase of its own: its file-states record and lancedb stay loaded
between rounds, so a round costs what a thread's does) and runs `KnowledgeBase.index` for each round it is sent,
then waits for the round's query-file jobs (its version's postings and vectors), and answers with the
`IndexReport`. The serving process holds its searches on the version before the round (fanout/api/next_version.py)
and swaps the new one in once the worker answered: a search never waits for the worker, and a version is served
only once its files are written.

The worker has no embedder of its own: each batch of its chunks is sent back and embedded by the serving
process's model, lent per call as a round in a thread borrows it (one model in memory: llama.cpp repacks the
weights into private memory on load, so a second copy would cost its whole size; the model's work runs outside the
GIL). The worker is `python -m fanout.api.round_process` (no `__main__` of the caller imported again, as
multiprocessing's spawn would), talking over two pipes of pickled messages: requests in; progress, log records,
embedding batches and the answer out. Its log records are logged again by the parent under the same logger
names. It ends when told to, or when the parent goes (its pipe closes). A worker that died (killed, out of memory)
fails the round it was running (the index resumes it: a killed round leaves the index answering as before or
after) and the next round starts a new one; after two in a row that could not start or ended before answering
anything (`unusable`), the watcher runs its rounds in its own thread (fanout/api/watcher.py).
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fanout.errors import FanoutError, RoundWorkerError

if TYPE_CHECKING:
    import pyarrow as pa

    from fanout.config import Config
    from fanout.exec.runner import Runner
    from fanout.pipelines.index import IndexReport

log = logging.getLogger(__name__)
STOP_WAIT_S = 30.0  # how long `close` waits for a round in progress to finish before the worker is killed


class RoundWorker:
    """The parent's end: `index` runs one round in the worker process (started at first use, again after it
    died), `warm` loads there what a round loads on first use, `close` ends it. One caller at a time (a
    watcher's thread)."""

    def __init__(self, db: str, collection: str, cfg: Config):
        self.db, self.collection, self.cfg = db, collection, cfg
        self._proc: subprocess.Popen | None = None
        self._send: Connection | None = None
        self._recv: Connection | None = None
        self._lock = threading.Lock()
        self._own: Runner | None = None  # the embedder lent when a call lends none (`_embed`)
        self.started = 0  # worker processes started (a restart after one died counts)
        self.unusable = 0  # worker processes in a row that could not start or ended before answering any call
        self._answered = 0  # calls the current process answered

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._drop()
        child_in, to_child = os.pipe()  # (read end, write end: the child reads child_in, writes child_out)
        from_child, child_out = os.pipe()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the folder fanout imports from, in a checkout too
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "fanout.api.round_process", str(child_in), str(child_out)],
                pass_fds=(child_in, child_out), env=env, stdin=subprocess.DEVNULL, close_fds=True)
        except OSError as e:
            os.close(to_child)
            os.close(from_child)
            self.unusable += 1
            raise RoundWorkerError(f"cannot start the index round's worker process ({sys.executable} -m "
                                   f"fanout.api.round_process: {e}); set `watch.rounds_in: thread` to run rounds "
                                   f"in the watcher's thread") from e
        finally:
            os.close(child_in)
            os.close(child_out)
        self._send, self._recv = Connection(to_child, readable=False), Connection(from_child, writable=False)
        self.started += 1
        self._answered = 0
        level = logging.getLogger("fanout").getEffectiveLevel()
        self._send.send(("open", self.db, self.collection, self.cfg, level))

    def _drop(self) -> None:
        for c in (self._send, self._recv):
            if c is not None:
                c.close()
        self._send = self._recv = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
        self._proc = None

    def _call(self, request: tuple, progress: Callable[[int, int], Any] | None = None,
              lend: Runner | None = None) -> Any:
        with self._lock:
            self._start()
            assert self._send is not None and self._recv is not None and self._proc is not None
            try:
                self._send.send(request)
                while True:
                    kind, *rest = self._recv.recv()
                    if kind in ("done", "error"):
                        self._answered += 1
                        self.unusable = 0
                        break
                    if kind == "embed":
                        self._send.send(self._embed(rest[0], lend))
                    elif kind == "log":
                        logging.getLogger(rest[0]).log(rest[1], "%s", rest[2])
                    elif progress is not None:  # "progress"
                        try:
                            progress(*rest)
                        except Exception:  # a caller's callback must not leave the answer unread
                            log.exception("the round's progress callback failed")
            except (EOFError, OSError) as e:
                code = self._proc.wait()
                if self._answered == 0:
                    self.unusable += 1
                self._drop()
                raise RoundWorkerError(f"the index round's worker process ended (exit code {code}) before it "
                                       f"answered; the next round starts a new one and resumes the index") from e
            except BaseException:  # (interrupted here: its answer would be read by the next call)
                self._drop()
                raise
        if kind == "error":
            raise rest[0]
        return rest[0]

    def _embed(self, table: pa.Table, lend: Runner | None) -> tuple:
        """One of the worker's embedding batches, by `lend`'s embedder (lent per call: its searches' calls and
        these take turns), else by one of this object's own."""
        try:
            if lend is None:
                from fanout.exec.runner import Runner

                lend = self._own = self._own or Runner(self.cfg)
            impl = lend.actor("embedder")
            with lend.role_lock("embedder"):
                return ("embedded", impl(table))
        except Exception as e:  # noqa: BLE001 - the worker's round fails with it
            return answer(e)

    def index(self, vault: str, *, paths: list[str] | None = None,
              progress: bool | Callable[[int, int], Any] = False, lend: Runner | None = None) -> IndexReport:
        """`KnowledgeBase.index(vault, paths=paths)` in the worker, once its version's query files are written; its
        chunks embedded here by `lend`'s embedder (a KnowledgeBase's in-process runner), else by one of its own."""
        return self._call(("index", vault, paths, progress if isinstance(progress, bool) else "call"),
                          progress if callable(progress) else None, lend)

    def warm(self) -> None:
        """`KnowledgeBase.warm_index()` in the worker (its process started, lancedb and the embedder loaded)."""
        self._call(("warm",))

    def close(self, timeout: float = STOP_WAIT_S) -> None:
        """End the worker: it finishes a round in progress (at most `timeout` seconds), then exits."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None and self._send is not None:
                try:
                    self._send.send(("stop",))
                    self._proc.wait(timeout)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._drop()
            if self._own is not None:
                self._own.close()
                self._own = None


def answer(e: BaseException) -> tuple:
    """An error for the other process: ("error", the exception) when it pickles back, else a FanoutError with its
    text."""
    try:
        pickle.loads(pickle.dumps(e))
        return ("error", e)
    except Exception:  # noqa: BLE001 - an exception whose arguments do not pickle
        return ("error", FanoutError(f"{type(e).__name__}: {e}"))
