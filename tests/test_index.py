"""Index pipeline with the real embedder: incremental behaviour, bad files, Ray run == in-process run."""

import shutil
import time

import numpy as np
import pytest
from fanout.pipelines.index import index_vault

from fanout.store.db import Collection
from tests.support.vault import NOTES, write_vault


def chunks_of(db, name="t"):
    col = Collection(db, name)
    return col.table(col.chunks_name).to_arrow().sort_by("chunk_id")


def test_incremental_unchanged_changed_deleted_and_config_change(tmp_path, cfg, runner):
    vault = write_vault(tmp_path / "v", {k: NOTES[k] for k in list(NOTES)[:3]})
    db = tmp_path / "db"
    first = index_vault(vault, db, "t", cfg, runner)
    assert first.rebuilt and first.embedded_notes == 3 and first.chunks > 3
    t = time.perf_counter()
    again = index_vault(vault, db, "t", cfg, runner)
    assert again.embedded_chunks == 0 and not again.rebuilt and again.chunks == first.chunks
    assert time.perf_counter() - t < 5
    (vault / "Plugins").mkdir()
    (vault / "Plugins" / "Daily notes.md").write_text(NOTES["Plugins/Daily notes.md"], encoding="utf-8")
    (vault / "Sync/Sync your notes.md").write_text("Sync now also covers plugins.\n", encoding="utf-8")
    (vault / "Linking/Internal links.md").unlink()
    upd = index_vault(vault, db, "t", cfg, runner)
    assert upd.embedded_notes == 2 and upd.deleted == 1
    paths = set(chunks_of(db)["path"].to_pylist())
    assert paths == {"Sync/Sync your notes.md", "Editing/Code blocks.md", "Plugins/Daily notes.md"}
    sync = [r["text"] for r in chunks_of(db).to_pylist() if r["path"] == "Sync/Sync your notes.md"]
    assert sync == ["Sync now also covers plugins."]
    rechunk = index_vault(vault, db, "t", cfg.replace(chunk={"max_tokens": 64}), runner)
    assert rechunk.rebuilt and rechunk.embedded_notes == 3


def test_bad_files_are_skipped_with_reasons(tmp_path, cfg, runner, tiny_vault):
    vault = tmp_path / "v"
    shutil.copytree(tiny_vault, vault)
    bad = __import__("pathlib").Path(__file__).resolve().parent.parent / "samples" / "bad"
    for f in bad.iterdir():
        shutil.copy(f, vault / f.name)
    s = index_vault(vault, tmp_path / "db", "t", cfg, runner)
    assert s.notes == len(NOTES) and len(s.skipped) == 4
    assert "skipped 4" in s.text() and "bad_yaml 1" in s.text()


@pytest.mark.ray  # a private local Ray
def test_ray_run_equals_in_process_run(tmp_path, cfg, tiny_vault, tiny_db):
    from fanout.exec.ray_runner import RayRunner

    rcfg = cfg.replace(embedder={"num_cpus": 0.5, "count": 1}, runner={"object_store_mb": 256})
    with RayRunner(rcfg) as rr:
        index_vault(tiny_vault, tmp_path / "db", "t", rcfg, rr)
    a, b = chunks_of(tiny_db), chunks_of(tmp_path / "db")
    assert a["chunk_id"].to_pylist() == b["chunk_id"].to_pylist()
    assert a["text"].to_pylist() == b["text"].to_pylist()
    # equal to float noise: llama.cpp's sums depend on which texts share a decode, and Ray Data (the
    # default engine on Ray) groups a run's chunks into embed calls differently from the in-process loop
    va, vb = np.asarray(a["vector"].to_pylist()), np.asarray(b["vector"].to_pylist())
    assert np.abs(va - vb).max() <= 5e-3
    cos = (va * vb).sum(1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1))
    assert cos.min() >= 0.999  # measured 0.99975 at worst
