"""The index over a hostile vault with a hashed bag-of-words embedder (`HashEmbedder`, no model, so 10,000
tiny chunks index in seconds): nothing from outside reaches a table; damaged data files, manifests and vector
rows are named and repaired; NaN vectors never enter; a chunking change reuses identical vectors; the MCP
`get` tool never blocks on a FIFO or follows a link out. Moved from tests/test_hostile.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.support import hostile_vault
from tests.support.hostile_vault import DIM, SECRET, HashEmbedder, bounded

hostile = hostile_vault.hostile  # a fixture (tests/support/hostile_vault.py)


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


class NaNEmbedder(HashEmbedder):
    def __call__(self, batch):
        out = super().__call__(batch)
        vecs = np.asarray(out["vector"].to_pylist(), dtype=np.float32)
        for i, t in enumerate(batch.column("text").to_pylist()):
            if "POISON" in (t or ""):
                vecs[i] = np.nan
        col = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), DIM)
        return out.set_column(out.column_names.index("vector"), "vector", col)


@pytest.mark.slow
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
