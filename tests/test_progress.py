"""Progress reporter: periodic one-line updates with rate and ETA off a TTY, a final line at the end."""

from __future__ import annotations

import io
import time

from fanout.exec.progress import Progress


def test_off_a_tty_it_writes_lines_with_rate_and_eta():
    p = Progress("embedding", "chunk", stream=io.StringIO(), tty=False)
    p.done, p.total = 50, 200
    # 50 chunks in 10 s is 5 chunks/s; 150 left is 30 s
    assert p.line(p.t0 + 10).startswith("embedding: 50/200 chunks (25%), 5.0 chunks/s, ETA 30s, 10s elapsed")
    p.done = 200
    assert p.line(p.t0 + 40) == "embedding: 200/200 chunks (100%), 5.0 chunks/s, 40s elapsed"


def test_before_the_first_unit_the_line_says_what_is_happening_not_a_zero_rate():
    p = Progress("embedding", "chunk", stream=io.StringIO(), tty=False, starting="loading the model")
    p.done, p.total = 0, 180
    assert p.line(p.t0 + 30) == "embedding: 0/180 chunks, loading the model, 30s elapsed"
    p.done = 64  # the first group is written: the rate line takes over
    assert p.line(p.t0 + 32).startswith("embedding: 64/180 chunks (36%), 2.0 chunks/s")


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


# -- batch progress moves per query, on and off a TTY (fake profile) ------------------------------------------


def _fake_batch(tmp_path, step_s: float, on_slice, n: int = 12, explain: bool = False, out_name: str = "a.parquet"):
    import json

    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.config import load_config
    from fanout.exec.runner import Runner
    from tests.support.vault import write_vault

    cfg = load_config("fake").replace(runner={"progress_step_s": step_s})
    with Runner(cfg) as runner:
        if not (tmp_path / "db").exists():
            index_vault(write_vault(tmp_path / "vault"), tmp_path / "db", "t", cfg, runner)
        q = tmp_path / "q.jsonl"
        q.write_text("".join(json.dumps({"id": f"q{i}", "query": f"sync notes {i}"}) + "\n" for i in range(n)))
        s = Searcher(tmp_path / "db", "t", cfg, runner)
        return run_batch(q, tmp_path / out_name, s, SearchOptions(n=3, explain=explain), slice_size=64,
                         on_slice=on_slice)


def test_batch_progress_moves_per_query_not_per_slice(tmp_path):
    calls: list[tuple[int, int]] = []
    st = _fake_batch(tmp_path, 1e-9, lambda d, t: calls.append((d, t)))  # every step is one query
    assert st["queries"] == 12
    assert calls == [(i, 12) for i in range(13)]  # 0, then each query, inside one 64-row slice (one part)
    calls.clear()
    _fake_batch(tmp_path, 1e6, lambda d, t: calls.append((d, t)), out_name="b.parquet")  # fast: one query, then all
    assert calls == [(0, 12), (1, 12), (12, 12)]


def test_batch_progress_on_a_tty_is_a_bar_and_off_it_lines(tmp_path):
    bar = io.StringIO()
    p = Progress("batch", "query", stream=bar, tty=True)
    _fake_batch(tmp_path, 1e-9, p)
    assert p.bar is not None and p.bar.n == 12
    p.close()
    assert "batch" in bar.getvalue()
    lines = io.StringIO()
    p = Progress("batch", "query", stream=lines, tty=False, interval=3600)
    _fake_batch(tmp_path, 1e-9, p, out_name="c.parquet")
    p.close()
    assert lines.getvalue().splitlines()[-1].startswith("batch: 12/12 queries (100%), ")
