"""A small vault, a fast watch config and the waits the watch tests share."""

from __future__ import annotations

from fanout.config import load_config
from fanout.store.db import Collection

WAIT = 60.0  # seconds: generous on a loaded 2-core box; a passing test waits ~0.5 s per round


NOTES = {
    "Home.md": "# Home\n\nWelcome to the vault.\n",
    "Garden/Roses.md": "# Roses\n\nPrune roses in early spring.\n",
    "Garden/Tulips.md": "# Tulips\n\nPlant tulip bulbs in autumn.\n",
}


def fast_cfg(**watch):
    """The fake profile, its first round at the first 50 ms tick, a failed round retried after 0.2 s; a batch
    closes after 0.2 s of quiet: a test's burst (20 saves, 50 notes written) takes milliseconds, and three runs
    of this file at once on a loaded 2-core box split none, while each round waits 0.3 s less than with 0.5 s."""
    return load_config("fake").replace(watch={"tick_ms": 50, "retry_s": 0.2, "step_ms": 200, "rounds_in": "thread", **watch})


def round_after(w, action):
    """Run `action`, then wait for the next round and return it."""
    n = w.rounds
    action()
    assert w.wait(n + 1, WAIT), f"no round within {WAIT} s"
    assert w.last.error is None, w.last.error
    return w.last


def indexed(kb) -> set[str]:
    col = Collection(kb.db, kb.collection, kb.cfg)
    col.refresh()
    return set(col.table(col.documents_name).to_arrow()["path"].to_pylist())


def found(kb, words: str) -> list[str]:
    return [h.path for h in kb.search(words, mode="search")]



def fanout_cli(*args: str) -> list[str]:
    """The command that runs `fanout ARGS` in a child the test stops with Ctrl-C (SIGINT), with SIGINT handled as
    Python's KeyboardInterrupt and SIGQUIT at its default. A child inherits ignored signals, and this test process
    may be ignoring both for a while (C's `system()` in any of its threads ignores them until it returns); Python
    then installs no KeyboardInterrupt handler and the child would never see the test's Ctrl-C."""
    import sys

    boot = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "signal.signal(signal.SIGQUIT, signal.SIG_DFL); sys.argv = ['fanout', *sys.argv[1:]]; "
            "runpy.run_module('fanout.cli.main', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", boot, *args]
