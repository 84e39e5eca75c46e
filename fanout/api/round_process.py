"""The worker process of a watcher's rounds (`python -m fanout.api.round_process READ_FD WRITE_FD`, started by
fanout/api/round_worker.py's `RoundWorker`): it opens the collection it is told to, then answers each request
("index", "warm") with "done" and its result, or "error" and the exception, sending its log records and the
first round's progress meanwhile, and asking the parent to embed each batch of chunks ("embed"); it ends at
"stop" or when the parent's pipe closes."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection

import pyarrow as pa

from fanout.api.round_worker import answer


class _Forward(logging.Handler):
    """The worker's log records, sent to the parent (which logs them again)."""

    def __init__(self, send: Callable[[tuple], None]):
        super().__init__()
        self.send = send

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # (the parent is gone: the worker ends at its next read)
            self.send(("log", record.name, record.levelno, self.format(record)))


class LentEmbedder:
    """The worker's embedder: each call's batch is embedded by the parent's, lent per call (one model in memory,
    shared by its searches and the rounds; llama.cpp's weights are repacked into private memory on load, so a
    second copy would cost its full size: docs/performance.md#searches-beside-a-round)."""

    def __init__(self, ask: Callable[[tuple], tuple]):
        self.ask = ask

    def __call__(self, table: pa.Table) -> pa.Table:
        kind, got = self.ask(("embed", table))
        if kind == "error":
            raise got
        return got


def main(read_fd: int, write_fd: int) -> None:
    """The worker's loop: open the collection, then answer requests until "stop" or the parent goes."""
    import signal

    from fanout.api.kb import KnowledgeBase
    from fanout.exec.runner import Runner

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a terminal's Ctrl-C reaches the group: the parent ends it)
    os.dup2(2, 1)  # anything printed goes to stderr (`fanout mcp`'s stdout is its protocol)
    recv, send_conn = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    lock, asking = threading.Lock(), threading.Lock()  # (log records may come from the round's other threads)

    def send(msg: tuple) -> None:
        with lock:
            send_conn.send(msg)

    def ask(msg: tuple) -> tuple:  # (the round's thread is the one reading then: the main loop waits in it)
        with asking:
            send(msg)
            return recv.recv()

    try:
        _, db, collection, cfg, level = recv.recv()
    except EOFError:
        return
    handler = _Forward(send)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    cfg = cfg.replace(runner={"mode": "inproc"})
    runner = Runner(cfg)
    runner.use("embedder", LentEmbedder(ask))
    with runner, KnowledgeBase.attach(db, collection, cfg, runner) as kb:
        while True:
            try:
                request = recv.recv()
            except EOFError:
                return  # the parent went
            if request[0] == "stop":
                return
            try:
                if request[0] == "warm":
                    kb.warm_index()
                    send(("done", None))
                    continue
                _, vault, paths, progress = request
                report = kb.index(vault, paths=paths, progress=(
                    (lambda done, total: send(("progress", done, total))) if progress == "call" else progress))
                kb.wait_ready()  # its version's postings and vectors written (the parent's searches read them)
                send(("done", report))
            except Exception as e:  # noqa: BLE001 - the round's error goes to the parent, the worker stays
                send(answer(e))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
