"""Hostile input, round 3: YAML bombs and deep nesting, Unicode normal forms, full disks, smaller edges.

Every test writes its hostile input itself. What is checked: a bad note is skipped with its name and reason
while every other note is indexed, in bounded time and memory; a `--config` bomb is one short line naming
the file; full-text search matches across NFC/NFD; a full disk is one line with the location and the fix
(exit 4), leaves no unreferenced files, never loses the pinned index version, and the next run with space
succeeds; malformed arguments give a clear error, never a traceback. The fake model profile
(configs/fake.yaml) stands in for the models.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import tracemalloc
import unicodedata
from pathlib import Path

import pytest
from fanout.pipelines.scan_notes import scan_notes

from fanout.config.sections import IndexConfig
from tests.support.vault import write_vault


def nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


def bounded(fn, seconds: float = 60.0, max_mb: float = 200.0):
    """fn() in a thread, failing if it takes over `seconds` or allocates a peak over `max_mb` (tracemalloc)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (re-raised in the test thread)
            box["error"] = e

    tracemalloc.start()
    try:
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(seconds)
        peak = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    assert not t.is_alive(), f"did not finish in {seconds}s"
    assert peak < max_mb, f"peak memory {peak:.0f} MB (an alias bomb expanded?)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def _bomb(levels: int = 9, width: int = 9, key: str = "aliases") -> str:
    """A billion-laughs front matter of a few hundred bytes: `key` repeats width**levels strings."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    lines.append(f"{key}: *l{levels - 1}")
    return "---\n" + "\n".join(lines) + "\n---\n# Bomb\nA note whose front matter is an alias bomb.\n"


def _deep_flow(depth: int) -> str:
    return "---\nx: " + "[" * depth + "]" * depth + "\n---\nA note with deep front matter.\n"


def _deep_block(depth: int) -> str:
    return "---\n" + "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v\n---\nDeep block.\n"


def _medium_bomb(key: str) -> str:
    """Under front_matter_max_chars once expanded (10,000 values), over max_field_chars under `key`."""
    return ("---\na: &a [xy, xy, xy, xy, xy, xy, xy, xy, xy, xy]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
            f"{key}: *d\n---\nMedium bomb.\n")


GOOD = {f"good/note {i}.md": f"# Good {i}\nA good note number {i} about syncing and linking.\n" for i in range(5)}


# -- 1. front matter: alias bombs and deep nesting --------------------------------------------------------
def test_a_466_byte_alias_bomb_is_skipped_in_bounded_memory_and_the_rest_is_indexed(tmp_path):
    bomb = _bomb()
    assert len(bomb.encode()) < 600  # 9**9 = 387 million strings once expanded
    vault = write_vault(tmp_path / "v", {**GOOD, "bomb.md": bomb, "tags.md": _bomb(key="tags"),
                                   "desc.md": _bomb(key="description"), "lang.md": _bomb(key="lang"),
                                   "medium tags.md": _medium_bomb("tags"),
                                   "medium aliases.md": _medium_bomb("aliases"),
                                   "recursive.md": "---\na: &a [1, *a]\n---\nRecursive alias.\n"})
    notes, skipped = bounded(lambda: scan_notes(vault), 60, 100)
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    reasons = {s["path"]: (s["reason"], s["detail"]) for s in skipped.to_pylist()}
    for name in ("bomb.md", "tags.md", "desc.md", "lang.md"):
        assert reasons[name][0] == "bad_yaml" and "alias" in reasons[name][1] \
            and "index.front_matter_max_chars" in reasons[name][1]
    for name, field in (("medium tags.md", "tags"), ("medium aliases.md", "aliases")):
        assert reasons[name][0] == "bad_front_matter" and f"`{field}`" in reasons[name][1] \
            and "index.max_field_chars" in reasons[name][1]
    assert reasons["recursive.md"][0] == "bad_yaml" and "recursive" in reasons["recursive.md"][1]
    assert all(len(d) < 400 for _, d in reasons.values())


def test_benign_anchors_still_load(tmp_path):
    vault = write_vault(tmp_path / "v", {"a.md": "---\nbase: &b {status: done}\nmeta:\n  <<: *b\n  k: 1\n"
                                           "aliases: &al [One]\ntags: *al\n---\nBody.\n"})
    notes, skipped = scan_notes(vault)
    assert skipped.num_rows == 0 and notes["aliases"].to_pylist() == [["One"]]
    assert notes["tags"].to_pylist() == [["One"]]


def test_deep_front_matter_is_skipped_by_name_never_a_recursion_error(tmp_path):
    vault = write_vault(tmp_path / "v", {**GOOD, "flow.md": _deep_flow(500), "block.md": _deep_block(300)})
    assert len((vault / "flow.md").read_bytes()) < 1100
    notes, skipped = bounded(lambda: scan_notes(vault), 60)
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    reasons = {s["path"]: s for s in skipped.to_pylist()}
    for name in ("flow.md", "block.md"):
        assert reasons[name]["reason"] == "bad_yaml"
        assert "nested deeper than 32 levels" in reasons[name]["detail"]
    # a depth limit above what the interpreter can recurse: still one skipped note, never an abort
    deeper = IndexConfig(front_matter_max_depth=100_000)
    notes, skipped = bounded(lambda: scan_notes(write_vault(tmp_path / "v2", {**GOOD, "x.md": _deep_flow(5000)}),
                                                limits=deeper), 60)
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    assert skipped.to_pylist()[0]["path"] == "x.md" and skipped.to_pylist()[0]["reason"] == "bad_yaml"


def test_any_error_parsing_one_note_skips_only_that_note(tmp_path, monkeypatch):
    import fanout.pipelines.scan_notes as sn

    real = sn.prop_values

    def fragile(meta):  # a parser bug that only one note's front matter trips
        if "trip" in meta:
            raise TypeError("unexpected value")
        return real(meta)

    monkeypatch.setattr(sn, "prop_values", fragile)
    notes, skipped = scan_notes(write_vault(tmp_path / "v", {**GOOD, "trip.md": "---\ntrip: 1\n---\nx\n"}))
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    assert skipped.to_pylist() == [{"path": "trip.md", "reason": "bad_file", "detail": "cannot be parsed "
                                    "(TypeError: unexpected value); check its front matter"}]


def test_bad_lang_values_fall_back_to_the_detected_language(tmp_path, caplog):
    vault = write_vault(tmp_path / "v", {
        "a.md": "---\nlang: English\n---\nText.\n", "b.md": "---\nlang: ru-RU\n---\nText.\n",
        "c.md": "---\nlang: [" + ", ".join(["xx"] * 3000) + "]\n---\nPlain English text here.\n",
        "d.md": "---\nlang: klingon\n---\nPlain English text.\n", "e.md": "---\nlang: 5\n---\nText.\n"})
    notes, skipped = scan_notes(vault)
    assert skipped.num_rows == 0
    assert dict(zip(notes["path"].to_pylist(), notes["lang"].to_pylist())) == \
        {"a.md": "en", "b.md": "ru", "c.md": "en", "d.md": "en", "e.md": "en"}
    bad = [r.getMessage() for r in caplog.records if "`lang`" in r.getMessage()]
    assert len(bad) == 3 and all(len(m) < 300 for m in bad)


def test_an_index_with_hostile_notes_keeps_updating(tmp_path, fake_cfg, fake_runner, capsys):
    from fanout.pipelines.index import index_vault

    from fanout.cli.main import main
    from fanout.store.db import Collection

    cfg = fake_cfg.replace(chunk={"check_context": False})  # its tokenizer alone peaks at ~550 MB
    vault = write_vault(tmp_path / "v", GOOD)
    db = tmp_path / "db"
    index_vault(vault, db, "t", cfg, fake_runner)
    write_vault(vault, {"bomb.md": _bomb(), "deep.md": _deep_flow(500), "lang.md": _medium_bomb("lang"),
                  "new.md": "# New\nA new note after the bad ones.\n"})
    s = bounded(lambda: index_vault(vault, db, "t", cfg, fake_runner), 120, 100)
    assert {x["path"]: x["reason"] for x in s.skipped} == {"bomb.md": "bad_yaml", "deep.md": "bad_yaml"}
    col = Collection(db, "t")
    paths = set(col.table(col.documents_name).to_arrow()["path"].to_pylist())
    assert paths == set(GOOD) | {"new.md", "lang.md"}
    capsys.readouterr()
    assert main(["status", "--db", str(db), "-c", "t", "--config", "fake"]) == 0
    out = capsys.readouterr().out
    assert "lang.md" not in out and len(out) < 2000  # a `lang` bomb never reaches the output


def test_a_config_bomb_or_deep_config_is_one_short_line_naming_the_file(tmp_path, capsys):
    from fanout.cli.main import main
    from fanout.config import ConfigError, load_config

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb(key="index").split("---\n")[1].replace("index: *l8", "chunk:\n  max_tokens: *l8"))
    deep = tmp_path / "deep.yaml"
    deep.write_text("chunk:\n  max_tokens: " + "[" * 400 + "]" * 400 + "\n")
    mid = tmp_path / "mid.yaml"  # small enough to load: the error quotes the value, cut short
    mid.write_text("chunk:\n  max_tokens: [" + ", ".join(["abcdefgh"] * 2000) + "]\n")
    for path, match in ((bomb, "aliases"), (deep, "nested deeper"), (mid, "must be a number")):
        with pytest.raises(ConfigError, match=match) as e:
            bounded(lambda p=path: load_config(str(p)), 30, 100)
        assert str(path) in str(e.value) and len(str(e.value)) <= 1100
        assert main(["status", "--db", str(tmp_path / "db"), "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err


# -- 4. Unicode normal forms ------------------------------------------------------------------------------
def test_full_text_matches_across_normal_forms_and_names_that_differ_by_form_are_one_note(
        tmp_path, fake_cfg, fake_runner, monkeypatch, capsys, caplog):
    from fanout.pipelines.index import index_vault

    from fanout.api.service import SearchService
    from fanout.cli.main import main
    from fanout.store.db import Collection

    vault = tmp_path / "v"
    write_vault(vault, {
        "decomposed.md": nfd("# Ärger\nDie Größe der Datei wird in Kilobyte angezeigt.\n"),
        "composed.md": "# Übersicht\nDas Ölgemälde hängt im Flur neben der Tür.\n",
        "Café.md": "# Café composed\nThe composed café note.\n",
        "other.md": "# Other\nNothing special in this note at all.\n"})
    (vault / nfd("Café.md")).write_text("# Café decomposed\nThe decomposed café note.\n", encoding="utf-8")
    if len(os.listdir(vault)) < 5:  # a file system that normalises names itself: nothing to tell apart
        pytest.fail("this file system merged the two names; run the test on one that keeps bytes (ext4, tmpfs)")
    db = tmp_path / "db"
    s = index_vault(vault, db, "t", fake_cfg, fake_runner)
    assert [(x["path"], x["reason"]) for x in s.skipped] == [(nfd("Café.md"), "duplicate_name")]
    assert "'Café.md'" in s.skipped[0]["detail"]
    col = Collection(db, "t")
    docs = col.table(col.documents_name).to_arrow().to_pylist()
    assert sorted(d["path"] for d in docs) == sorted(["decomposed.md", "composed.md", "Café.md", "other.md"])
    assert next(d["title"] for d in docs if d["path"] == "Café.md") == "Café composed"

    svc = SearchService(db, fake_cfg, fake_runner)

    def top(q: str) -> list[str]:
        return [r["path"] for r in svc.run({"mode": "search", "query": q, "collections": ["t"], "n": 3})["results"]]

    assert top("Größe")[0] == "decomposed.md"  # NFC query, NFD text
    assert top(nfd("Ölgemälde"))[0] == "composed.md"  # NFD query, NFC text
    assert top("Ärger")[0] == "decomposed.md"  # a title
    monkeypatch.setenv("FANOUT_CONFIG", "fake")
    capsys.readouterr()
    assert main(["multi-get", nfd("Café*"), "--db", str(db), "-c", "t"]) == 0
    out = capsys.readouterr().out
    assert "The composed café note." in out and "decomposed café" not in out
    for prefix in ("Café", nfd("Café")):  # `ls` takes either form too
        assert main(["ls", prefix, "--db", str(db), "-c", "t"]) == 0
    assert capsys.readouterr().out.count("Café.md") == 2


# -- 5. full disks ----------------------------------------------------------------------------------------
def _enospc_after(monkeypatch, db: Path, n_ok: int) -> dict:
    """LanceTable.add succeeds `n_ok` times, then leaves a stray data file in the table (what a write cut
    short by a full disk leaves) and raises ENOSPC as Lance reports it."""
    from lancedb.table import LanceTable

    real = LanceTable.add
    state = {"calls": 0, "junk": []}

    def add(self, data, *a, **kw):
        state["calls"] += 1
        if state["calls"] > n_ok:
            f = db / f"{self.name}.lance" / "data" / f"zz-partial-{state['calls']}.lance"
            f.write_bytes(b"\0" * 100_000)
            state["junk"].append(f)
            raise OSError(errno.ENOSPC, "LanceError(IO): No space left on device (os error 28)")
        return real(self, data, *a, **kw)

    monkeypatch.setattr(LanceTable, "add", add)
    return state


def _error_lines(err: str) -> list[str]:
    """stderr without progress lines (`embedding: 64/200 chunks`, `batch: 5/30 queries`) and llama.cpp's
    context note; a traceback stays in (and fails the test)."""
    assert "Traceback" not in err
    return [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("embedding:", "batch:", "llama_"))]


def _index_cli(vault: Path, db: Path) -> list[str]:
    return ["index", str(vault), "--db", str(db), "-c", "t", "--config", "fake"]


def test_a_full_disk_during_index_is_one_line_leaves_no_orphans_and_the_next_run_succeeds(
        tmp_path, monkeypatch, capsys):
    from fanout.api.catalog import status
    from fanout.cli.main import main
    from fanout.config import load_config
    from fanout.store.db import Collection

    vault = write_vault(tmp_path / "v", GOOD)
    db = tmp_path / "db"
    assert main(_index_cli(vault, db)) == 0
    write_vault(vault, {f"more/m{i}.md": f"# More {i}\nAnother note {i} about version history.\n" for i in range(200)})
    cfg = load_config("fake")
    state = _enospc_after(monkeypatch, db, 2)  # groups of 64 notes: the second group's add fails
    capsys.readouterr()
    per_group = tmp_path / "per-group.yaml"  # each group written as it is embedded (index.write_every_s 0)
    per_group.write_text("extends: fake\nindex:\n  write_every_s: 0\n", encoding="utf-8")
    assert main([*_index_cli(vault, db)[:-1], str(per_group)]) == 4
    err = _error_lines(capsys.readouterr().err)
    assert len(err) == 1 and "no space left" in err[0] and str(db) in err[0] and "free space" in err[0] \
        and "fanout index" in err[0]
    assert state["junk"] and not any(f.exists() for f in state["junk"])  # the failed write's files are gone
    col = Collection(db, "t", cfg)
    st = status(col, cfg, detail=True)  # what queries serve: the last completed run
    assert st["notes"] == len(GOOD) and st["tables"]["t_documents"].get("latest_version")
    assert main(["ls", "--db", str(db), "-c", "t", "--json"]) == 0  # `ls` lists the same version
    assert len(json.loads(capsys.readouterr().out)) == len(GOOD)
    monkeypatch.undo()
    assert main(_index_cli(vault, db)) == 0
    assert status(Collection(db, "t", cfg), cfg)["notes"] == len(GOOD) + 200


def test_optimize_keep_days_0_after_a_failed_run_keeps_the_pinned_version(tmp_path, monkeypatch, fake_cfg):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.optimize_tables import optimize_tables

    from fanout.api.catalog import status
    from fanout.api.service import SearchService
    from fanout.exec.runner import Runner
    from fanout.store.db import Collection
    from fanout.store.storage import DiskFull

    cfg = fake_cfg.replace(index={"write_every_s": 0})  # each group written as it is embedded
    vault = write_vault(tmp_path / "v", GOOD)
    db = tmp_path / "db"
    with Runner(cfg) as runner:
        index_vault(vault, db, "t", cfg, runner)
        write_vault(vault, {f"more/m{i}.md": f"# More {i}\nAnother note {i}.\n" for i in range(200)})
        with monkeypatch.context() as m:
            _enospc_after(m, db, 2)
            with pytest.raises(DiskFull, match="no space left"):
                index_vault(vault, db, "t", cfg, runner)
        col = Collection(db, "t", cfg)
        pinned = col.read_manifest()["tables"]
        assert col.table_versions()["t_documents"] > pinned["t_documents"]
        optimize_tables(db, "t", keep_days=0, cfg=cfg)
        st = status(Collection(db, "t", cfg), cfg)
        assert st["notes"] == len(GOOD)  # the pinned version is still there, and served
        res = SearchService(db, cfg, runner).run({"mode": "search", "query": "syncing", "collections": ["t"]})
        assert res["results"] and not res["errors"]
        assert index_vault(vault, db, "t", cfg, runner).notes == len(GOOD) + 200


def test_a_full_disk_during_batch_is_one_line_exit_4_and_the_rerun_resumes(tmp_path, monkeypatch, capsys,
                                                                             fake_cfg, fake_runner):
    import pyarrow.parquet as pq
    from fanout.pipelines.index import index_vault

    from fanout.cli.main import main

    vault = write_vault(tmp_path / "v", GOOD)
    db = tmp_path / "db"
    index_vault(vault, db, "t", fake_cfg, fake_runner)
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"id": f"q{i}", "query": f"note {i} syncing"}) + "\n" for i in range(30)))
    out = tmp_path / "out" / "res.jsonl"
    real = pq.write_table
    calls = {"n": 0}

    def write_table(table, where, *a, **kw):
        calls["n"] += 1
        if "results" in str(where) and calls["n"] > 2:
            Path(where).write_bytes(b"PAR1" + b"\0" * 1000)  # what a cut-short write leaves
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(table, where, *a, **kw)

    monkeypatch.setattr("fanout.pipelines.batch.pq.write_table", write_table)
    argv = ["batch", str(q), "--out", str(out), "--db", str(db), "-c", "t", "--config", "fake", "--runner",
            "inproc", "--slice", "5"]
    capsys.readouterr()
    assert main(argv) == 4
    err = _error_lines(capsys.readouterr().err)
    assert len(err) == 1 and "no space left" in err[0] and str(out) in err[0] and "resumes" in err[0]
    assert not list(Path(str(out) + ".parts").rglob("*.tmp"))  # the cut-short part was removed
    monkeypatch.undo()
    assert main(argv) == 0
    assert len(out.read_text().splitlines()) == 30


def _tmpfs(path: Path, size: str) -> bool:
    import subprocess

    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, check=False).returncode == 0


def test_a_real_full_disk_on_a_small_tmpfs(tmp_path, capsys):
    """The same cycle on a real 1.5 MB file system (needs root to mount tmpfs; the tests above simulate it)."""
    import subprocess

    from fanout.cli.main import main

    mnt = tmp_path / "mnt"
    if not _tmpfs(mnt, "1500k"):
        pytest.skip("mounting a tmpfs needs root; the simulated full-disk tests above cover the same code")
    try:
        vault = write_vault(tmp_path / "v", {f"n{i}.md": f"# Note {i}\n" + " ".join(f"w{i}x{j}" for j in range(300))
                                       for i in range(300)})
        db = mnt / "db"
        assert main(_index_cli(vault, db)) == 4
        err = _error_lines(capsys.readouterr().err)
        assert len(err) == 1 and err[0].startswith("fanout: no space left") and str(db) in err[0]
        subprocess.run(["mount", "-o", "remount,size=40m", str(mnt)], check=True)
        assert main(_index_cli(vault, db)) == 0
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, check=False)


# -- 7. smaller -------------------------------------------------------------------------------------------
def test_a_collection_name_that_leaves_the_db_is_refused_before_anything_is_written(tmp_path, capsys):
    from fanout.cli.main import main

    vault = write_vault(tmp_path / "v", GOOD)
    db = tmp_path / "sub" / "db"
    for name in ("../x", "a/b", ".hidden", "x" * 101, "bad name"):
        assert main(["index", str(vault), "--db", str(db), "-c", name, "--config", "fake"]) == 2
        assert "collection name" in capsys.readouterr().err
    assert not list((tmp_path / "sub").rglob("*.json")) and not (tmp_path / "x.manifest.json").exists()


def test_huge_counts_are_a_usage_error_not_a_traceback(capsys):
    from fanout.cli.main import main

    for argv in (["search", "x", "-n", str(2**64)], ["get", "x", "-l", str(2**63)],
                 ["multi-get", "x", "--max-bytes", "9" * 40]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert "must be at most 2147483647" in capsys.readouterr().err


def _deep_dirs(root: Path, total: int) -> Path:
    """Folders nested until the path is `total` bytes long (built through descriptors: no path limit)."""
    fd = os.open(root, os.O_RDONLY)
    length = len(str(root))
    try:
        while length < total:
            os.mkdir("d" * 200, dir_fd=fd)
            nfd_ = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd_
            length += 201
        f = os.open("deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(f, b"# Deep\nA note too deep to open.\n")
        os.close(f)
    finally:
        os.close(fd)
    return root


def test_a_note_past_path_max_is_reported_not_dropped(tmp_path):
    vault = write_vault(tmp_path / "v", GOOD)
    _deep_dirs(vault, 4300)
    notes, skipped = bounded(lambda: scan_notes(vault), 60)
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    rows = [s for s in skipped.to_pylist() if s["reason"] == "path_too_long"]
    assert len(rows) == 1 and rows[0]["path"].startswith("d" * 200) and rows[0]["path"].endswith("/")
    assert "PATH_MAX" in rows[0]["detail"] and "shallower folder" in rows[0]["detail"]


def test_get_uses_the_index_size_limit_and_a_non_string_path_is_named(tmp_path):
    from fanout.api.notes import NoteError, find_file, read_note

    vault = write_vault(tmp_path / "v", GOOD)
    big = vault / "big.md"
    with open(big, "wb") as f:
        f.truncate(25_000_000)  # sparse: 25 MB over the 20 MB default of index.max_note_mb
    with pytest.raises(NoteError, match=r"over the 20\.0 MB limit; raise index.max_note_mb"):
        read_note(vault, big)
    with pytest.raises(NoteError, match="NUL bytes"):  # a raised limit reads it (and finds it binary)
        read_note(vault, big, limits=IndexConfig(max_note_mb=30))
    with pytest.raises(NoteError, match=r"`path` must be a string, got int 5"):
        find_file(vault, 5)
    with pytest.raises(NoteError, match=r"`path` must be a string, got list"):
        find_file(vault, ["a.md"])
    with pytest.raises(NoteError, match="`path` is missing"):
        find_file(vault, None)


def test_each_skipped_note_is_reported_once(tmp_path, capsys, caplog):
    import logging

    from fanout.cli.main import main

    vault = write_vault(tmp_path / "v", {**GOOD, "bad.md": "---\n[unclosed\n---\nx\n", "empty.md": ""})
    caplog.set_level(logging.INFO)
    assert main(_index_cli(vault, tmp_path / "db")) == 3
    err = capsys.readouterr().err
    assert err.count("skipped bad.md") == 1 and err.count("skipped empty.md") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and "bad.md" in r.getMessage()]


def test_optimize_keep_days_0_reclaims_files_no_version_references(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.optimize_tables import optimize_tables

    vault = write_vault(tmp_path / "v", GOOD)
    db = tmp_path / "db"
    index_vault(vault, db, "t", fake_cfg, fake_runner)
    data = db / "t_chunks.lance" / "data"
    stray = data / (next(data.glob("*.lance")).stem[:-4] + "dead.lance")  # what a killed write leaves
    stray.write_bytes(b"\0" * 50_000)
    optimize_tables(db, "t", keep_days=7, cfg=fake_cfg)
    assert stray.exists()  # unverified (young, maybe a write in progress) files stay by default
    optimize_tables(db, "t", keep_days=0, cfg=fake_cfg)
    assert not stray.exists()


def test_mcp_get_with_a_non_string_path_says_what_is_wrong(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    from fanout.api.notes import NoteError
    from fanout.serve.mcp import FanoutTools

    vault = write_vault(tmp_path / "v", GOOD)
    index_vault(vault, tmp_path / "db", "t", fake_cfg, fake_runner)
    tools = FanoutTools(tmp_path / "db", "t", fake_cfg, fake_runner)
    for bad, match in ((5, "`path` must be a string, got int 5"), ({"a": 1}, "must be a string, got dict"),
                       (None, "`path` is missing")):
        with pytest.raises(NoteError, match=match):
            tools.get({"path": bad})
    assert tools.get({"path": "good/note 1.md"})["title"] == "Good 1"
