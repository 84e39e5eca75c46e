"""A long-lived search session across a re-index: every request reads one index version (Collection.refresh).

The index run adds a note, changes one and deletes one while a Searcher (as the MCP server holds it) keeps
answering. Each answer must come wholly from the old index or wholly from the new one: a new note always has
its snippet and heading, a deleted note never appears once the new version is visible, and the changed note's
snippet matches the version the answer came from.
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from tests.support.hostile_vault import HashEmbedder
from tests.support.vault import write_vault

OLD = {
    "keep.md": "# Keep\nA note that stays the same about gardening.\n",
    "change.md": "# Change\nThe changed note says version one of the walrus.\n",
    "gone.md": "# Gone\nThis zebra note will be deleted soon.\n",
    **{f"filler/{i}.md": f"# Filler {i}\nFiller text number {i} about nothing much.\n" for i in range(40)},
}
NEW_NOTE = "## Quokka facts\nThe quokka is a small marsupial, a brand new note.\n"


class SlowHashEmbedder(HashEmbedder):
    """Sleeps per call so the re-index is slow enough for many searches to run during it."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        time.sleep(0.02)
        return super().__call__(batch)


@pytest.fixture()
def cfg_fake(tmp_path):
    from fanout.config import load_config

    model = tmp_path / "hash.gguf"
    model.write_bytes(b"fake")
    # batch_size 4 x count 1 -> groups of 64 chunks: the re-index writes several times before it finishes
    return load_config("local").replace(models={"embedder": str(model)}, chunk={"check_context": False},
                                        embedder={"batch_size": 4}, cache={"enabled": False})


def test_search_session_across_a_reindex_never_mixes_versions(tmp_path, cfg_fake, monkeypatch):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    import fanout.exec.runner as fr
    import fanout.models.identity as fi

    monkeypatch.setitem(fi.ROLES, "embedder", f"{__name__}:SlowHashEmbedder")
    vault = write_vault(tmp_path / "v", OLD)
    db = tmp_path / "db"
    with fr.Runner(cfg_fake) as r:
        index_vault(vault, db, "c", cfg_fake, r)
    # the new state: one note added, one changed, one deleted, and every filler changed (a long re-index)
    (vault / "gone.md").unlink()
    (vault / "quokka.md").write_text(NEW_NOTE, encoding="utf-8")
    (vault / "change.md").write_text("# Change\nThe changed note says version two of the walrus.\n")
    for i in range(40):
        (vault / f"filler/{i}.md").write_text(f"# Filler {i}\nRewritten filler {i}, still nothing much.\n")

    queries = [{"id": "z", "query": "zebra note deleted"}, {"id": "q", "query": "quokka marsupial"},
               {"id": "w", "query": "walrus version"}]
    opts = SearchOptions(n=10, expand=False, rerank=False)
    seen = {"old": 0, "new": 0}
    problems: list[str] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def reindex():
        try:
            with fr.Runner(cfg_fake) as r2:
                index_vault(vault, db, "c", cfg_fake, r2)
        except BaseException as e:  # noqa: BLE001  (asserted in the test thread)
            errors.append(e)
        finally:
            done.set()

    def check(res) -> str:
        rows = res.results.to_pylist()
        paths = {r["path"] for r in rows}
        walrus = next((r for r in rows if r["path"] == "change.md"), None)
        state = "new" if "quokka.md" in paths else "old" if "gone.md" in paths else None
        if walrus is not None:
            w_state = "new" if "two" in walrus["snippet"] else "old" if "one" in walrus["snippet"] else None
            if w_state is None:
                problems.append(f"change.md served without its text: {walrus}")
            elif state is not None and w_state != state:
                problems.append(f"torn answer: {sorted(paths)} with change.md snippet {walrus['snippet']!r}")
            state = state or w_state
        if "quokka.md" in paths and "gone.md" in paths:
            problems.append(f"new and deleted notes in one answer: {sorted(paths)}")
        for r in rows:
            if r["path"] == "quokka.md" and ("quokka" not in r["snippet"] or r["heading"] != "Quokka facts"):
                problems.append(f"new note without its snippet/heading: {r}")
            if not r["snippet"]:
                problems.append(f"empty snippet: {r}")
        return state or "old"

    with fr.Runner(cfg_fake) as r:
        searcher = Searcher(db, "c", cfg_fake, r)  # opened once, like `fanout mcp`
        t = threading.Thread(target=reindex)
        t.start()
        n = 0
        while not done.is_set() or n == 0:
            seen[check(searcher.search(queries, opts))] += 1
            n += 1
        t.join(120)
        assert not errors, errors
        final = searcher.search(queries, opts)
        assert check(final) == "new"
        paths = {x["path"] for x in final.results.to_pylist()}
        assert "gone.md" not in paths and "quokka.md" in paths
    assert not problems, problems[:5]
    assert seen["old"] >= 1, seen  # the session did read during the re-index


def test_optimize_moves_readers_to_the_compacted_versions_only_when_no_index_run_is_pending(tmp_path,
                                                                                           cfg_fake,
                                                                                           monkeypatch):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.optimize_tables import optimize_tables

    import fanout.exec.runner as fr
    import fanout.models.identity as fi
    from fanout.store.db import Collection

    monkeypatch.setitem(fi.ROLES, "embedder", f"{__name__}:HashEmbedder")
    vault = write_vault(tmp_path / "v", OLD)
    db = tmp_path / "db"
    with fr.Runner(cfg_fake) as r:
        index_vault(vault, db, "c", cfg_fake, r)
        for i in range(3):  # incremental runs: more fragments for the compaction to fold
            (vault / f"filler/{i}.md").write_text(f"# Filler {i}\nChanged filler {i}.\n")
            index_vault(vault, db, "c", cfg_fake, r)
    col = Collection(db, "c")
    pinned = col.read_manifest()["tables"]
    optimize_tables(db, "c")
    moved = col.read_manifest()["tables"]
    assert moved == col.table_versions() and moved[col.chunks_name] > pinned[col.chunks_name]
    col.table(col.documents_name).delete("path = 'keep.md'")  # a write the manifest does not name yet
    optimize_tables(db, "c")
    assert col.read_manifest()["tables"] == moved  # readers stay on the completed index run


def test_requests_during_a_rebuild_say_so_instead_of_reading_a_partial_index(tmp_path, cfg_fake, monkeypatch):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    import fanout.exec.runner as fr
    import fanout.models.identity as fi
    from fanout.store.db import Collection
    from fanout.store.integrity import IndexStateError

    monkeypatch.setitem(fi.ROLES, "embedder", f"{__name__}:HashEmbedder")
    vault = write_vault(tmp_path / "v", OLD)
    db = tmp_path / "db"
    with fr.Runner(cfg_fake) as r:
        index_vault(vault, db, "c", cfg_fake, r)
        searcher = Searcher(db, "c", cfg_fake, r)
        col = Collection(db, "c")
        real_write = Collection.write_manifest
        seen = []

        def spy(self, manifest):  # at the first group's write of the rebuild, a request comes in
            real_write(self, manifest)
            if manifest.get("building"):
                with pytest.raises(IndexStateError, match="being rebuilt"):
                    searcher.search([{"id": "q", "query": "walrus"}], SearchOptions(expand=False))
                seen.append(True)

        monkeypatch.setattr(Collection, "write_manifest", spy)
        index_vault(vault, db, "c", cfg_fake, r, rebuild=True)
        assert seen and "building" not in col.read_manifest()
        assert searcher.search([{"id": "q", "query": "walrus"}], SearchOptions(expand=False)).results.num_rows
