"""Names, sizes and arguments at their limits: a note path past PATH_MAX, collection names that leave the db
or pass the length limit, huge counts, non-string paths, the index size limit on `get`, `--config` on
ls/get/collection; two index runs on one collection (who holds it, one consistent index); SIGTERM on a Ray
batch exits 143. Moved from the hostile rounds (tests/test_hostile_round3.py, tests/test_hostile_round4.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fanout.pipelines.scan_notes import scan_notes

from fanout.config.sections import IndexConfig
from tests.support import hostile_output
from tests.support.hostile_notes import GOOD, bounded
from tests.support.hostile_output import run, write
from tests.support.vault import write_vault

hostile_db = hostile_output.hostile_db  # a fixture (tests/support/hostile_output.py)


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


REPO = Path(__file__).resolve().parents[1]


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


# -- 5. two index runs on one collection ------------------------------------------------------------------------
def test_a_second_index_run_says_who_holds_the_collection(tmp_path, capsys, fake_cfg):
    from fanout.store.locks import collection_lock, lock_path

    vault = write(tmp_path / "v", {"a.md": "# A\nsync\n"})
    db = tmp_path / "db"
    with collection_lock(db, "t", "fanout index elsewhere -c t"):
        rc, _, err = run(capsys, "index", str(vault), "--db", str(db), "-c", "t", "--config", "fake")
    lines = [ln for ln in err.splitlines() if ln.startswith("fanout:")]
    assert rc == 2 and len(lines) == 1 and "is being written by `fanout index elsewhere -c t`" in lines[0]
    assert f"pid {os.getpid()}" in lines[0] and "run `fanout index" in lines[0]
    assert not list(db.glob("*.lance"))  # nothing was written
    rc, _, err = run(capsys, "index", str(vault), "--db", str(db), "-c", "t", "--config", "fake")
    assert rc == 0, err  # the lock went with its holder
    assert oct(os.stat(lock_path(db, "t")).st_mode & 0o777) == "0o600"
    assert lock_path("s3://bucket/db", "t") is None  # object stores: no lock (README: one writer)


def test_two_concurrent_index_runs_one_line_and_a_consistent_index(tmp_path):
    from fanout.store.db import Collection

    notes = {f"n{i:03d}.md": f"# Note {i}\n" + f"sync words {i} " * 40 + "\n" for i in range(150)}
    vault = write(tmp_path / "v", notes)
    db = tmp_path / "db"
    cmd = [sys.executable, "-m", "fanout.cli.main", "index", str(vault), "--db", str(db), "-c", "t", "--config", "fake"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for _ in range(2)]
    res = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for rc, err in res:
        assert rc in (0, 2), err
        assert "Traceback" not in err and "conflict" not in err.lower() and ".rs" not in err
        if rc == 2:
            assert len([ln for ln in err.splitlines() if ln.startswith("fanout:")]) == 1
            assert "is being written by" in err
    assert 0 in [rc for rc, _ in res]
    col = Collection(str(db), "t")
    col.refresh()
    paths = col.table(col.documents_name).to_arrow()["path"].to_pylist()
    assert sorted(paths) == sorted(notes)


def test_collection_name_messages_agree_on_the_limit():
    from fanout.api.requests import parse_search_request as check_request
    from fanout.errors import RequestError
    from fanout.store.db import check_collection_name

    check_collection_name("x" * 100)
    check_request({"query": "q", "collections": ["x" * 100]}, 10)
    with pytest.raises(ValueError) as a:
        check_collection_name("x" * 101)
    with pytest.raises(RequestError) as b:
        check_request({"query": "q", "collections": ["x" * 101]}, 10)
    for e in (a.value, b.value):
        assert "at most 100 characters" in str(e) and "128" not in str(e)


def test_ls_get_and_collection_take_config(hostile_db, capsys, tmp_path):
    vault, db = hostile_db
    for argv in (["ls"], ["get", "a.md"], ["multi-get", "a.md"]):
        assert run(capsys, *argv, "--db", str(db), "-c", "t", "--config", "fake")[0] == 0, argv
    assert run(capsys, "collection", "list", "--db", str(db), "--config", "fake")[0] == 0
    other = tmp_path / "db2"
    assert run(capsys, "collection", "add", "x", str(vault), "--db", str(other), "--config", "fake")[0] == 0
    rc, out, _ = run(capsys, "collection", "remove", "x", "--db", str(other), "--config", "fake")
    assert rc == 0 and "removed x_chunks" in out


@pytest.mark.ray
def test_sigterm_on_a_ray_batch_exits_143_without_a_stack_dump(hostile_db, tmp_path):
    _, db = hostile_db
    q = tmp_path / "many.jsonl"
    q.write_text("".join(json.dumps({"id": f"q{i}", "query": f"sync note {i}"}) + "\n" for i in range(30000)))
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "fanout.cli.main", "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t",
           "--config", "fake", "--runner", "ray", "--slice", "50"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    results = Path(str(out) + ".parts") / "results"
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None and not (results.exists() and any(results.iterdir())):
        time.sleep(0.5)
    assert p.poll() is None, p.communicate()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err[-2000:]
    assert "SIGTERM received" not in err and "PC: @" not in err, err[-2000:]
    assert results.exists() and not out.exists()  # finished parts kept: the same command resumes
