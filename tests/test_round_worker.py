"""A watcher's rounds in a worker process (`watch.rounds_in`, "auto": a process under the in-process runner;
fanout/api/round_worker.py): the rounds run there, the searches here serve the version before a round until its
own is swapped in, and a worker that dies or fails costs only its round."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from types import SimpleNamespace

import pytest

import fanout
from fanout.api.round_worker import RoundWorker
from fanout.api.watcher import round_worker
from fanout.config import ConfigError, load_config
from tests.support.vault import write_vault
from tests.support.watch import NOTES, WAIT, fast_cfg, found, indexed, round_after


def _cfg(**kw):
    return fast_cfg(rounds_in="process").replace(**kw) if kw else fast_cfg(rounds_in="process")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_rounds_run_in_one_kept_worker_process_and_its_logs_and_progress_come_back(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fanout")
    vault = write_vault(tmp_path / "vault", NOTES)
    seen: list[tuple[int, int]] = []
    with fanout.open(tmp_path / "db", config=_cfg(index={"stat_racy_s": 0})) as kb:
        w = kb.watch(vault, progress=lambda done, total: seen.append((done, total)))
        assert w.wait(1, WAIT) and w.last.error is None, w.last
        pid = w.worker.pid
        assert pid is not None and pid != os.getpid() and indexed(kb) == set(NOTES)
        assert seen and seen[-1][0] == seen[-1][1] == w.last.report.chunks  # the first round's progress, here
        r = round_after(w, lambda: (vault / "New.md").write_text("# New\n\nA quokka lives here.\n"))
        assert r.report.embedded_notes == 1 and r.report.read_notes == 1 and found(kb, "quokka") == ["New.md"]
        round_after(w, lambda: os.rename(vault / "Garden", vault / "Yard"))
        assert indexed(kb) == {p.replace("Garden/", "Yard/") for p in {*NOTES, "New.md"}}
        assert found(kb, "tulip bulbs") == ["Yard/Tulips.md"]
        assert w.worker.pid == pid and w.worker.started == 1  # one process for every round
        # what only the worker logs (its rounds' query files) is logged here under the same logger
        assert any(rec.name == "fanout.pipelines.query_files" for rec in caplog.records)
        assert w.stop(WAIT)
    assert not _alive(pid)  # stopping the watcher ended its worker


@pytest.mark.slow
def test_searches_here_serve_the_version_before_the_workers_round_until_it_is_swapped_in(tmp_path):
    vault = write_vault(tmp_path / "vault", NOTES)
    cfg = _cfg(index={"stat_racy_s": 0}, fake={"embed_sleep_s": 0.02})  # (a round of 40 notes: ~1 s embedding)
    with fanout.open(tmp_path / "db", config=cfg) as kb:
        w = kb.watch(vault)
        assert w.wait(1, WAIT) and w.warmed.wait(WAIT)
        assert found(kb, "zebra") == []
        seen: list[int] = []
        took: list[float] = []
        n = w.rounds
        for i in range(40):
            (vault / f"z{i}.md").write_text(f"# Z{i}\n\nzebra stripes {i}\n")
        while w.rounds == n:  # the round runs in the worker meanwhile
            t = time.perf_counter()
            seen.append(len(kb.search("zebra", mode="search", n=50)))
            took.append(time.perf_counter() - t)
        assert w.last.error is None and w.last.report.embedded_notes == 40
        assert {f"z{i}.md" for i in range(40)} <= indexed(kb)
        k = len(kb.search("zebra", mode="search", n=50))  # (the full-text lane's candidates: 20 of the 40)
        assert k > 0 and set(seen) <= {0, k} and seen == sorted(seen) and seen[0] == 0  # old notes, then new
        assert max(took) < 5, max(took)  # none waited for the round (it took ~1 s of embedding alone)
        with fanout.open(tmp_path / "db", config=cfg) as fresh:  # the swapped-in version answers as a fresh open
            for mode in ("search", "query", "vsearch"):
                assert list(kb.search("zebra stripes 7", mode=mode)) == list(fresh.search("zebra stripes 7", mode=mode))


@pytest.mark.slow  # (two rounds of embedding; `make test` runs it)
def test_a_killed_worker_fails_only_its_round_and_the_retry_starts_a_new_one(tmp_path):
    vault = write_vault(tmp_path / "vault", NOTES)
    cfg = _cfg(index={"stat_racy_s": 0}, fake={"embed_sleep_s": 0.05})
    with fanout.open(tmp_path / "db", config=cfg) as kb:
        w = kb.watch(vault)
        assert w.wait(1, WAIT) and w.warmed.wait(WAIT)
        pid, n = w.worker.pid, w.rounds
        for i in range(20):
            (vault / f"k{i}.md").write_text(f"# K{i}\n\nkiwi {i}\n")
        deadline = time.monotonic() + WAIT
        while not kb.serves_older([kb.collection]):  # the round has started (its searches held on the old version)
            assert time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(pid, signal.SIGKILL)
        assert w.wait(n + 1, WAIT) and "worker process ended" in (w.last.error or ""), w.last
        assert found(kb, "tulip bulbs") == ["Garden/Tulips.md"]  # searches go on meanwhile
        assert w.wait(n + 2, WAIT) and w.last.error is None, w.last  # retried after watch.retry_s: a new worker
        assert w.worker.started == 2 and w.worker.pid != pid
        assert {f"k{i}.md" for i in range(20)} <= indexed(kb)


@pytest.mark.slow
def test_an_error_in_the_workers_round_comes_back_and_the_round_is_retried(tmp_path):
    from fanout.store.locks import collection_lock

    vault = write_vault(tmp_path / "vault", NOTES)
    with fanout.open(tmp_path / "db", config=_cfg()) as kb:
        w = kb.watch(vault)
        assert w.wait(1, WAIT) and w.last.error is None
        with collection_lock(kb.db, kb.collection, "a test holding the index"):  # the worker's round is refused
            n = w.rounds
            (vault / "Late.md").write_text("# Late\n\nquokka\n")
            assert w.wait(n + 1, WAIT) and "a test holding the index" in (w.last.error or ""), w.last
        assert w.wait(n + 2, WAIT) and w.last.error is None and found(kb, "quokka") == ["Late.md"]
        assert w.worker.started == 1  # an error in its round leaves the worker running


def test_where_rounds_run_follows_watch_rounds_in_and_the_runner():
    def kb(**watch_runner):
        cfg = load_config("fake").replace(**watch_runner)
        return SimpleNamespace(cfg=cfg, db="/nowhere", collection="notes")

    assert isinstance(round_worker(kb()), RoundWorker)  # auto, in-process runner: a worker process
    assert round_worker(kb(watch={"rounds_in": "thread"})) is None
    assert round_worker(kb(runner={"mode": "ray"})) is None  # auto under Ray: the watcher's thread
    assert isinstance(round_worker(kb(runner={"mode": "ray"}, watch={"rounds_in": "process"})), RoundWorker)
    with pytest.raises(ConfigError, match=r"watch\.rounds_in must be auto, process or thread, got 'fork'"):
        load_config("fake").replace(watch={"rounds_in": "fork"})


@pytest.mark.slow
def test_closing_the_knowledge_base_mid_round_ends_the_worker(tmp_path):
    vault = write_vault(tmp_path / "vault", NOTES)
    cfg = _cfg(fake={"embed_sleep_s": 0.02})
    kb = fanout.open(tmp_path / "db", config=cfg)
    w = kb.watch(vault)
    assert w.wait(1, WAIT) and w.warmed.wait(WAIT)
    pid = w.worker.pid
    for i in range(20):
        (vault / f"c{i}.md").write_text(f"# C{i}\n\ncapybara {i}\n")
    deadline = time.monotonic() + WAIT
    while not kb.serves_older([kb.collection]) and time.monotonic() < deadline:
        time.sleep(0.005)
    kb.close()  # the round in progress finishes, then the worker exits
    assert not w.running and not _alive(pid)
    with fanout.open(tmp_path / "db", config=cfg) as again:
        assert len({p for p in indexed(again) if p.startswith("c")}) in (0, 20)  # before or after, never half


def test_a_worker_used_directly_answers_each_call_with_its_own_result_or_error(tmp_path, caplog):
    vault = write_vault(tmp_path / "vault", NOTES)
    cfg = fast_cfg(rounds_in="process")
    w = RoundWorker(str(tmp_path / "db"), "notes", cfg)
    try:
        def bad(done: int, total: int) -> None:
            raise RuntimeError("a caller's progress bug")

        first = w.index(str(vault), progress=bad)  # the callback's failure is logged; the answer is still read
        assert first.notes == 3 and first.embedded_notes == 3
        assert any("progress callback failed" in rec.getMessage() for rec in caplog.records)
        with pytest.raises(fanout.FanoutError, match="does not exist"):  # the worker's error, its own class
            w.index(str(tmp_path / "nowhere"))
        again = w.index(str(vault))  # never a stale answer: this call's own
        assert again.notes == 3 and again.embedded_notes == 0 and w.started == 1
    finally:
        w.close()
    assert w.pid is None


@pytest.mark.model
def test_with_the_local_embedder_a_workers_rounds_store_the_vectors_a_thread_round_does(tmp_path, cfg, runner):
    """The worker's chunks are embedded by the serving process's model (lent per call): the same vectors, bit for
    bit, as an index run in that process, after the first round and after an edit."""
    from fanout.store.db import Collection

    def vectors(db) -> list:
        col = Collection(str(db), "notes", cfg)
        col.refresh()
        t = col.read(col.chunks_name, ["path", "chunk_id", "vector"]).sort_by([("path", "ascending"),
                                                                                ("chunk_id", "ascending")])
        return t.to_pylist()

    vault = write_vault(tmp_path / "vault", NOTES)
    watch_cfg = cfg.replace(watch={"rounds_in": "process", "tick_ms": 50, "step_ms": 200})
    with fanout.api.KnowledgeBase.attach(tmp_path / "worker", "notes", watch_cfg, runner) as kb, \
            fanout.api.KnowledgeBase.attach(tmp_path / "here", "notes", cfg, runner) as here:
        w = kb.watch(vault)
        assert w.wait(1, WAIT) and w.last.error is None, w.last
        here.index(vault)
        assert vectors(tmp_path / "worker") == vectors(tmp_path / "here")
        round_after(w, lambda: (vault / "Bees.md").write_text("# Bees\n\nBees make honey in summer.\n"))
        here.index(vault)
        assert vectors(tmp_path / "worker") == vectors(tmp_path / "here")
        assert kb.search("who makes honey?", mode="vsearch", n=1)[0].path == "Bees.md"
        assert w.stop(WAIT)


def test_a_worker_that_cannot_start_leaves_the_rounds_to_the_watchers_thread(tmp_path, monkeypatch, caplog):
    vault = write_vault(tmp_path / "vault", NOTES)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))  # (the worker's command fails)
    with fanout.open(tmp_path / "db", config=_cfg()) as kb:
        w = kb.watch(vault)
        deadline = time.monotonic() + WAIT
        while w.worker is not None or w.last is None or w.last.error is not None:  # failed rounds, then one here
            assert time.monotonic() < deadline, w.last
            time.sleep(0.05)
        assert w.errors >= 1 and indexed(kb) == set(NOTES)
        assert any("rounds run in the watcher's thread from now on" in rec.getMessage() for rec in caplog.records)
        assert any("set `watch.rounds_in: thread`" in rec.getMessage() for rec in caplog.records)
        round_after(w, lambda: (vault / "New.md").write_text("# New\n\nAn okapi lives here.\n"))
        assert found(kb, "okapi") == ["New.md"]
