"""A full disk: one line with the location and the fix (exit 4), no unreferenced files left, the pinned index
version never lost, and the next run with space succeeds; `optimize --keep-days 0` reclaims only unreferenced
files. Moved from tests/test_hostile_round3.py.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tests.support.hostile_notes import GOOD, _index_cli
from tests.support.vault import write_vault


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


def _tmpfs(path: Path, size: str) -> bool:
    import subprocess

    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, check=False).returncode == 0


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
        # lazy: this process may still map files of the index there (its search caches); the mount goes once
        # they are closed, and pytest's later removal of tmp_path then finds no busy mount point
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


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
