"""The index's stat fast path (fanout/store/file_states.py, pipelines/scan_notes.py `scan_vault`): an unchanged
note is not read, a changed stat is, and a full check reads every note whatever the record says (fake models)."""

import os
import time

import pyarrow as pa
import pytest
from fanout.pipelines.index import index_vault
from fanout.pipelines.scan_notes import scan_key, scan_vault

from fanout.store import file_states
from tests.support.vault import NOTES, write_vault


@pytest.fixture(scope="module")
def cfg0(fake_cfg):
    """The fake profile trusting a record at once (no racy window): a test writes and re-indexes in one second."""
    return fake_cfg.replace(index={"stat_racy_s": 0})


def _states(db):
    return pa.ipc.open_file(pa.BufferReader(open(file_states.path(str(db), "t"), "rb").read())).read_all()


def test_unchanged_vault_reads_no_note_and_a_changed_stat_is_read(tmp_path, cfg0, fake_runner):
    vault = write_vault(tmp_path / "v")
    db = tmp_path / "db"
    first = index_vault(vault, db, "t", cfg0, fake_runner)
    assert first.read_notes == len(NOTES) and first.embedded_notes == len(NOTES)
    again = index_vault(vault, db, "t", cfg0, fake_runner)
    assert again.read_notes == 0 and again.embedded_chunks == 0 and again.notes == len(NOTES)
    assert again.chunks == first.chunks
    # touched (mtime only): read and hashed, not embedded; recorded, so the next run reads nothing
    p = vault / "Sync/Sync your notes.md"
    os.utime(p, ns=(time.time_ns(), time.time_ns() - 100_000_000_000))
    touched = index_vault(vault, db, "t", cfg0, fake_runner)
    assert touched.read_notes == 1 and touched.embedded_notes == 0
    assert index_vault(vault, db, "t", cfg0, fake_runner).read_notes == 0
    p.write_text(NOTES["Sync/Sync your notes.md"] + "\nMore about sync.\n", encoding="utf-8")
    (vault / "Linking/Internal links.md").unlink()
    upd = index_vault(vault, db, "t", cfg0, fake_runner)
    assert upd.read_notes == 1 and upd.embedded_notes == 1 and upd.deleted == 1
    assert "Linking/Internal links.md" not in _states(db)["path"].to_pylist()


def test_an_edit_keeping_size_and_mtime_is_caught_by_ctime_and_by_a_full_check(tmp_path, cfg0, fake_runner):
    vault = write_vault(tmp_path / "v", {"a.md": "# A\n\nalpha beta gamma\n", "b.md": "# B\n\ndelta\n"})
    db = tmp_path / "db"
    index_vault(vault, db, "t", cfg0, fake_runner)
    p = vault / "a.md"
    st = os.stat(p)
    p.write_text("# A\n\nalpha beta zetas\n", encoding="utf-8")  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime: the ctime still moves (Linux, macOS)
    assert os.stat(p).st_size == st.st_size and os.stat(p).st_mtime_ns == st.st_mtime_ns
    r = index_vault(vault, db, "t", cfg0, fake_runner)
    assert r.read_notes == 1 and r.embedded_notes == 1
    # a platform or copy tool that kept every stat field: the record is made to match the new bytes' stat while
    # holding the old hash; the fast path trusts it (what the docs say it trusts), a full check does not
    p.write_text("# A\n\nalpha beta thetas\n", encoding="utf-8")
    t = _states(db)
    i = t["path"].to_pylist().index("a.md")
    now = os.stat(p)
    cols = {n: t[n].to_pylist() for n in t.column_names}
    cols["size"][i], cols["mtime_ns"][i], cols["ctime_ns"][i] = now.st_size, now.st_mtime_ns, now.st_ctime_ns
    cols["inode"][i], cols["checked_ns"][i] = now.st_ino, max(now.st_mtime_ns, now.st_ctime_ns) + 1
    file_states.save(str(db), "t", t.schema.metadata[b"fanout.key"].decode(),
                     pa.table(cols, schema=file_states.FILE_STATES))
    assert index_vault(vault, db, "t", cfg0, fake_runner).embedded_notes == 0
    full = index_vault(vault, db, "t", cfg0, fake_runner, full_check=True)
    assert full.read_notes == 2 and full.embedded_notes == 1


def test_a_record_taken_in_the_files_own_clock_tick_is_not_trusted(tmp_path, fake_cfg):
    vault = write_vault(tmp_path / "v", {"a.md": "# A\n\nalpha\n"})
    key = scan_key(vault, "auto", 20.0, fake_cfg.index)
    first = scan_vault(vault, known=None, racy_s=2.0)
    assert first.read_count == 1
    rows = [first.states[p] for p in sorted(first.states)]
    known = pa.table({n: [r[i] for r in rows] for i, n in enumerate(file_states.FILE_STATES.names)},
                     schema=file_states.FILE_STATES)
    assert scan_vault(vault, known=known, racy_s=2.0).read_count == 1  # read just now: within 2 s of its mtime
    assert scan_vault(vault, known=known, racy_s=0.0).trusted == 1
    assert key  # (the key names the settings; compared in the next test)


def test_no_record_other_settings_or_a_damaged_record_read_every_note(tmp_path, cfg0, fake_runner):
    vault = write_vault(tmp_path / "v")
    db = tmp_path / "db"
    index_vault(vault, db, "t", cfg0, fake_runner)
    assert index_vault(vault, db, "t", cfg0, fake_runner).read_notes == 0
    other = cfg0.replace(index={"max_field_chars": 9_999})  # a scan setting: the record's key differs
    assert index_vault(vault, db, "t", other, fake_runner).read_notes == len(NOTES)
    assert index_vault(vault, db, "t", other, fake_runner).read_notes == 0
    with open(file_states.path(str(db), "t"), "r+b") as f:  # bytes changed in the middle (the data)
        f.seek(os.path.getsize(f.name) // 2)
        f.write(b"garbage!")
    r = index_vault(vault, db, "t", other, fake_runner)
    assert r.read_notes == len(NOTES) and r.embedded_notes == 0
    os.remove(file_states.path(str(db), "t"))
    assert index_vault(vault, db, "t", other, fake_runner).read_notes == len(NOTES)


def test_a_skipped_note_stays_skipped_without_being_read(tmp_path, cfg0, fake_runner):
    vault = write_vault(tmp_path / "v", {"a.md": "# A\n\nalpha\n", "bad.md": "---\n: [\n---\nbody\n"})
    db = tmp_path / "db"
    first = index_vault(vault, db, "t", cfg0, fake_runner)
    again = index_vault(vault, db, "t", cfg0, fake_runner)
    assert again.read_notes == 0 and again.skipped == first.skipped and [s["reason"] for s in again.skipped] == \
        ["bad_yaml"]


def test_the_cli_full_check_flag_reads_every_note(tmp_path, capsys):
    from fanout.cli.main import main

    vault = write_vault(tmp_path / "v")
    common = ["--db", str(tmp_path / "db"), "--config", "fake"]
    assert main(["index", str(vault), *common]) == 0
    assert main(["index", str(vault), *common, "--full-check"]) == 0
    assert "embedded 0 notes" in capsys.readouterr().out
