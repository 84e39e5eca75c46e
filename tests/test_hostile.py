"""A hostile vault: links out and in, a loop, a FIFO, device files, a bad name, huge notes, broken files.

The scan must end in bounded time with every `.md` entry accounted for (indexed, or skipped with a reason),
and nothing from outside the vault may reach any table. The index tests use `HashEmbedder` below (hashed
bag-of-words vectors, no model) through the runner's role table, so 10,000 tiny chunks index in seconds.
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
from fanout.pipelines.scan_notes import IGNORED, scan_notes

from fanout.io.vault import VaultError, list_notes

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


# -- the index over a hostile vault, with the fake embedder -----------------------------------------------
@pytest.fixture(scope="module")
def fake_cfg(tmp_path_factory):
    from fanout.config import load_config

    model = tmp_path_factory.mktemp("model") / "hash-embedder.gguf"
    model.write_bytes(b"not a real model: tests/test_hostile.py HashEmbedder")
    return load_config("local").replace(models={"embedder": str(model)}, chunk={"check_context": False},
                                        embedder={"batch_size": 256}, cache={"enabled": False})


@pytest.fixture()
def fake_runner(fake_cfg, monkeypatch):
    import fanout.exec.runner as fr
    import fanout.models.identity as fi

    monkeypatch.setitem(fi.ROLES, "embedder", f"{__name__}:HashEmbedder")
    with fr.Runner(fake_cfg) as r:
        yield r


def all_text(db: Path) -> str:
    """Every string value in every table of a LanceDB folder, joined (to look for leaked text)."""
    import lancedb

    conn = lancedb.connect(str(db))
    out = []
    for name in conn.table_names():
        t = conn.open_table(name).to_arrow()
        for c in t.column_names:
            if pa.types.is_string(t.schema.field(c).type) or pa.types.is_large_string(t.schema.field(c).type):
                out += [v for v in t[c].to_pylist() if v]
    return "\n".join(out)


def test_hostile_vault_indexes_in_bounded_time_with_nothing_from_outside(hostile, fake_cfg, fake_runner,
                                                                         tmp_path):
    from fanout.pipelines.index import index_vault

    from fanout.store.db import Collection
    from fanout.text import est_tokens

    db = tmp_path / "db"
    summary, _ = bounded(lambda: index_vault(hostile["vault"], db, "h", fake_cfg, fake_runner), 600)
    assert summary.notes == len(hostile["indexed"])
    assert {s["path"]: s["reason"] for s in summary.skipped} == hostile["skipped"]
    assert summary.ignored == len(hostile["ignored"])
    col = Collection(db, "h")
    chunks = col.table(col.chunks_name).to_arrow()
    assert set(chunks["path"].to_pylist()) == hostile["indexed"]
    assert max(est_tokens(t) for t in chunks["text"].to_pylist()) <= fake_cfg.chunk.max_tokens
    heads = [h for p, h in zip(chunks["path"].to_pylist(), chunks["heading"].to_pylist()) if p == "headings.md"]
    assert "Top > Heading 9999" in heads  # results name the sub-section
    assert SECRET not in all_text(db)
    assert col.verify()[1] == []
    again = index_vault(hostile["vault"], db, "h", fake_cfg, fake_runner)
    assert again.embedded_chunks == 0 and not again.rebuilt


@pytest.fixture()
def small_index(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    from tests.support.vault import write_vault

    vault = write_vault(tmp_path / "vault")
    db = tmp_path / "db"
    index_vault(vault, db, "t", fake_cfg, fake_runner)
    return vault, db


def _data_files(db: Path, table: str) -> list[Path]:
    return sorted((db / f"{table}.lance" / "data").glob("*.lance"), key=lambda p: -p.stat().st_size)


def test_random_bytes_in_a_data_file_are_detected_and_repaired(small_index, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.store.db import Collection
    from fanout.store.integrity import IndexStateError

    vault, db = small_index
    f = _data_files(db, "t_chunks")[0]
    data = bytearray(f.read_bytes())
    rng = np.random.default_rng(0)
    # 4 KB of random bytes over the start of the data (the vector column is the bulk of it)
    data[:4096] = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    f.write_bytes(bytes(data))
    try:  # damage is either unreadable (named, with the fix) or damaged vectors (found by verify)
        _, damaged = Collection(db, "t").verify()
        assert damaged, "random bytes over the vectors went unnoticed"
    except IndexStateError as e:
        assert "t_chunks" in str(e) and "--rebuild" in str(e)
        with pytest.raises(IndexStateError, match="t_chunks"):
            index_vault(vault, db, "t", fake_cfg, fake_runner, full_check=True)
    else:  # a full check reads every stored vector (an ordinary run checks the rows it writes)
        s = index_vault(vault, db, "t", fake_cfg, fake_runner, full_check=True)  # re-embeds exactly the damaged notes
        assert s.repaired == len(damaged) and Collection(db, "t").verify()[1] == []
        res = Searcher(db, "t", fake_cfg, fake_runner).search([{"id": "q", "query": "sync devices"}],
                                                              SearchOptions(expand=False))
        assert res.results.num_rows


def test_a_truncated_data_file_is_named_and_rebuild_repairs_it(small_index, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.store.db import Collection
    from fanout.store.integrity import IndexStateError

    vault, db = small_index
    f = _data_files(db, "t_chunks")[0]
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
    with pytest.raises(IndexStateError, match=r"t_chunks.*--rebuild"):  # a full check reads every row
        index_vault(vault, db, "t", fake_cfg, fake_runner, full_check=True)
    with pytest.raises(IndexStateError, match=r"t_chunks.*--rebuild"):
        Searcher(db, "t", fake_cfg, fake_runner).search([{"id": "q", "query": "sync"}], SearchOptions())
    s = index_vault(vault, db, "t", fake_cfg, fake_runner, rebuild=True)
    assert s.rebuilt and s.embedded_notes == 6 and Collection(db, "t").verify()[1] == []


class NaNEmbedder(HashEmbedder):
    def __call__(self, batch):
        out = super().__call__(batch)
        vecs = np.asarray(out["vector"].to_pylist(), dtype=np.float32)
        for i, t in enumerate(batch.column("text").to_pylist()):
            if "POISON" in (t or ""):
                vecs[i] = np.nan
        col = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), DIM)
        return out.set_column(out.column_names.index("vector"), "vector", col)


def test_nan_vectors_never_enter_the_index(tmp_path, fake_cfg, monkeypatch):
    from fanout.pipelines.index import index_vault

    import fanout.exec.runner as fr
    import fanout.models.identity as fi
    from fanout.store.db import Collection
    from fanout.store.integrity import bad_vector_rows
    from tests.support.vault import write_vault

    monkeypatch.setitem(fi.ROLES, "embedder", f"{__name__}:NaNEmbedder")
    vault = write_vault(tmp_path / "v", {"ok.md": "fine text\n", "bad.md": "## A\nfine\n\n## B\nPOISON here\n"})
    with fr.Runner(fake_cfg) as r:
        s = index_vault(vault, tmp_path / "db", "n", fake_cfg, r)
    assert [(x["path"], x["reason"]) for x in s.skipped] == [("bad.md", "embedding_failed")]
    col = Collection(tmp_path / "db", "n")
    t = col.table(col.chunks_name).to_arrow()
    assert t["path"].to_pylist() == ["ok.md"] and len(bad_vector_rows(t["vector"])) == 0
    assert col.table(col.documents_name).to_arrow()["path"].to_pylist() == ["ok.md"]  # retried next run


# -- state files: manifest and config ---------------------------------------------------------------------
@pytest.mark.parametrize("text,match", [
    ("[1, 2]", "JSON list, not an object"),
    ('{"embedder": "x"}', "`schema_version`"),
    ('{"schema_version": 1, "embedder": {"spec": "x"', "not valid JSON"),
    ("", "not valid JSON"),
])
def test_a_bad_manifest_is_one_line_naming_the_file_and_the_fix(small_index, fake_cfg, fake_runner, text,
                                                                 match):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher

    from fanout.store.db import Collection
    from fanout.store.integrity import IndexStateError

    vault, db = small_index
    col = Collection(db, "t")
    Path(col.manifest_path).write_text(text, encoding="utf-8")
    with pytest.raises(IndexStateError, match=match) as e:
        Searcher(db, "t", fake_cfg, fake_runner)
    assert str(col.manifest_path) in str(e.value) and "--rebuild" in str(e.value) and "\n" not in str(e.value)
    s = index_vault(vault, db, "t", fake_cfg, fake_runner)  # `fanout index` rebuilds over a bad manifest
    assert s.rebuilt and Searcher(db, "t", fake_cfg, fake_runner)


def test_cli_bad_manifest_and_bad_yaml_are_one_line_exit_2(small_index, tmp_path, capsys):
    from fanout.cli.main import main

    vault, db = small_index
    (db / "t.manifest.json").write_text("[1,2]")
    bad = tmp_path / "bad.yaml"
    bad.write_text("chunk:\n  max_tokens: [450\n  overlap: 0.1\n")
    assert main(["query", "x", "--db", str(db), "--collection", "t", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and "line" in err and "Traceback" not in err
    for text, match in (("- a\n- b\n", "must be a mapping"), ("chunk: 5\n", "chunk must be a mapping"),
                        ("index:\n  languages: klingon\n", "unknown language 'klingon'"),
                        ("chunk:\n  max_tokens: true\n", "must be a number")):
        bad.write_text(text)
        assert main(["index", str(vault), "--db", str(db), "--config", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert match in err and str(bad) in err and err.count("\n") == 0


def test_index_languages_win_over_a_config_that_differs(small_index, fake_cfg, fake_runner, caplog):
    from fanout.pipelines.search import Searcher, SearchOptions

    _, db = small_index
    en_only = fake_cfg.replace(index={"languages": ("en",)})
    s = Searcher(db, "t", en_only, fake_runner)
    assert s.cfg.index.languages == ("en", "ru") and "searching the index's" in caplog.text
    res = s.search([{"id": "ru", "query": "блинов молоко"}], SearchOptions(expand=False))
    assert res.results.to_pylist()[0]["path"] == "Рецепты/Блины.md"


def test_a_damaged_vector_row_is_found_and_the_next_index_run_re_embeds_its_note(small_index, fake_cfg,
                                                                                  fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.store.db import Collection

    vault, db = small_index
    col = Collection(db, "t")
    tbl = col.table(col.chunks_name)
    victim = "Sync/Sync your notes.md"
    rows = tbl.search().where(f"path = '{victim}'").limit(None).to_arrow()
    vec = np.asarray(rows["vector"].to_pylist(), np.float32) * 3e7  # what random bytes over floats look like
    tbl.delete(f"path = '{victim}'")  # (LanceDB itself refuses NaN vectors on add)
    tbl.add(rows.set_column(rows.column_names.index("vector"), "vector",
                            pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), DIM)))
    m = col.read_manifest()
    col.write_manifest({**m, "tables": col.table_versions()})  # damage inside the version readers pin
    assert col.verify()[1] == [victim]
    s = index_vault(vault, db, "t", fake_cfg, fake_runner, full_check=True)
    assert s.repaired == 1 and "repaired 1 notes" in s.text() and Collection(db, "t").verify()[1] == []
    res = Searcher(db, "t", fake_cfg, fake_runner).search([{"id": "q", "query": "sync your notes"}],
                                                          SearchOptions(expand=False, rerank=False))
    assert res.results.to_pylist()[0]["path"] == victim


def test_cli_index_of_an_empty_vault_path_is_an_error(tmp_path, capsys):
    from fanout.cli.main import main

    assert main(["index", "", "--db", str(tmp_path / "db")]) == 2
    err = capsys.readouterr().err
    assert "vault path is empty" in err and not (tmp_path / "db").exists()


def test_a_chunking_change_rebuilds_but_reuses_identical_vectors(small_index, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    vault, db = small_index
    (vault / "Long.md").write_text("## Long\n" + "\n\n".join(f"Paragraph {i} of a long note about sync."
                                                              for i in range(200)), encoding="utf-8")
    first = index_vault(vault, db, "t", fake_cfg, fake_runner)
    assert first.embedded_notes == 1
    s = index_vault(vault, db, "t", fake_cfg.replace(chunk={"max_tokens": 200}), fake_runner)
    assert s.rebuilt and s.reused_chunks >= 6  # the short notes chunk the same: their vectors are kept
    assert 0 < s.embedded_chunks < s.chunks  # only the long note's new pieces are embedded
    assert f"reused {s.reused_chunks} vectors" in s.text()


def test_mcp_get_never_blocks_on_a_fifo_or_follows_a_link_out(small_index, fake_cfg, fake_runner, tmp_path):
    pytest.importorskip("mcp")
    from fanout.api.notes import (
        NoteError,  # ToolArgError and the resolver's errors: both refused to the client
    )
    from fanout.serve.mcp import FanoutTools

    vault, db = small_index
    tools = FanoutTools(db, "t", fake_cfg, fake_runner)
    os.mkfifo(vault / "pipe.md")
    (tmp_path / "secret.md").write_text(SECRET)
    os.symlink(tmp_path / "secret.md", vault / "out.md")
    for path in ("pipe.md", "out.md", "../secret.md"):
        with pytest.raises(NoteError):
            bounded(lambda p=path: tools.get({"path": p}), 10)
    assert tools.get({"path": "Рецепты/Блины.md"})["title"]
