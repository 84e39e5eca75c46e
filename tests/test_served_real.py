"""A real OpenAI-compatible server: llama-cpp-python's own (`python -m llama_cpp.server`, through
scripts/llama_server.py, which loads this wheel's CPU kernels first) serving the local profile's embedder GGUF
on 127.0.0.1. Five notes of the sample vault indexed and searched through it give the in-actor embedder's
chunks, vectors (within float noise) and the same pages in the same ranks for the sample queries about them."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.model
# five notes of the sample vault (the pages four of its queries ask for, EN and RU): the whole vault's 179 chunks,
# embedded twice, took 8.5 min on the 2 shared cores
NOTES = ("en/Setup/Backups.md", "en/Setup/Network Layout.md", "en/Setup/Power and UPS.md", "en/Setup/VPN Access.md",
         "ru/Настройка/Доступ по VPN.md")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _serve(log: Path, *args: str):
    """llama_cpp.server on a free loopback port with `args`; yields its base URL; stopped on exit."""
    port = _free_port()
    cmd = [sys.executable, str(ROOT / "scripts" / "llama_server.py"), *args, "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"llama_cpp.server did not start: {log.read_text()[-3000:]}") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    from fanout.actors._llama import model_path

    from fanout.config import load_config

    with _serve(tmp_path_factory.mktemp("server") / "server.log", "--model", str(model_path(load_config(), "embedder")),
                "--model_alias", "embeddinggemma", "--embedding", "true", "--n_ctx", "512", "--n_batch", "512",
                "--n_ubatch", "512", "--n_threads", "2") as url:
        yield url


def test_served_embedder_equals_the_in_actor_one_on_the_sample_vault(tmp_path, llama_server):
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.config import load_config
    from fanout.exec.runner import Runner
    from fanout.store.db import Collection

    # the same chunks both ways (the served embedder's are counted by its server's /extras/tokenize/count), and
    # the same groups of 8 texts a call as the in-actor embedder (llama.cpp's sums follow the decode's shape)
    local = load_config("local").replace(cache={"enabled": False})
    served = local.replace(models={"embedder": f"openai:embeddinggemma@{llama_server}"},
                           remote={"batch_size": 8, "concurrency": 1})
    vault, q = tmp_path / "vault", tmp_path / "queries.jsonl"
    for note in NOTES:
        (vault / note).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "samples" / "vault" / note, vault / note)
    rows = [json.loads(x) for x in (ROOT / "samples" / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if set(r.get("relevant", [])) <= set(NOTES)]
    assert len(rows) == 4
    q.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = {}
    for name, cfg in (("local", local), ("served", served)):
        with Runner(cfg) as runner:
            index_vault(vault, tmp_path / name, "s", cfg, runner)
            run_batch(q, tmp_path / f"{name}.jsonl", Searcher(tmp_path / name, "s", cfg, runner), SearchOptions(n=5))
        col = Collection(tmp_path / name, "s")
        chunks = col.table(col.chunks_name).to_arrow().sort_by("chunk_id")
        out[name] = (chunks["chunk_id"].to_pylist(), np.asarray(chunks["vector"].to_pylist()),
                     [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()])
    (ids_a, vec_a, res_a), (ids_b, vec_b, res_b) = out["local"], out["served"]
    assert ids_a == ids_b and vec_a.shape == vec_b.shape and vec_a.shape[1] == 768
    diff = float(np.abs(vec_a - vec_b).max())
    assert diff < 1e-3, diff  # float noise, not another model (another quantization moves them ~1e-2)
    m = Collection(tmp_path / "served", "s").read_manifest()["embedder"]
    assert m["file"].startswith("openai:embeddinggemma@127.0.0.1:") and len(m["sha256"]) == 64
    pages = [[(r["path"], r["rank"]) for r in row["results"]] for row in res_a]
    assert pages == [[(r["path"], r["rank"]) for r in row["results"]] for row in res_b]
    for ra, rb in zip(res_a, res_b):
        np.testing.assert_allclose([r["score"] for r in ra["results"]], [r["score"] for r in rb["results"]], atol=1e-3)


def test_served_token_counts_equal_the_local_tokenizer(llama_server):
    """Every sample note's prompt (EN and RU, a title each) counted by the server's tokenizer and by the local
    vocab-only load: the same numbers, so the chunker cuts the same chunks for both embedders."""
    from fanout.actors.tokenizer import PromptCounter, ServedCounter, shared_counter

    from fanout.config import load_config

    local = load_config("local")
    served = local.replace(models={"embedder": f"openai:embeddinggemma@{llama_server}"})
    a, b = PromptCounter(local), shared_counter(served)
    assert isinstance(b, ServedCounter)
    notes = sorted((ROOT / "samples" / "vault").rglob("*.md"))
    texts = [(p.read_text(encoding="utf-8")[:3000], p.stem) for p in notes]
    assert sum(len(t.encode()) > local.embedder.n_ctx for t, _ in texts) >= 10  # most go to the tokenizers
    assert [a(t, title) for t, title in texts] == [b(t, title) for t, title in texts]


def test_served_expander_and_reranker_answer(tmp_path):
    """The local profile's smallest instruct GGUF (SmolLM2-135M, chat template included) behind llama_cpp.server
    as expander and as yes/no reranker: `structured: auto` finds that this server takes a grammar, not OpenAI's
    json_schema (a 422), and the strict parser reads its lines; the logprobs reranker scores in 0..1."""
    import pyarrow as pa
    from fanout.actors.served import ServedExpander, ServedReranker

    from fanout.config import load_config
    from fanout.models.files import provision_model

    path = provision_model("smollm2-135m-instruct-q4_1")
    with _serve(tmp_path / "server.log", "--model", str(path), "--model_alias", "smollm2", "--n_ctx", "1024",
                "--n_threads", "2") as url:
        cfg = load_config("local").replace(models={"expander": f"openai:smollm2@{url}", "reranker": f"openai:smollm2@{url}"},
                                           remote={"rerank_api": "logprobs", "timeout_s": 120}, expand={"max_tokens": 80})
        exp = ServedExpander(cfg)
        row = exp(pa.table({"qid": ["1"], "query": ["restore a file from the nightly backup"]})).to_pylist()[0]
        assert row["error"] is None and exp.structured == "grammar" and row["raw"].startswith("lex: ")
        assert exp.stats["queries"] == 1 and row["source"] in ("model", "fallback")
        scores = ServedReranker(cfg)(pa.table({"query": ["nightly backup schedule"] * 2, "passage": [
            "Restic backs up the NAS every night at 02:30.", "Borscht needs beets roasted for an hour."]}))
        got = scores["_rerank"].to_pylist()
        assert all(s is not None and 0.0 <= s <= 1.0 for s in got), got
