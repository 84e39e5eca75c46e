"""A watch round costs what it changed (pipelines/index.py's quick path): the record of file states is written as a
delta and kept in memory between rounds (fanout/store/file_states.py), the content digest is updated by the notes
changed (fanout/store/stamps.py), and an index whose `content` an older fanout wrote is recognised, not re-embedded
(fake models)."""

from __future__ import annotations

import hashlib
import os
import time

import pytest
from fanout.pipelines.index import index_vault

from fanout.store import file_states, stamps
from fanout.store.db import Collection, content_key

NOTES = {f"{d}n{i}.md": f"# Note {i}\n\n{w} notes about {w} and sync {i}\n" for i, (d, w) in enumerate(
    [("", "garden"), ("a/", "backup"), ("a/", "vault"), ("b/", "graph"), ("b/", "canvas"), ("", "theme")])}


@pytest.fixture
def cfg(fake_cfg):
    return fake_cfg.replace(index={"stat_racy_s": 0})  # a record is trusted at once


def _vault(root, stamp):
    for rel, text in NOTES.items():
        _write(root / rel, text, stamp)
    return root


def _write(p, text: str, stamp: list[int]) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    stamp[0] += 1_000_000_000  # a distinct mtime per write, in the past
    os.utime(p, ns=(time.time_ns(), stamp[0]))


def _on_disk(vault) -> str:
    """The content digest of the vault's notes as they are."""
    pairs = [(p.relative_to(vault).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest()) for p in vault.rglob("*.md")]
    return stamps.content_digest(pairs)


def _check(vault, db, cfg) -> None:
    """The index holds exactly the vault's notes, and its manifest says so."""
    col = Collection(str(db), "t", cfg)
    assert col.read_manifest()["content"] == content_key(col) == _on_disk(vault)


def test_a_watch_round_compares_only_its_paths_and_writes_a_delta(tmp_path, cfg, fake_runner, monkeypatch):
    stamp = [time.time_ns() - 10**13]
    vault, db = _vault(tmp_path / "v", stamp), tmp_path / "db"
    index_vault(vault, db, "t", cfg, fake_runner)
    base = os.stat(file_states.path(str(db), "t"))
    from fanout.pipelines import index

    def whole(*a, **k):
        raise AssertionError("a watch round compared every note")

    monkeypatch.setattr(index, "plan_changes", whole)
    monkeypatch.setattr(index, "has_paths", whole)
    for i, (edit, new) in enumerate([("a/n1.md", "c/new.md"), ("b/n3.md", "c/new2.md")]):
        _write(vault / edit, f"# Edited {i}\n\nrouter media server\n", stamp)
        _write(vault / new, f"# New {i}\n\nsourdough kvass\n", stamp)
        (vault / "n0.md").unlink(missing_ok=True)
        rep = index_vault(vault, db, "t", cfg, fake_runner, paths=[edit, "c", "n0.md"])
        assert rep.read_notes == 2 and rep.embedded_notes == 2 and rep.deleted == (i == 0)  # (c/new.md: kept)
        _check(vault, db, cfg)
    def unread(*a, **k):
        raise AssertionError("the record was parsed again")

    monkeypatch.setattr(file_states, "_read", unread)  # this process keeps the record it wrote
    _write(vault / "a/n2.md", "# Two\n\ncamera media\n", stamp)
    assert index_vault(vault, db, "t", cfg, fake_runner, paths=["a/n2.md"]).read_notes == 1
    monkeypatch.undo()
    after = os.stat(file_states.path(str(db), "t"))
    assert (after.st_ino, after.st_mtime_ns) == (base.st_ino, base.st_mtime_ns)  # only the delta was written
    assert os.path.exists(file_states.delta_path(str(db), "t"))
    held = file_states.load(str(db), "t", _key(db))
    monkeypatch.setattr(file_states, "_HELD", {})  # another process: the whole file and its delta, read
    again = file_states.load(str(db), "t", _key(db))
    assert held is not None and again is not None
    assert (again.states, again.hashes, again.skipped, again.total) == \
        (held.states, held.hashes, held.skipped, held.total)
    assert "n0.md" not in again.states and "c/new2.md" in again.states


def _key(db) -> str:
    import pyarrow as pa

    with open(file_states.path(str(db), "t"), "rb") as f:
        t = pa.ipc.open_file(pa.BufferReader(f.read())).read_all()
    return t.schema.metadata[b"fanout.key"].decode()


def test_a_large_delta_is_folded_into_the_whole_record_and_a_stale_one_is_ignored(tmp_path, cfg, fake_runner,
                                                                                    monkeypatch):
    stamp = [time.time_ns() - 10**13]
    vault, db = _vault(tmp_path / "v", stamp), tmp_path / "db"
    index_vault(vault, db, "t", cfg, fake_runner)
    _write(vault / "a/n1.md", "# One\n\ngarden tomato\n", stamp)
    index_vault(vault, db, "t", cfg, fake_runner, paths=["a/n1.md"])
    delta = file_states.delta_path(str(db), "t")
    with open(delta, "rb") as f:
        kept = f.read()
    monkeypatch.setattr(file_states, "DELTA_ROWS", 1)
    _write(vault / "b/n3.md", "# Three\n\ngarden zfs\n", stamp)
    index_vault(vault, db, "t", cfg, fake_runner, paths=["b/n3.md"])  # 2 rows > 1: the whole record
    assert not os.path.exists(delta)
    _check(vault, db, cfg)
    with open(delta, "wb") as f:  # a delta left from before the whole write (a run stopped between the two)
        f.write(kept)
    monkeypatch.setattr(file_states, "_HELD", {})
    rec = file_states.load(str(db), "t", _key(db))
    assert rec is not None and rec.hashes["b/n3.md"] == hashlib.sha256((vault / "b/n3.md").read_bytes()).hexdigest()
    assert index_vault(vault, db, "t", cfg, fake_runner).read_notes == 0


def test_an_index_with_an_older_content_digest_is_recognised_and_not_re_embedded(tmp_path, cfg, fake_runner,
                                                                                monkeypatch):
    stamp = [time.time_ns() - 10**13]
    vault, db = _vault(tmp_path / "v", stamp), tmp_path / "db"
    index_vault(vault, db, "t", cfg, fake_runner)
    col = Collection(str(db), "t", cfg)
    docs = col.open_version(col.documents_name).to_table(columns=["path", "content_hash"])
    legacy = stamps.legacy_content_digest(zip(docs["path"].to_pylist(), docs["content_hash"].to_pylist()))
    col.write_manifest({**col.read_manifest(), "content": legacy})  # as an older fanout left it
    monkeypatch.setattr(file_states, "_HELD", {})
    same = index_vault(vault, db, "t", cfg, fake_runner)
    assert same.read_notes == 0 and same.embedded_chunks == 0 and col.read_manifest()["content"] == legacy
    _write(vault / "a/n2.md", "# Two\n\ncamera media\n", stamp)
    rnd = index_vault(vault, db, "t", cfg, fake_runner, paths=["a/n2.md"])
    assert rnd.embedded_notes == 1 and rnd.reused_chunks == 0
    _check(vault, db, cfg)  # the summed form from then on


def test_a_watch_round_killed_before_its_record_is_written_is_completed_by_the_next(tmp_path, cfg, fake_runner,
                                                                                   monkeypatch):
    stamp = [time.time_ns() - 10**13]
    vault, db = _vault(tmp_path / "v", stamp), tmp_path / "db"
    index_vault(vault, db, "t", cfg, fake_runner)
    real = file_states.save

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(file_states, "save", killed)
    _write(vault / "a/n1.md", "# One\n\nrestic snapshot\n", stamp)
    with pytest.raises(KeyboardInterrupt):
        index_vault(vault, db, "t", cfg, fake_runner, paths=["a/n1.md"])
    monkeypatch.setattr(file_states, "save", real)
    _write(vault / "b/n4.md", "# Four\n\nmirror zfs\n", stamp)
    _write(vault / "a/n1.md", "# One\n\nrestic snapshot again\n", stamp)  # edited again, its event not given
    rep = index_vault(vault, db, "t", cfg, fake_runner, paths=["b/n4.md"])
    assert rep.embedded_notes == 2
    _check(vault, db, cfg)
    _write(vault / "n5.md", "# Five\n\nsourdough\n", stamp)
    assert index_vault(vault, db, "t", cfg, fake_runner, paths=["n5.md"]).embedded_notes == 1
    _check(vault, db, cfg)


def _rows(db, cfg) -> tuple[list, list]:
    """What the index holds: every chunk (path, text) and every documents row (path, content hash), sorted."""
    col = Collection(str(db), "t", cfg)
    col.refresh()
    chunks = col.open_version(col.chunks_name, col.pinned[col.chunks_name]).to_table(columns=["path", "text"])
    docs = col.open_version(col.documents_name, col.pinned[col.documents_name]).to_table(
        columns=["path", "content_hash"])
    return sorted(zip(*(chunks[c].to_pylist() for c in chunks.column_names))), \
        sorted(zip(*(docs[c].to_pylist() for c in docs.column_names)))


STEPS = ["half-written group", "fanout.pipelines.index.write_index", "fanout.pipelines.index.delete_notes",
         "fanout.pipelines.index.compact", "fanout.pipelines.index.lance_fts",
         "fanout.pipelines.index.write_query_files", "fanout.store.file_states.save"]


@pytest.mark.parametrize("step", STEPS)
def test_a_watch_round_killed_at_any_step_leaves_the_index_before_or_after_and_its_retry_completes_it(
        tmp_path, cfg, fake_runner, monkeypatch, step):
    import importlib

    stamp = [time.time_ns() - 10**13]
    vault, db = _vault(tmp_path / "v", stamp), tmp_path / "db"
    cfg = cfg.replace(index={"compact_fragments": 0})  # every step runs in every round
    index_vault(vault, db, "t", cfg, fake_runner)
    _write(vault / "a/n1.md", "# One\n\nrestic snapshot\n", stamp)
    index_vault(vault, db, "t", cfg, fake_runner, paths=["a/n1.md"])  # the record now has a delta
    before = _rows(db, cfg)
    _write(vault / "b/n3.md", "# Three\n\nmirror zfs\n", stamp)
    (vault / "a/n2.md").unlink()
    _write(vault / "c/new.md", "# New\n\nsourdough kvass\n", stamp)
    given = ["b/n3.md", "a/n2.md", "c"]
    index_vault(vault, tmp_path / "rebuilt", "t", cfg, fake_runner, rebuild=True)
    after = _rows(tmp_path / "rebuilt", cfg)
    module, name = ("fanout.pipelines.index", "write_index") if step == "half-written group" else step.rsplit(".", 1)
    real = getattr(importlib.import_module(module), name)
    calls = []

    def dies(*a, **k):
        calls.append(1)
        if step == "half-written group":  # a group's chunks written, its documents rows not
            col, chunks, docs, remove = a
            real(col, chunks, docs.slice(0, 0), remove)
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(module), name, dies)
    with pytest.raises(KeyboardInterrupt):
        index_vault(vault, db, "t", cfg, fake_runner, paths=given)
    assert calls and _rows(db, cfg) in (before, after)
    monkeypatch.setattr(importlib.import_module(module), name, real)
    index_vault(vault, db, "t", cfg, fake_runner, paths=given)  # the watcher's retry
    assert _rows(db, cfg) == after
    _check(vault, db, cfg)
    _write(vault / "n5.md", "# Five\n\ngarden\n", stamp)  # and the rounds after it
    index_vault(vault, db, "t", cfg, fake_runner, paths=["n5.md"])
    _check(vault, db, cfg)
