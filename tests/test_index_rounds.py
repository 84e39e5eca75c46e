"""Incremental index rounds against a rebuild (fake models): after any sequence of adds, edits, renames, deletes and
folder moves the updated index answers every query as a full rebuild of the same vault does; a round killed at
any step leaves the index answering as before or after it, and the next round completes it; searches go on while
a round runs."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time

import numpy as np
import pytest
from fanout.actors.fake import hashed_vector
from fanout.pipelines.index import index_vault

import fanout
from fanout.store.db import Collection, content_key, fts_columns

WORDS = ["sync", "backup", "vault", "graph", "plugin", "canvas", "theme", "search", "links", "notes", "daily",
         "template", "restic", "zfs", "mirror", "snapshot", "router", "garden", "tomato", "ferment", "kvass",
         "sourdough", "camera", "media", "server"]
QUERIES = ["sync notes", "backup restic snapshot", "garden tomato", "graph links canvas", "theme plugin",
           "router media server", "ferment kvass sourdough", "daily template notes", "mirror zfs"]


@pytest.fixture(scope="module")
def icfg(fake_cfg):
    # a record is trusted at once (every test edit also moves the mtime to a value of its own); Lance's own
    # full-text index is rebuilt only past a quarter of the rows, so most rounds leave it older than the rows
    return fake_cfg.replace(index={"stat_racy_s": 0, "fts_rebuild_share": 0.25, "compact_fragments": 6})


def _text(rnd: random.Random) -> str:
    paras = ["## " + " ".join(rnd.choices(WORDS, k=2)) + "\n\n" + " ".join(rnd.choices(WORDS, k=rnd.randint(3, 40)))
             for _ in range(rnd.randint(1, 3))]
    return f"# {' '.join(rnd.choices(WORDS, k=2))}\n\n" + "\n\n".join(paras) + "\n"


def _write(p, text: str, stamp: list[int]) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    stamp[0] += 1_000_000_000  # a distinct mtime per write, in the past (never within the racy window)
    os.utime(p, ns=(time.time_ns(), stamp[0]))


def _step(vault, rnd: random.Random, stamp: list[int], touched: list | None = None,
          ops: tuple[str, ...] = ("add", "edit", "edit", "rename", "delete", "move_folder")) -> str:
    """One random change of the vault; the paths it changed are appended to `touched` (a watcher's events)."""
    touched = [] if touched is None else touched
    notes = sorted(vault.rglob("*.md"))
    op = rnd.choice(ops) if notes else "add"
    if op == "add" or (op in ("delete", "rename") and len(notes) < 3):
        p = vault / rnd.choice(["", "a", "b/c"]) / f"n{rnd.randrange(10**6)}.md"
        new_dirs = [d for d in [p.parent, p.parent.parent] if d != vault and not d.exists()]
        _write(p, _text(rnd), stamp)
        touched.extend(new_dirs[-1:] or [p])  # a folder made with its note: one event, for the folder
        return "add"
    p = rnd.choice(notes)
    if op == "edit":
        _write(p, _text(rnd), stamp)
        touched.append(p)
    elif op == "rename":
        q = p.with_name(f"r{rnd.randrange(10**6)}.md")
        p.rename(q)
        touched += [p, q]
    elif op == "delete":
        p.unlink()
        touched.append(p)
    else:
        folders = sorted({q.parent for q in notes if q.parent != vault})
        if not folders:
            return _step(vault, rnd, stamp, touched, ops)
        src = rnd.choice(folders)
        if op == "delete_folder":
            shutil.rmtree(src)
            touched.append(src)
            return op
        dst = vault / f"moved{rnd.randrange(10**6)}"
        shutil.move(str(src), str(dst))
        touched += [src, dst]
    return op


def answers(db, cfg) -> tuple[list, list]:
    """Every query's full-text list (chunk id, score: bit for bit) and vector list (chunk id, distance rounded to
    1e-5: products of other shapes round differently), each sorted, over every matching chunk (k above the
    index size, so ties never cut a list)."""
    col = Collection(str(db), "t", cfg)
    col.refresh()
    cols = fts_columns(cfg.index.languages)
    fts = col.fts_search_many(QUERIES, cols, [1.0] * len(cols), 10_000, ["path", "chunk_id"])
    got_fts = [sorted(zip(t["chunk_id"].to_pylist(), t["_score"].to_pylist())) for t in fts]
    qv = np.stack([hashed_vector(q, cfg.fake.dim) for q in QUERIES])
    v = col.vector_search_many(qv, 10_000, ["chunk_id", "_distance"])
    got_vec = [sorted((c, round(float(d), 5)) for c, d, i in zip(v["chunk_id"].to_pylist(), v["_distance"].to_pylist(),
                                                                 v["query_index"].to_pylist()) if i == q)
               for q in range(len(QUERIES))]
    return got_fts, got_vec


def _rebuilt(vault, tmp_path, cfg, runner, n: int):
    db = tmp_path / f"rebuild{n}"
    shutil.rmtree(db, ignore_errors=True)
    index_vault(vault, db, "t", cfg, runner, rebuild=True)
    return answers(db, cfg)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.slow
def test_random_changes_answer_as_a_rebuild(tmp_path, icfg, fake_runner, seed):
    rnd = random.Random(seed)
    vault, db = tmp_path / "v", tmp_path / "db"
    stamp = [time.time_ns() - 10**13]
    for _ in range(8):
        _write(vault / rnd.choice(["", "a", "b/c"]) / f"n{rnd.randrange(10**6)}.md", _text(rnd), stamp)
    index_vault(vault, db, "t", icfg, fake_runner)
    ops = []
    for i in range(10):
        for _ in range(rnd.randint(1, 3)):
            ops.append(_step(vault, rnd, stamp))
        index_vault(vault, db, "t", icfg, fake_runner)
        assert answers(db, icfg) == _rebuilt(vault, tmp_path, icfg, fake_runner, i), (i, ops)
        col = Collection(str(db), "t", icfg)
        assert col.read_manifest()["content"] == content_key(col), ops
    assert {"edit", "add"} <= set(ops)
    # `fanout optimize` (compaction, Lance's own incremental index update) answers as the rebuild too
    from fanout.pipelines.optimize_tables import optimize_tables

    optimize_tables(db, "t", keep_days=0, cfg=icfg)
    assert answers(db, icfg) == _rebuilt(vault, tmp_path, icfg, fake_runner, 99)


@pytest.mark.parametrize(("seed", "share"), [(3, 0.02), (4, 0.9)])
def test_rounds_given_the_changed_paths_answer_as_a_rebuild(tmp_path, icfg, fake_runner, seed, share, monkeypatch):
    """A watch round's index run reads only the paths its events name (`paths`); the answers are a rebuild's.
    `index.query_files_share` 0.9: most rounds keep the query files of an older version (their postings and
    vectors in memory); the answers are a rebuild's in the round's process and in another one (the older files
    brought up to date)."""
    from fanout.store import exact_vectors, fts, fts_postings, version_files

    icfg = icfg.replace(index={"query_files_share": share})
    rnd = random.Random(seed)
    vault, db = tmp_path / "v", tmp_path / "db"
    stamp = [time.time_ns() - 10**13]
    for _ in range(8):
        _write(vault / rnd.choice(["", "a", "b/c"]) / f"n{rnd.randrange(10**6)}.md", _text(rnd), stamp)
    index_vault(vault, db, "t", icfg, fake_runner)
    ops = []
    for i in range(8):
        touched: list = []
        for _ in range(rnd.randint(1, 3)):
            ops.append(_step(vault, rnd, stamp, touched, ("add", "add", "edit", "rename", "delete", "move_folder",
                                                         "delete_folder")))
        given = [str(p) if rnd.random() < 0.5 else os.path.relpath(p, vault) for p in touched]
        rep = index_vault(vault, db, "t", icfg, fake_runner, paths=given)
        assert rep.read_notes <= sum(len(list(p.rglob("*.md"))) if p.is_dir() else 1 for p in touched), ops
        want = _rebuilt(vault, tmp_path, icfg, fake_runner, i)
        assert answers(db, icfg) == want, (i, ops)
        version_files.wait()
        monkeypatch.setattr(fts, "_SHARED", type(fts._SHARED)())  # another process's state: none
        monkeypatch.setattr(fts_postings, "_FRESH", {})
        monkeypatch.setattr(exact_vectors, "_CACHE", type(exact_vectors._CACHE)())
        assert answers(db, icfg) == want, (i, ops)
        col = Collection(str(db), "t", icfg)
        assert col.read_manifest()["content"] == content_key(col), ops
    assert {"edit", "add"} <= set(ops)


def test_paths_outside_the_vault_are_refused(tmp_path, icfg, fake_runner):
    from fanout.errors import UserError

    vault = tmp_path / "v"
    _write(vault / "a.md", "# a\n\nsync notes\n", [time.time_ns() - 10**13])
    for bad in ["../elsewhere.md", str(tmp_path / "other" / "x.md"), "a.md/../../x.md"]:
        with pytest.raises(UserError, match="outside the vault"):
            index_vault(vault, tmp_path / "db", "t", icfg, fake_runner, paths=[bad])
    with pytest.raises(UserError, match="list of paths"):
        index_vault(vault, tmp_path / "db", "t", icfg, fake_runner, paths="a.md")
    rep = index_vault(vault, tmp_path / "db", "t", icfg, fake_runner, paths=["a.md"])  # no record: a whole walk
    assert rep.notes == 1


class Killed(Exception):
    pass


STEPS = ["half-written group", "fanout.pipelines.index.write_index", "fanout.pipelines.index.delete_notes", "fanout.pipelines.index.compact",
         "fanout.pipelines.index.lance_fts", "fanout.pipelines.index.write_query_files", "fanout.store.file_states.save"]


@pytest.mark.parametrize("step", STEPS)
def test_a_round_killed_at_any_step_answers_as_before_or_after_and_the_next_completes_it(
        tmp_path, icfg, fake_runner, monkeypatch, step):
    import importlib

    rnd = random.Random(7)
    vault, db = tmp_path / "v", tmp_path / "db"
    stamp = [time.time_ns() - 10**13]
    notes = [vault / d / f"n{i}.md" for i, d in enumerate(["", "a", "a", "b", "b", "", "a", "b"])]
    for p in notes:
        _write(p, _text(rnd), stamp)
    cfg = icfg.replace(index={"compact_fragments": 0})  # every step runs in every round
    index_vault(vault, db, "t", cfg, fake_runner)
    before = answers(db, cfg)
    _write(notes[1], _text(rnd), stamp)
    notes[2].unlink()
    _write(vault / "c" / "new.md", _text(rnd), stamp)
    after = _rebuilt(vault, tmp_path, cfg, fake_runner, 0)
    calls = []
    if step == "half-written group":  # a group's chunks written, its documents rows not: the next run must
        module, name = "fanout.pipelines.index", "write_index"  # not keep the orphan chunks beside new ones
        real = getattr(importlib.import_module(module), name)

        def dies(col, chunks, docs, remove):
            calls.append(1)
            real(col, chunks, docs.slice(0, 0), remove)
            raise Killed(step)
    else:
        module, name = step.rsplit(".", 1)
        real = getattr(importlib.import_module(module), name)

        def dies(*a, **k):
            calls.append(1)
            raise Killed(step)

    monkeypatch.setattr(importlib.import_module(module), name, dies)
    try:
        index_vault(vault, db, "t", cfg, fake_runner)
    except Killed:
        pass
    assert calls, f"{step} was not reached"
    assert answers(db, cfg) in (before, after)
    monkeypatch.setattr(importlib.import_module(module), name, real)
    index_vault(vault, db, "t", cfg, fake_runner)
    assert answers(db, cfg) == after


@pytest.mark.slow
def test_searches_go_on_while_a_round_runs(tmp_path, fake_cfg):
    rnd = random.Random(3)
    vault, db = tmp_path / "v", tmp_path / "db"
    stamp = [time.time_ns() - 10**13]
    for i in range(60):
        _write(vault / f"n{i}.md", _text(rnd), stamp)
    cfg = fake_cfg.replace(fake={"embed_sleep_s": 0.02})  # a round of 30 notes embeds for a few seconds
    with fanout.open(db, "t", cfg) as kb:
        kb.index(vault)
        kb.search("sync notes", mode="search")
        for i in range(30):
            _write(vault / f"n{i}.md", _text(rnd), stamp)
        spans: list[tuple[float, float]] = []
        done = threading.Event()

        def searching():
            while not done.is_set():
                t = time.perf_counter()
                kb.search(rnd.choice(QUERIES), mode="search")
                spans.append((t, time.perf_counter()))

        th = threading.Thread(target=searching)
        t0 = time.perf_counter()
        th.start()
        rep = kb.index(vault)
        t1 = time.perf_counter()
        done.set()
        th.join()
    assert rep.embedded_notes == 30
    during = [(a, b) for a, b in spans if b < t1]
    assert len(during) >= 3, "no search finished while the round ran"
    assert max(b - a for a, b in spans) < (t1 - t0) / 2, "a search waited for the round"
