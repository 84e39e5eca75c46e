"""`--watch` on the command line: `fanout index VAULT --watch`, and the round lines `fanout serve --watch` and
`fanout mcp --watch` print. A thin layer over `KnowledgeBase.watch` (fanout/api/watcher.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from fanout.api import KnowledgeBase, WatchRound


def round_printer(out: IO[str], also: Callable[[WatchRound], object] | None = None
                  ) -> Callable[[WatchRound], None]:
    """An `on_round` hook: each round's line to `out` (and the notes it skipped: all of them in the first round,
    then those among the round's changes), then `also(round)`."""
    from fanout.safe_text import for_terminal

    def show(r: WatchRound) -> None:
        if r.report is not None:
            changed = {path for _, path in r.changes}
            for sk in r.report.skipped:  # a note's name and a parser's message may hold control characters
                if r.number == 1 or sk["path"] in changed:
                    print(for_terminal(f"skipped {sk['path']}: {sk['reason']} ({sk['detail']})"), file=sys.stderr)
        print(for_terminal(r.text()), file=out, flush=True)
        if also is not None:
            also(r)

    return show


def index_watch(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    """`fanout index VAULT --watch`: a first round (with the usual progress), then one round per batch of file
    changes, one line each, until Ctrl-C (exit 0; the round in progress finishes first, a second Ctrl-C leaves
    at once and the next run resumes it)."""
    from fanout.exec.progress import EMBED_STARTING, Progress

    if getattr(args, "rebuild", False):
        from fanout.errors import UserError

        raise UserError("--rebuild and --watch do not go together: run `fanout index VAULT --rebuild` once, then "
                        "`fanout index VAULT --watch`")
    with kb, Progress("embedding", "chunk", starting=EMBED_STARTING) as progress:
        watcher = kb.watch(args.vault, on_round=round_printer(sys.stdout), progress=progress)
        print(f"fanout index: watching {args.vault} (collection {kb.collection}); Ctrl-C stops", file=sys.stderr,
              flush=True)
        try:
            while watcher.running:
                watcher.join(0.5)
        except KeyboardInterrupt:
            print("fanout index: stopping (a round in progress finishes first)", file=sys.stderr, flush=True)
        finally:
            watcher.stop()
    return 0
