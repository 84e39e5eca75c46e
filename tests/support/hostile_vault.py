"""The hostile vault (make_hostile_vault: links out and in, a loop, a FIFO, device files, a bad name, huge notes,
broken files) and its module fixture, the hashed bag-of-words embedder that stands in for the model, and a
bounded-time runner. Shared by tests/test_vault_scan_hostile.py and tests/test_index_repair.py (and HashEmbedder
by tests/test_reader_consistency.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

SECRET = "OUTSIDE-SECRET-7f3a"  # text that exists only outside the vault


DIM = 64


class HashEmbedder:
    """A fake embedder: unit vectors from hashed word counts (same words -> close vectors). No model."""

    def __init__(self, cfg):
        self.dim = DIM
        self.truncated = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        out = np.zeros((batch.num_rows, DIM), dtype=np.float32)
        for i, text in enumerate(batch.column("text").to_pylist()):
            for w in re.findall(r"\w+", (text or "").casefold()):
                out[i, int(hashlib.md5(w.encode()).hexdigest()[:8], 16) % DIM] += 1.0
            out[i, 0] += 1e-3  # never a zero vector
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        col = pa.FixedSizeListArray.from_arrays(pa.array(out.reshape(-1), pa.float32()), DIM)
        return batch.append_column("vector", col)


def _try(fn, *a) -> bool:
    try:
        fn(*a)
        return True
    except (OSError, PermissionError):
        return False


def make_hostile_vault(root: Path) -> dict:
    """Write the vault; returns what each `.md` entry should become: {'indexed': set, 'skipped': {path: reason}}."""
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"# Secret\n{SECRET} root:x:0:0\n", encoding="utf-8")
    (outside / "dir").mkdir()
    (outside / "dir" / "inner.md").write_text(f"{SECRET} in a linked folder\n", encoding="utf-8")
    v = root / "vault"
    (v / "sub").mkdir(parents=True)
    want_indexed = {"good.md", "sub/real.md", "alias.md", "big.md", "headings.md"}
    want_skipped: dict[str, str] = {}
    (v / "good.md").write_text("# Good\nA good note about syncing.\n", encoding="utf-8")
    (v / "sub" / "real.md").write_text("A real note inside a folder.\n", encoding="utf-8")
    os.symlink(v / "sub" / "real.md", v / "alias.md")  # link in: followed (resolves inside)
    os.symlink(v / "sub", v / "linked")  # second link to a walked folder: walked once
    os.symlink(v, v / "sub" / "loop")  # loop
    os.symlink(outside / "secret.md", v / "passwd.md")  # link out (file)
    want_skipped["passwd.md"] = "outside_vault"
    os.symlink(outside / "dir", v / "outdir")  # link out (folder)
    want_skipped["outdir/"] = "outside_vault"
    os.symlink("/etc/passwd", v / "etc.md")
    want_skipped["etc.md"] = "outside_vault"
    os.symlink("/dev/zero", v / "zero.md")  # a device behind a link: outside the vault
    want_skipped["zero.md"] = "outside_vault"
    os.symlink(v / "nowhere.md", v / "broken.md")
    want_skipped["broken.md"] = "broken_link"
    os.mkfifo(v / "fifo.md")  # would block an open() forever
    want_skipped["fifo.md"] = "not_regular_file"
    if _try(os.mknod, str(v / "null.md"), stat.S_IFCHR | 0o600, os.makedev(1, 3)):  # needs root
        want_skipped["null.md"] = "not_regular_file"
    sock = socket.socket(socket.AF_UNIX)
    if _try(sock.bind, str(v / "sock.md")):
        want_skipped["sock.md"] = "not_regular_file"
    sock.close()
    (v / "folder.md").mkdir()  # a folder named like a note: walked, not read
    bad = os.path.join(os.fsencode(v), b"bad\xff\xfename.md")
    with open(bad, "wb") as f:
        f.write(b"a note whose name is not UTF-8\n")
    want_skipped["bad\\xff\\xfename.md"] = "bad_name"
    para = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. " * 12
    (v / "big.md").write_text("# Big\n\n" + "\n\n".join(f"Part {i}. {para}" for i in range(5_000)),
                              encoding="utf-8")  # ~5 MB
    (v / "headings.md").write_text("# Top\n" + "".join(f"## Heading {i}\ntext {i}\n" for i in range(10_000)),
                                   encoding="utf-8")
    (v / "broken_yaml.md").write_text("---\nkey: [unclosed\n---\nbody\n", encoding="utf-8")
    want_skipped["broken_yaml.md"] = "bad_yaml"
    (v / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(256))
    want_skipped["binary.md"] = "binary"
    (v / "empty.md").write_bytes(b"")
    want_skipped["empty.md"] = "empty"
    (v / "latin1.md").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    want_skipped["latin1.md"] = "not_utf8"
    # ignore rules: .fanoutignore (gitignore syntax) and Obsidian's excluded files
    (v / ".fanoutignore").write_text("drafts/\n*.tmp.md\n", encoding="utf-8")
    (v / "drafts").mkdir()
    (v / "drafts" / "wip.md").write_text("draft\n", encoding="utf-8")
    (v / "scratch.tmp.md").write_text("scratch\n", encoding="utf-8")
    (v / ".obsidian").mkdir()
    (v / ".obsidian" / "app.json").write_text('{"userIgnoreFilters": ["Archive/", "/^Old-.*/"]}',
                                              encoding="utf-8")
    (v / "Archive").mkdir()
    (v / "Archive" / "x.md").write_text("archived\n", encoding="utf-8")
    (v / "Old-note.md").write_text("old\n", encoding="utf-8")
    want_ignored = {"drafts/", "scratch.tmp.md", "Archive/", "Old-note.md"}
    return {"vault": v, "indexed": want_indexed, "skipped": want_skipped, "ignored": want_ignored}


def bounded(fn, seconds: float):
    """Run fn in a thread; fail (instead of hanging the suite) if it has not returned in `seconds`."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (re-raised in the test thread)
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t0 = time.perf_counter()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not finish in {seconds}s (a blocking open or an endless walk?)"
    if "error" in box:
        raise box["error"]
    return box["value"], time.perf_counter() - t0


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return make_hostile_vault(tmp_path_factory.mktemp("hostile"))
