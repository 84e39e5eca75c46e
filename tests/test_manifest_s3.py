"""The manifest module (fanout/store/manifest.py) and what reads it, on an s3:// db served by moto on loopback
(test_storage_s3.py's server): index, manifest read and write, collection list, status, remove; every access
through fanout/store/storage.py, never the local file system (fake profile, no model)."""

from __future__ import annotations

import json

import pytest

from fanout.store import manifest, storage
from fanout.store.db import Collection
from fanout.store.integrity import IndexStateError
from tests.support import s3 as _s3
from tests.support.vault import NOTES, write_vault

s3 = _s3.s3  # a fixture (tests/support/s3.py): the loopback S3 server


@pytest.fixture
def s3cfg(s3, monkeypatch):
    from fanout.config import load_config

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)  # only the config reaches the server
    return load_config("fake").replace(storage={"endpoint": s3, "region": "us-east-1", "access_key_id": "testing",
                                                "secret_access_key": "testing"})


def test_index_manifest_list_status_remove_on_s3(tmp_path, s3cfg, capsys, monkeypatch):
    from fanout.pipelines.index import index_vault

    from fanout.api.catalog import collection_names, list_collections, remove_collection, status
    from fanout.exec.runner import Runner

    db, scfg = "s3://fanout-test/manifests/db", s3cfg.storage
    assert manifest.names(db, scfg) == [] and collection_names(db, s3cfg) == []
    vault = write_vault(tmp_path / "v", NOTES)
    with Runner(s3cfg) as r:
        first = index_vault(vault, db, "a", s3cfg, r)
        index_vault(vault, db, "b", s3cfg, r)
        again = index_vault(vault, db, "a", s3cfg, r)  # reads its old manifest from the bucket: nothing to do
    assert first.embedded_notes == len(NOTES) and again.embedded_notes == 0 and not again.rebuilt

    # the manifest is an object in the bucket, named and read by the one module
    assert manifest.path(db, "a") == f"{db}/a.manifest.json"
    assert "a.manifest.json" in storage.list_dir(db, scfg)
    stored = json.loads(storage.read_text(manifest.path(db, "a"), scfg))
    col = Collection(db, "a", s3cfg)
    assert col.read_manifest() == stored == manifest.read(db, "a", scfg)
    assert col.stored_manifest()["stats"]["notes"] == len(NOTES) == col.require()["stats"]["notes"]
    assert manifest.stamp(db, "a", scfg) is not None and manifest.stamp(db, "nope", scfg) is None
    assert manifest.read(db, "nope", scfg) == {} and manifest.read_checked(db, "nope", "hint", scfg) is None

    # collections listed through storage (no local folder exists for an s3:// db)
    assert collection_names(db, s3cfg) == ["a", "b"] == manifest.names(db, scfg)
    rows = list_collections(db, s3cfg)
    assert [(x["collection"], x["notes"]) for x in rows] == [("a", len(NOTES)), ("b", len(NOTES))]
    st = status(col, s3cfg, detail=True)
    assert st["collection"] == "a" and st["notes"] == len(NOTES) and st["vault"] == str(vault.resolve())

    # the CLI lists them too (credentials from the usual AWS_* variables here)
    from fanout.cli.main import main

    for k, v in (("AWS_ENDPOINT_URL", scfg.endpoint), ("AWS_ACCESS_KEY_ID", "testing"),
                 ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_REGION", "us-east-1")):
        monkeypatch.setenv(k, v)
    capsys.readouterr()
    assert main(["collection", "list", "--db", db, "--config", "fake", "--json"]) == 0
    assert [x["collection"] for x in json.loads(capsys.readouterr().out)] == ["a", "b"]
    assert main(["status", "--db", db, "-c", "a", "--config", "fake"]) == 0
    assert str(len(NOTES)) in capsys.readouterr().out

    # a damaged manifest in the bucket: read_checked names it, the index run logs it and rebuilds
    storage.write_text(manifest.path(db, "b"), "{not json", scfg)
    with pytest.raises(IndexStateError, match="b.manifest.json"):
        Collection(db, "b", s3cfg).stored_manifest()
    with Runner(s3cfg) as r:
        assert index_vault(vault, db, "b", s3cfg, r).rebuilt
    assert Collection(db, "b", s3cfg).require()["stats"]["notes"] == len(NOTES)

    dropped = remove_collection(db, "b", s3cfg)
    assert "b.manifest.json" in dropped and collection_names(db, s3cfg) == ["a"]
    assert not manifest.exists(db, "b", scfg) and manifest.remove(db, "b", scfg) is False
