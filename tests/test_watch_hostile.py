"""`--watch` under hostile changes, round 5 (issue 52, items 2, 3 and 9): the vault folder replaced while watched,
note names with terminal escape sequences on stderr, and a folder link to a large tree outside the vault.

Fake profile, loopback only, every wait bounded (`WAIT`); the same helpers as tests/test_watch.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import fanout
from tests.support.vault import write_vault
from tests.support.watch import NOTES, WAIT, fanout_cli, fast_cfg, found, indexed, round_after

REPO = Path(__file__).resolve().parents[1]
LIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what must not reach a terminal


def until(cond, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["rm", "mv"])
@pytest.mark.slow
def test_a_replaced_vault_folder_is_watched_again(tmp_path, how):
    vault = write_vault(tmp_path / "vault", NOTES)
    with fanout.open(tmp_path / "db", config=fast_cfg()) as kb, kb.watch(vault) as w:
        assert w.wait(1, WAIT)
        if how == "rm":
            shutil.rmtree(vault)
        else:
            vault.rename(tmp_path / "old")
        vault.mkdir()
        for i in range(3):  # each new note is indexed (was: the first only, then nothing)
            (vault / f"N{i}.md").write_text(f"# N{i}\n\nquokka{i}\n", encoding="utf-8")
            until(lambda name=f"N{i}.md": name in indexed(kb), f"N{i}.md indexed")
        until(lambda: w.last is not None and ("added", "N2.md") in w.last.changes, "N2.md's round counted")
        assert indexed(kb) == {"N0.md", "N1.md", "N2.md"} and w.last.error is None
        if how == "mv":  # an edit in the moved-away folder starts no round
            n = w.rounds
            (tmp_path / "old" / "Home.md").write_text("# Home\n\nchanged away\n", encoding="utf-8")
            r = round_after(w, lambda: (vault / "Marker.md").write_text("# Marker\n", encoding="utf-8"))
            assert w.rounds == n + 1 and r.changes == (("added", "Marker.md"),)


def inotify_watches() -> int:
    """The inotify watches this process holds (Linux: one `inotify wd:` line per watch in fdinfo)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                with open(f"/proc/self/fdinfo/{fd}") as fh:
                    n += sum(line.startswith("inotify wd:") for line in fh)
        except OSError:
            continue
    return n


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts inotify watches in /proc")
@pytest.mark.slow
def test_a_folder_link_to_a_large_outside_tree_is_not_walked(tmp_path):
    outside = tmp_path / "outside"
    for i in range(300):
        (outside / f"d{i}" / "sub").mkdir(parents=True)
    (outside / "d0" / "Secret.md").write_text("# Secret\n\nxylophone\n", encoding="utf-8")
    vault = write_vault(tmp_path / "vault", NOTES)
    os.symlink(outside, vault / "Linked")
    base = inotify_watches()
    with fanout.open(tmp_path / "db", config=fast_cfg()) as kb, kb.watch(vault) as w:
        assert w.wait(1, WAIT)
        assert inotify_watches() - base < 20  # the vault's own folders (was: 600 more, one per outside folder)
        (outside / "d0" / "Secret.md").write_text("# Secret\n\nxylophone again\n", encoding="utf-8")
        (vault / "New").mkdir()  # a folder made while watching folder by folder is watched too
        round_after(w, lambda: None)
        r = round_after(w, lambda: (vault / "New" / "Bees.md").write_text("# Bees\n\nhoney\n", encoding="utf-8"))
        assert ("added", "New/Bees.md") in r.changes
        assert found(kb, "xylophone") == [] and indexed(kb) == {*NOTES, "New/Bees.md"}


@pytest.mark.slow
def test_watch_stderr_escapes_control_characters(tmp_path):
    """`fanout index --watch -v`: a note named with OSC/CSI sequences and a newline, and a failed round whose
    error names them, reach stderr (INFO and ERROR lines) escaped as stdout is."""
    from fanout.store.locks import collection_lock

    vault = write_vault(tmp_path / "vault", NOTES)
    db = tmp_path / "db"
    cfg = tmp_path / "w.yaml"
    cfg.write_text("extends: fake\nwatch:\n  tick_ms: 200\n  retry_s: 0.5\n", encoding="utf-8")
    proc = subprocess.Popen(fanout_cli("index", str(vault), "--db", str(db), "--config", str(cfg), "--watch", "-v"),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    out: list[bytes] = []
    err: list[bytes] = []
    for stream, into in ((proc.stdout, out), (proc.stderr, err)):
        threading.Thread(target=lambda s=stream, i=into: i.extend(iter(s.readline, b"")), daemon=True).start()
    try:
        until(lambda: any(b"watch round 1" in ln for ln in out), "round 1")
        evil = "evil \x1b]0;pwned\x07 \x1b[2J\nline.md"
        (vault / evil).write_text("# Evil\n\nsync\n", encoding="utf-8")
        until(lambda: any(b"watch round 2" in ln for ln in out), "round 2")
        with collection_lock(db, "notes", "held by \x1b]52;c;ZXZpbA==\x07 a test"):  # round 3 fails, naming it
            (vault / "Late.md").write_text("# Late\n\nquokka\n", encoding="utf-8")
            until(lambda: any(b"ERROR" in ln for ln in err), "a failed round's ERROR line")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(WAIT)
    text = b"".join(err).decode("utf-8", "replace")
    assert "\\x1b]0;pwned\\x07" in text and "\\x1b]52;c;ZXZpbA==\\x07" in text, text
    assert not LIVE.search(text), text
    assert not LIVE.search(b"".join(out).decode("utf-8", "replace"))
