"""Searches in threads while an index round runs in the same process or in a watcher's worker process (fake
models): none waits for the round's
scan, embedding, writes or its version's query-file jobs (they serve the version before it until its own is ready,
then move to it in one step: fanout/api/next_version.py), and their latency stays near its idle level, whether the
embedder is pure Python or releases the GIL as llama.cpp does."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

import fanout

WORDS = ["sync", "backup", "vault", "graph", "plugin", "canvas", "theme", "search", "links", "notes", "daily",
         "template", "restic", "zfs", "mirror", "snapshot", "router", "garden", "tomato", "ferment", "kvass"]


def _note(rnd: random.Random) -> str:
    return "\n\n".join(f"## {' '.join(rnd.choices(WORDS, k=2))}\n\n{' '.join(rnd.choices(WORDS, k=60))}"
                       for _ in range(3)) + "\n"


def _write(path, text: str, stamp: list[int]) -> None:
    path.write_text(text, encoding="utf-8")
    stamp[0] += 1_000_000_000  # a distinct mtime per write, in the past (never within the racy window)
    os.utime(path, ns=(time.time_ns(), stamp[0]))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _search_in_threads(kb, until: threading.Event, threads: int, rnd: random.Random) -> list[tuple[float, float]]:
    """(start, end) of every search `threads` threads ran until `until` was set."""
    spans: list[tuple[float, float]] = []

    def searching(seed: float) -> None:
        r = random.Random(seed)
        while not until.is_set():
            t = time.perf_counter()
            kb.search(" ".join(r.choices(WORDS, k=2)), mode="search")
            spans.append((t, time.perf_counter()))

    ths = [threading.Thread(target=searching, args=(rnd.random(),)) for _ in range(threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return spans


def _vault(tmp_path, rnd: random.Random, n: int) -> tuple[Path, Path, list[int]]:
    """A vault of `n` random notes (n0.md ...), the db's path beside it, and the mtime stamp `_write` moves on."""
    vault, db = tmp_path / "v", tmp_path / "db"
    vault.mkdir()
    stamp = [time.time_ns() - 10**13]
    for i in range(n):
        _write(vault / f"n{i}.md", _note(rnd), stamp)
    return vault, db, stamp


@pytest.mark.slow
@pytest.mark.parametrize("sleep_s", [0.0, 0.01], ids=["pure-python-embedder", "embedder-releases-the-gil"])
@pytest.mark.parametrize("round_in", ["thread", "worker"])
def test_searches_in_threads_beside_a_round_stay_near_their_idle_latency(tmp_path, fake_cfg, sleep_s, round_in):
    """`round_in` "thread": `kb.index` beside the searches; "worker": a watcher's round, in its worker process
    (fanout/api/round_worker.py), its chunks embedded here."""
    from fanout.api.round_worker import RoundWorker

    rnd = random.Random(7)
    vault, db, stamp = _vault(tmp_path, rnd, 300)
    cfg = fake_cfg.replace(fake={"embed_sleep_s": sleep_s}, index={"stat_racy_s": 0})
    with fanout.open(db, "t", cfg) as kb:
        kb.index(vault)
        worker = RoundWorker(kb.db, kb.collection, kb.cfg) if round_in == "worker" else None
        if worker is not None:
            worker.warm()
        kb.search("sync notes", mode="search")
        stop = threading.Event()
        timer = threading.Timer(1.5, stop.set)
        timer.start()
        idle = [b - a for a, b in _search_in_threads(kb, stop, 3, rnd)]
        for i in range(60):
            _write(vault / f"n{i}.md", _note(rnd), stamp)
        done = threading.Event()
        spans: list[tuple[float, float]] = []
        th = threading.Thread(target=lambda: spans.extend(_search_in_threads(kb, done, 3, rnd)))
        th.start()
        t0 = time.perf_counter()
        try:
            rep = kb.index(vault) if worker is None else kb.index_in(worker, vault)
            assert kb.wait_ready(60)  # the window: the round and its version made ready (its query files' jobs)
            t1 = time.perf_counter()
        finally:
            done.set()
            th.join()
            if worker is not None:
                worker.close()
    assert rep.embedded_notes == 60
    during = [b - a for a, b in spans if t0 <= a <= t1]
    assert len(during) >= 10, f"only {len(during)} searches finished while the round ran ({t1 - t0:.2f} s)"
    # the goal is p99 <= 2x idle (docs/performance.md#index-rounds, measured on a quiet box); a shared
    # test box gets slack: the typical search and the tail stay near their idle latency (on a box at load 10,
    # p99 during / idle came out 0.8-1.0x) and none waits for the round or its version's jobs
    assert _pct(during, 0.5) <= 3 * _pct(idle, 0.5) + 0.02, (sorted(during)[-5:], _pct(idle, 0.5))
    assert _pct(during, 0.99) <= 3 * _pct(idle, 0.99) + 0.05, (sorted(during)[-5:], _pct(idle, 0.99))
    assert max(during) < max(0.5, 10 * _pct(idle, 0.99)), (max(during), _pct(idle, 0.99), t1 - t0)


def test_searches_serve_the_version_before_a_round_until_its_own_is_ready(tmp_path, fake_cfg):
    """A round's new version reaches this KnowledgeBase's searches in one step, once ready: other threads' searches
    see the old notes until then (never a job's wait), the caller's own next search and `wait_ready` the new ones,
    and the answers after the swap are those a fresh KnowledgeBase gives (the swap changes no result)."""
    rnd = random.Random(3)
    vault, db, stamp = _vault(tmp_path, rnd, 40)
    cfg = fake_cfg.replace(index={"stat_racy_s": 0})
    with fanout.open(db, "t", cfg) as kb:
        kb.index(vault)
        assert list(kb.search("zebra", mode="search")) == []
        _write(vault / "zebra.md", "# Zebra\n\nzebra stripes\n", stamp)
        seen: list[int] = []
        done = threading.Event()

        def searching() -> None:
            while not done.is_set():
                seen.append(len(kb.search("zebra", mode="search")))

        th = threading.Thread(target=searching)
        th.start()
        try:
            rep = kb.index(vault)
            assert list(kb.search("zebra", mode="search"))  # the caller's own next search: the new version
            assert kb.wait_ready(60)
            after = len(seen)
            time.sleep(0.2)
        finally:
            done.set()
            th.join()
        assert rep.embedded_notes == 1 and seen and seen[-1] == 1 and all(n == 1 for n in seen[after + 1:])
        assert set(seen) <= {0, 1} and seen == sorted(seen)  # old notes, then new ones: one step, never back
        for mode in ("search", "query", "vsearch"):
            got = list(kb.search("zebra stripes", mode=mode))
            with fanout.open(db, "t", cfg) as fresh:
                assert got == list(fresh.search("zebra stripes", mode=mode)), mode
