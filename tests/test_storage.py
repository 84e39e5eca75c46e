"""Storage: locations (relative, absolute, file://, s3://), storage options, object helpers, and a collection's
indexes (BTREE, vector index above the threshold, Matryoshka re-derivation) recorded in the manifest.

Index tests here use a hashed fake embedder (no model call) so a 400-chunk collection builds in seconds.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest

from fanout.config import StorageConfig
from fanout.store import storage
from fanout.store.db import Collection
from fanout.store.vectors import index_columns, truncate_vectors, vector_dims
from tests.support.storage import FakeRunner, many_notes
from tests.support.vault import NOTES, write_vault


# -- locations --------------------------------------------------------------------------------------------
def test_normalize_uri_local_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.normalize_uri("db") == str(tmp_path / "db")  # a bare "db..." name is not LanceDB Cloud
    assert storage.normalize_uri("./x/db2") == str(tmp_path / "x" / "db2")
    assert storage.normalize_uri(tmp_path / "abs") == str(tmp_path / "abs")
    assert storage.normalize_uri(f"file://{tmp_path}/f%20x") == str(tmp_path / "f x")
    assert storage.normalize_uri("~/kb").startswith(os.path.expanduser("~"))


def test_normalize_uri_keeps_object_store_uris():
    assert storage.normalize_uri("s3://bucket/db/") == "s3://bucket/db"
    assert storage.normalize_uri("S3://bucket//a/./db") == "s3://bucket/a/db"
    assert storage.normalize_uri("gs://b") == "gs://b"
    assert storage.normalize_uri("az://container/x") == "az://container/x"
    assert storage.join("s3://bucket/db", "t.manifest.json") == "s3://bucket/db/t.manifest.json"
    assert storage.is_remote("s3://b/x") and not storage.is_remote("x")


@pytest.mark.parametrize("bad, match", [
    ("", "is empty"), ("s3://", "names no bucket"), ("http://host/db", "scheme 'http' is not supported"),
    ("db://my-cloud-db", "scheme 'db' is not supported.*s3://bucket/path"),
    ("file://host/x", "absolute path"),
])
def test_normalize_uri_errors_name_the_fix(bad, match):
    with pytest.raises(storage.StorageError, match=match):
        storage.normalize_uri(bad)


def test_storage_options_from_env_and_config_and_redacted(monkeypatch):
    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sekrit-env")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    opts = storage.storage_options("s3://b/db")
    assert opts == {"aws_endpoint": "http://127.0.0.1:9", "aws_access_key_id": "AKIDENV",
                    "aws_secret_access_key": "sekrit-env", "allow_http": "true"}
    cfg = StorageConfig(endpoint="https://minio.example:9000", region="eu-west-1", secret_access_key="cfg-secret",
                        options={"aws_virtual_hosted_style_request": "false"})
    opts = storage.storage_options("s3://b/db", cfg)
    assert opts["aws_endpoint"] == "https://minio.example:9000" and opts["aws_region"] == "eu-west-1"
    assert opts["aws_secret_access_key"] == "cfg-secret" and "allow_http" not in opts
    assert opts["aws_virtual_hosted_style_request"] == "false"
    shown = storage.redact(opts)
    assert "cfg-secret" not in json.dumps(shown) and "AKIDENV" not in json.dumps(shown)
    assert shown["aws_endpoint"] == "https://minio.example:9000"
    assert "cfg-secret" not in repr(cfg)  # never in a logged config either
    assert storage.storage_options("/local/db", cfg) == {}


def test_local_object_helpers(tmp_path):
    target = tmp_path / "d" / "m.json"
    storage.write_text(target, "one")
    storage.write_text(target, "two")  # replaced atomically, no temp file left behind
    assert storage.read_text(target) == "two" and storage.list_dir(tmp_path / "d") == ["m.json"]
    assert storage.exists(target) and not storage.exists(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="nope.json does not exist"):
        storage.read_text(tmp_path / "nope.json")
    storage.remove_tree(tmp_path / "d")
    assert not storage.exists(tmp_path / "d") and storage.list_dir(tmp_path / "d") == []


def test_truncate_vectors_renormalises():
    v = np.array([[3.0, 4.0, 12.0]], np.float32) / 13.0
    cut = truncate_vectors(v, 2)
    assert np.allclose(cut, [[0.6, 0.8]]) and truncate_vectors(v, 3) is not None
    with pytest.raises(ValueError, match="fewer than the 4 asked for"):
        truncate_vectors(v, 4)


@pytest.fixture(autouse=True)
def _no_model_file(tmp_path, monkeypatch, request):
    """Index tests with the fake embedder need no GGUF: the manifest hashes a stand-in file."""
    if "slow" in request.keywords:
        return
    import fanout.pipelines.index as pi
    import fanout.pipelines.search as ps

    def ident(cfg, role, provision=True):  # the manifest's embedder identity, as a stand-in file would give
        return "fake-embedder.gguf", "fake-embedder-sha"

    monkeypatch.setattr(pi, "model_identity", ident)
    monkeypatch.setattr(ps, "model_identity", ident)


@pytest.fixture
def fcfg(cfg):
    return cfg.replace(index={"vector_index_min_rows": 300, "exact_search_rows": 100, "vector_index_type": "IVF_HNSW_SQ",
                              "vector_partitions": 2})


@pytest.mark.model
def test_above_threshold_vector_and_scalar_indexes_land_in_the_manifest(tmp_path, fcfg):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.optimize_tables import optimize_tables

    vault = write_vault(tmp_path / "v", many_notes(250))
    db = tmp_path / "db"
    with FakeRunner(fcfg) as r:
        s = index_vault(vault, db, "t", fcfg, r)
        assert s.chunks == 250 and s.vector_index == "none"  # below 300: brute force
        col = Collection(db, "t", fcfg)
        assert index_columns(col.table("t_chunks")).get("chunk_id") == "BTree"
        assert index_columns(col.table("t_chunks")).get("path") == "BTree"
        assert index_columns(col.table("t_documents")).get("path") == "BTree"
        assert col.read_manifest()["vector_index"] is None
        write_vault(vault, {f"More/Note {i}.md": f"Extra note {i} on subject {i % 9}.\n" for i in range(100)})
        s = index_vault(vault, db, "t", fcfg, r)
        assert s.embedded_notes == 100 and s.chunks == 350 and s.vector_index == "built IVF_HNSW_SQ"
    m = Collection(db, "t", fcfg).read_manifest()
    vi = m["vector_index"]
    assert vi["index_type"] == "IVF_HNSW_SQ" and vi["num_partitions"] == 2 and vi["rows"] == 350
    assert vi["metric"] == "cosine" and vi["dim"] == 768 and vi["m"] == fcfg.index.hnsw_m
    assert m["vectors"] == {"dim": 768, "full_dim": 768, "full_column": None, "distance": "cosine"}
    assert m["scalar_indexes"] == {"t_chunks": ["chunk_id", "path"], "t_documents": ["path"]}
    col = Collection(db, "t", fcfg)
    assert index_columns(col.table("t_chunks"))["vector"] == "IvfHnswSq"
    # appended rows stay searchable before `optimize` folds them into the index
    write_vault(vault, {"Fresh/Only here.md": "A completely fresh note about zeppelins.\n"})
    with FakeRunner(fcfg) as r:
        s = index_vault(vault, db, "t", fcfg, r)
        assert s.vector_index == "kept IVF_HNSW_SQ"
    col = Collection(db, "t", fcfg)
    fresh = col.table("t_chunks").search().where("path = 'Fresh/Only here.md'").select(["vector"]).to_arrow()
    hit = col.vector_search_many([fresh["vector"].to_pylist()[0]], 5, ["path"])
    assert hit["path"].to_pylist()[0] == "Fresh/Only here.md"
    stats = col.table("t_chunks").index_stats("vector_idx")
    assert stats.num_unindexed_rows == 1
    optimize_tables(db, "t", cfg=fcfg)
    assert Collection(db, "t", fcfg).table("t_chunks").index_stats("vector_idx").num_unindexed_rows == 0


@pytest.mark.model
def test_matryoshka_dimension_is_rederived_not_reembedded(tmp_path, cfg, monkeypatch):
    from fanout.pipelines.index import index_vault

    import fanout.store.vectors

    monkeypatch.setattr(fanout.store.vectors, "REDERIVE_BATCH", 7)  # the rewrite streams in several batches

    vault = write_vault(tmp_path / "v", many_notes(20))
    db = tmp_path / "db"
    with FakeRunner(cfg) as r:
        index_vault(vault, db, "t", cfg, r)
        full = Collection(db, "t").table("t_chunks").to_arrow().sort_by("chunk_id")
        s = index_vault(vault, db, "t", cfg.replace(index={"vector_dim": 256}), r)
        assert s.embedded_chunks == 0 and s.rederived == "768 -> 256" and not s.rebuilt
        col = Collection(db, "t", cfg.replace(index={"vector_dim": 256}))
        t = col.table("t_chunks").to_arrow().sort_by("chunk_id")
        assert vector_dims(col.table("t_chunks")) == (256, 768)
        want = truncate_vectors(np.asarray(full["vector"].to_pylist()), 256)
        assert np.allclose(np.asarray(t["vector"].to_pylist()), want, atol=1e-6)
        assert col.read_manifest()["vectors"]["full_column"] == "vector_full"
        # a 768-d query vector is cut to 256 at search time: a chunk finds itself first
        hit = col.vector_search_many([full["vector"].to_pylist()[3]], 3, ["chunk_id"])
        assert hit["chunk_id"].to_pylist()[0] == full["chunk_id"].to_pylist()[3]
        # new notes arrive at the new size; then back to full without re-embedding
        write_vault(vault, {"New.md": "A new note.\n"})
        s = index_vault(vault, db, "t", cfg.replace(index={"vector_dim": 256}), r)
        assert s.embedded_notes == 1 and not s.rederived
        s = index_vault(vault, db, "t", cfg, r)
        assert s.embedded_chunks == 0 and s.rederived == "256 -> 768"
        back = Collection(db, "t").table("t_chunks").to_arrow()
        assert "vector_full" not in back.column_names
        back = back.filter(pa.compute.not_equal(back["path"], "New.md")).sort_by("chunk_id")
        assert np.allclose(np.asarray(back["vector"].to_pylist()), np.asarray(full["vector"].to_pylist()))
        with pytest.raises(ValueError, match="vector_dim is 1024 but the embedder gives 768"):
            write_vault(vault, {"New2.md": "Another.\n"})
            index_vault(vault, db, "t", cfg.replace(index={"vector_dim": 1024}), r)


# -- real embedder: any location as --db -------------------------------------------------------------------
SMALL = {k: NOTES[k] for k in ("Sync/Sync your notes.md", "Рецепты/Блины.md")}


@pytest.mark.parametrize("where", ["db", "./x/db2", "ABS"])
def test_db_locations_index_then_search(tmp_path, monkeypatch, cfg, runner, where):
    from fanout.cli.main import main

    vault = write_vault(tmp_path / "v", SMALL)
    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "abs" / "db") if where == "ABS" else where
    assert main(["index", str(vault), "--db", db, "--collection", "c"]) == 0
    from fanout.pipelines.search import Searcher

    out = Searcher(db, "c", cfg, runner).search([{"id": "q", "query": "pancakes with milk and eggs"}])
    assert out.results["path"].to_pylist()[0] == "Рецепты/Блины.md"
    assert main(["query", "how do I sync my vault", "--db", db, "--collection", "c", "--json"]) == 0
    assert os.path.isdir(storage.normalize_uri(db))


@pytest.mark.model
def test_optimize_builds_the_vector_index_once_the_threshold_is_passed(tmp_path, fcfg):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.optimize_tables import optimize_tables, optimize_text

    vault = write_vault(tmp_path / "v", many_notes(250))
    with FakeRunner(fcfg) as r:
        assert index_vault(vault, tmp_path / "db", "t", fcfg, r).vector_index == "none"
    lower = fcfg.replace(index={"vector_index_min_rows": 200})
    rows = optimize_tables(tmp_path / "db", "t", cfg=lower)
    assert [r["index_built"] for r in rows][:1] == ["IVF_HNSW_SQ"]
    assert "built IVF_HNSW_SQ" in optimize_text(rows)
    m = Collection(tmp_path / "db", "t").read_manifest()
    assert m["vector_index"]["rows"] == 250 and m["vector_index"]["num_partitions"] == 2
    assert optimize_tables(tmp_path / "db", "t", cfg=lower)[0]["index_built"] == ""  # nothing to do now
