"""A hostile vault's scan: links out and in, a loop, a FIFO, device files, bad and over-long names, huge
notes, hard links, Unicode normal forms; every `.md` entry accounted for (indexed, or skipped once with a
reason) in bounded time, nothing from outside the vault read. Moved from the hostile rounds
(tests/test_hostile*.py).
"""

from __future__ import annotations

import os
import unicodedata

import pytest
from fanout.pipelines.scan_notes import IGNORED, scan_notes

from fanout.io.vault import VaultError, list_notes
from tests.support import hostile_vault
from tests.support.hostile_notes import GOOD, _index_cli
from tests.support.hostile_output import LIVE, run, write
from tests.support.hostile_vault import SECRET, bounded
from tests.support.vault import write_vault

hostile = hostile_vault.hostile  # a fixture (tests/support/hostile_vault.py)


def nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


def test_scan_accounts_for_every_file_in_bounded_time(hostile):
    (notes, skipped), _ = bounded(lambda: scan_notes(hostile["vault"]), 120)
    indexed = set(notes["path"].to_pylist())
    reasons = {s["path"]: s["reason"] for s in skipped.to_pylist()}
    assert indexed == hostile["indexed"]
    assert {p: r for p, r in reasons.items() if r != IGNORED} == hostile["skipped"]
    assert {p for p, r in reasons.items() if r == IGNORED} == hostile["ignored"]
    assert all(s["detail"] for s in skipped.to_pylist())
    assert not any(SECRET in b for b in notes["body"].to_pylist())
    assert "bad\\xff\\xfename.md" in reasons  # the bad name is named (bytes shown as \xNN), valid UTF-8


def test_empty_or_missing_vault_is_an_error_never_the_current_folder(tmp_path):
    for bad in ("", "  ", str(tmp_path / "missing")):
        with pytest.raises(VaultError, match="vault"):
            list_notes(bad)
    (tmp_path / "f.md").write_text("x")
    with pytest.raises(VaultError, match="not a folder"):
        scan_notes(tmp_path / "f.md")


def test_a_vault_that_is_itself_a_link_is_fine_and_links_inside_it_count_as_inside(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.md").write_text("a\n")
    os.symlink(real / "a.md", real / "b.md")
    os.symlink(real, tmp_path / "vault")
    notes, skipped = scan_notes(tmp_path / "vault")
    assert notes["path"].to_pylist() == ["a.md", "b.md"] and skipped.num_rows == 0


def test_a_file_swapped_for_a_fifo_after_the_walk_is_refused_not_waited_on(tmp_path):
    from fanout.io.vault import NotARegularFile, read_regular

    os.mkfifo(tmp_path / "x.md")
    with pytest.raises(NotARegularFile, match="FIFO"):
        bounded(lambda: read_regular(tmp_path / "x.md", 1000), 10)
    os.symlink("/etc/hostname", tmp_path / "l.md")
    with pytest.raises(OSError):  # O_NOFOLLOW: a final symlink is never followed at open
        read_regular(tmp_path / "l.md", 1000)


def test_cli_index_of_an_empty_vault_path_is_an_error(tmp_path, capsys):
    from fanout.cli.main import main

    assert main(["index", "", "--db", str(tmp_path / "db")]) == 2
    err = capsys.readouterr().err
    assert "vault path is empty" in err and not (tmp_path / "db").exists()


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


def test_each_skipped_note_is_reported_once(tmp_path, capsys, caplog):
    import logging

    from fanout.cli.main import main

    vault = write_vault(tmp_path / "v", {**GOOD, "bad.md": "---\n[unclosed\n---\nx\n", "empty.md": ""})
    caplog.set_level(logging.INFO)
    assert main(_index_cli(vault, tmp_path / "db")) == 3
    err = capsys.readouterr().err
    assert err.count("skipped bad.md") == 1 and err.count("skipped empty.md") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and "bad.md" in r.getMessage()]


# -- 6. smaller ---------------------------------------------------------------------------------------------------
def test_a_hard_link_to_a_file_outside_is_a_vault_file(tmp_path):
    """Decision (README "Threat model"): a hard link is a name inside the vault; its file is indexed."""
    from fanout.io.vault import list_notes

    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\nsomething outside\n")
    vault = write(tmp_path / "v", {"a.md": "# A\n"})
    os.link(outside, vault / "hard.md")
    listing = list_notes(vault)
    assert [f[0] for f in listing.files] == ["a.md", "hard.md"] and not listing.skipped


def test_a_symlink_loop_is_reported_as_a_loop(tmp_path):
    from fanout.io.vault import list_notes

    vault = write(tmp_path / "v", {"a.md": "# A\n"})
    os.symlink("self.md", vault / "self.md")
    os.symlink("loop2.md", vault / "loop1.md")
    os.symlink("loop1.md", vault / "loop2.md")
    os.symlink("missing.md", vault / "gone.md")
    reasons = {s["path"]: s["reason"] for s in list_notes(vault).skipped}
    assert reasons == {"self.md": "link_loop", "loop1.md": "link_loop", "loop2.md": "link_loop",
                       "gone.md": "broken_link"}


def test_index_skip_lines_escape_control_characters(tmp_path, capsys):
    vault = write(tmp_path / "v", {"ok.md": "# Ok\nfine\n", "bad\x1b]0;x\x07.md": "---\ntitle: \"\x1b[2J\"\n---\n# B\n"})
    rc, out, err = run(capsys, "index", str(vault), "--db", str(tmp_path / "db"), "-c", "t", "--config", "fake")
    assert rc == 3 and "skipped bad\\x1b]0;x\\x07.md: bad_yaml" in err and not LIVE.search(out + err), err
