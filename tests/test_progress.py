"""Progress reporter: periodic one-line updates with rate and ETA off a TTY, a final line at the end."""

from __future__ import annotations

import io
import time

from faces.progress import Progress


def test_off_a_tty_it_writes_lines_with_rate_and_eta():
    p = Progress("embedding", "chunk", stream=io.StringIO(), tty=False)
    p.done, p.total = 50, 200
    # 50 chunks in 10 s is 5 chunks/s; 150 left is 30 s
    assert p.line(p.t0 + 10).startswith("embedding: 50/200 chunks (25%), 5.0 chunks/s, ETA 30s, 10s elapsed")
    p.done = 200
    assert p.line(p.t0 + 40) == "embedding: 200/200 chunks (100%), 5.0 chunks/s, 40s elapsed"


def test_lines_keep_coming_while_nothing_moves_and_stop_at_close():
    buf = io.StringIO()
    p = Progress("batch", "query", stream=buf, interval=0.05, tty=False)
    p(0, 100)  # a slow first slice: no further call for a while
    time.sleep(0.3)
    p(40, 100)
    p.close()
    lines = buf.getvalue().splitlines()
    assert len(lines) >= 3 and lines[0].startswith("batch: 0/100 queries (0%)")
    assert lines[-1].startswith("batch: 40/100 queries (40%)")
    n = len(lines)
    time.sleep(0.15)
    assert len(buf.getvalue().splitlines()) == n  # the timer is gone


def test_nothing_for_no_work():
    empty = io.StringIO()
    with Progress("index", "chunk", stream=empty, interval=0.01, tty=False):
        pass
    assert empty.getvalue() == ""
