"""Progress reporter: one-line updates with rate and ETA off a TTY, a final line at the end."""

from __future__ import annotations

import io

from faces.progress import Progress


def test_off_a_tty_it_writes_lines_with_rate_and_eta():
    buf = io.StringIO()
    p = Progress("embedding", "chunk", stream=buf, interval=0.0, tty=False)
    p.t0 -= 10  # pretend 10 s passed: 50 chunks in 10 s is 5 chunks/s, 150 left is 30 s
    p(50, 200)
    p.close()
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("embedding: 50/200 chunks (25%), 5.0 chunks/s, ETA 30s")
    assert lines[-1].startswith("embedding: 50/200 chunks (25%)")


def test_quiet_between_intervals_and_nothing_for_no_work():
    buf = io.StringIO()
    p = Progress("batch", "query", stream=buf, interval=3600, tty=False)
    for i in range(1, 100):
        p(i, 100)
    assert buf.getvalue() == ""
    p(100, 100)
    p.close()
    assert buf.getvalue().splitlines() == [buf.getvalue().splitlines()[0]]
    assert buf.getvalue().startswith("batch: 100/100 queries (100%)")
    empty = io.StringIO()
    with Progress("index", "chunk", stream=empty, interval=0, tty=False):
        pass
    assert empty.getvalue() == ""
