"""Served models (`models.<role>: openai:<model>@<base_url>`) against a small server of our own on 127.0.0.1
(tests/support/served_server.py): milliseconds, no model.

Checked: the spec and the `remote:` section are validated with clear messages; the three roles answer through
the server with the local roles' columns; the stage list and caches are the same (a cached vector is never
requested again); an index records the served embedder's name, host and probe fingerprint and refuses another
model behind the same name; the key reaches the server and nowhere else; faults are retried where that helps
and otherwise give a ModelError naming the backend and what was sent, or the role's error row.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.support.served import served_cfg
from tests.support.served_server import FakeServer
from tests.support.vault import write_vault

KEY = "sk-test-0123456789abcdef"


@pytest.fixture()
def srv():
    with FakeServer() as s:
        yield s


def test_spec_and_remote_section_are_validated():
    from fanout.config import ConfigError, load_config

    base = load_config("local")
    for spec, msg in [("openai:emb", "is not a served model spec; write openai:<model>@<base_url>"),
                      ("openai:m@http://user:pw@h/v1", "carries credentials"),
                      ("openai:m@http://h/v1?api_key=x", "no query or fragment")]:
        with pytest.raises(ConfigError, match=msg):
            base.replace(models={"embedder": spec})
    with pytest.raises(ConfigError, match=r"remote.concurrency must be >= 1, got 0"):
        base.replace(remote={"concurrency": 0})
    with pytest.raises(ConfigError, match=r"remote.structured must be one of \['auto', 'grammar', 'json_schema', 'none'\]"):
        base.replace(remote={"structured": "regex"})
    cfg = base.replace(models={"embedder": "openai:nomic-embed@https://gpu.example:8443/v1/"})
    spec = cfg.served("embedder")
    assert (spec.model, spec.base_url, spec.host) == ("nomic-embed", "https://gpu.example:8443/v1", "gpu.example:8443")
    assert cfg.served("expander") is None  # the other roles stay local
    pool = cfg.pool("embedder")  # a light pool: no model, little CPU, no GPU, a call fills every request slot
    assert (pool.num_cpus, pool.n_gpu_layers, pool.batch_size) == (0.1, 0, 32 * 4)
    assert load_config("local").pool("embedder") == load_config("local").embedder  # nothing changes without a server


def test_embedder_batches_bounds_in_flight_and_normalises(srv):
    from fanout.actors.embedder import format_prompt
    from fanout.actors.served import ServedEmbedder

    srv.delay_s = 0.05
    cfg = served_cfg(srv.url, batch_size=3, concurrency=2)
    emb = ServedEmbedder(cfg)
    texts = [f"note number {i} about sync" for i in range(10)]
    out = emb(pa.table({"text": texts, "role": ["document"] * 10}))
    vecs = np.asarray(out["vector"].to_pylist())
    want = np.asarray([srv.vector(format_prompt("embeddinggemma", "document", t), srv.dim) for t in texts])
    np.testing.assert_allclose(vecs, want, atol=1e-6)  # in order, though the server answers in reverse
    sizes = [len(b["input"]) for p, _, b in srv.requests if p == "embeddings"][1:]  # after the size probe
    assert sorted(sizes) == [1, 3, 3, 3] and srv.max_in_flight == 2


def test_key_reaches_the_server_only(srv, tmp_path, monkeypatch, caplog):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.errors import ModelError
    from fanout.exec.runner import Runner
    from fanout.models.served import ServedClient

    monkeypatch.setenv("FANOUT_API_KEY", KEY)
    cfg = served_cfg(srv.url).replace(models={"cache_dir": str(tmp_path / "cache")})
    caplog.set_level(logging.DEBUG)
    db, runner = tmp_path / "db", Runner(cfg)
    index_vault(write_vault(tmp_path / "vault"), db, "t", cfg, runner)
    res = Searcher(db, "t", cfg, runner).search([{"id": "a", "query": "version history"}],
                                                SearchOptions(n=3, expand=True, rerank=True))
    assert res.results.num_rows and res.errors.num_rows == 0
    assert all(h.get("Authorization") == f"Bearer {KEY}" for _, h, _ in srv.requests)
    srv.fail("embeddings", "echo_key", "echo_key")  # a server that echoes the header in its error
    client = ServedClient(cfg.served("embedder"), cfg.replace(remote={"max_retries": 1}).remote, "embedder")
    with pytest.raises(ModelError) as err:
        client.embeddings(["x"])
    assert KEY not in str(err.value) and "<key>" in str(err.value)
    assert KEY not in caplog.text
    for path in [*db.rglob("*"), *(tmp_path / "cache").rglob("*")]:  # index, manifest, caches, fingerprints
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    # a key file wins over the variable
    (tmp_path / "key").write_text("sk-from-file\n")
    c2 = ServedClient(cfg.served("embedder"), cfg.replace(remote={"api_key_file": str(tmp_path / "key")}).remote,
                      "embedder")
    c2.embeddings(["y"])
    assert srv.requests[-1][1]["Authorization"] == "Bearer sk-from-file"


def test_index_records_the_served_embedder_and_refuses_other_weights(tmp_path):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.exec.runner import Runner
    from fanout.models import served
    from fanout.store.db import Collection
    from fanout.store.integrity import IndexStateError

    vault, db = write_vault(tmp_path / "vault"), tmp_path / "db"
    with FakeServer() as a:
        cfg = served_cfg(a.url).replace(models={"cache_dir": str(tmp_path / "cache")})
        runner = Runner(cfg)
        first = index_vault(vault, db, "t", cfg, runner)
        emb = Collection(db, "t").read_manifest()["embedder"]
        host = a.url.split("//")[1].split("/")[0]
        assert emb["file"] == f"openai:emb@{host}" and len(emb["sha256"]) == 64
        n = a.count("embeddings")
        again = index_vault(vault, db, "t", cfg, runner)  # nothing new: no text is sent again
        assert first.embedded_chunks > 0 and again.embedded_chunks == 0 and a.count("embeddings") == n
        s = Searcher(db, "t", cfg, runner)
        rows = [{"id": "a", "query": "version history of a file"}]
        top = s.search(rows, SearchOptions(n=3)).results["path"].to_pylist()
        assert top[0] == "Sync/Sync your notes.md"
        n = a.count("embeddings")
        s.search(rows, SearchOptions(n=3))
        assert a.count("embeddings") == n  # the query's vector came from the cache
    served._IDENTITIES.clear()
    with FakeServer(salt="requantized") as b:  # the same name on the same port is impossible: same name, new host
        other = served_cfg(b.url).replace(models={"cache_dir": str(tmp_path / "cache")})
        with pytest.raises(IndexStateError, match="was embedded with openai:emb@"):
            Searcher(db, "t", other, Runner(other))
    served._IDENTITIES.clear()
    # other weights behind the very name the index recorded: the fingerprint refuses them
    with FakeServer(salt="requantized") as c:
        same_name = served_cfg(c.url).replace(models={"cache_dir": str(tmp_path / "cache")})
        spec = same_name.served("embedder")
        fp = served.recorded_fingerprint(spec, served.probe_vectors(served.ServedClient(spec, same_name.remote, "e")),
                                         tmp_path / "cache")
        col = Collection(db, "t")
        m = col.read_manifest()
        col.write_manifest({**m, "embedder": {**m["embedder"], "file": spec.name}})
        with pytest.raises(IndexStateError, match="probe texts now differ"):
            Searcher(db, "t", same_name, Runner(same_name))
        assert fp != m["embedder"]["sha256"]


def test_fingerprint_within_float_noise_keeps_its_id(tmp_path):
    from fanout.config import ServedSpec
    from fanout.models.served import fingerprint, recorded_fingerprint

    spec = ServedSpec("emb", "http://h/v1", "h")
    rng = np.random.default_rng(0)
    v = rng.normal(size=(3, 64))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    first = recorded_fingerprint(spec, v.tolist(), tmp_path)
    # noise of another batch shape or CPU kernel (1e-7) keeps the id, even where it crosses the 4-decimal
    # rounding of the hash; a requantized model (~2e-3 a component) gets a new one
    edge = v.copy()
    edge[0, 0] = round(edge[0, 0], 4) + 0.00005 - 5e-8
    assert fingerprint(spec, edge.tolist()) != fingerprint(spec, (edge + 1e-7).tolist())
    assert recorded_fingerprint(spec, edge.tolist(), tmp_path) == recorded_fingerprint(spec, (edge + 1e-7).tolist(),
                                                                                       tmp_path)
    assert recorded_fingerprint(spec, (v + 1e-7).tolist(), tmp_path) == first
    moved = v + rng.normal(scale=2e-3, size=v.shape)
    moved /= np.linalg.norm(moved, axis=1, keepdims=True)
    assert recorded_fingerprint(spec, moved.tolist(), tmp_path) != first


@pytest.mark.parametrize("fault", ["timeout", "429", "500", "reset", "truncated", "malformed"])
def test_transient_faults_are_retried(srv, fault):
    from fanout.models.served import ServedClient

    srv.stall_s = 1.5
    cfg = served_cfg(srv.url, timeout_s=0.5)
    client = ServedClient(cfg.served("embedder"), cfg.remote, "embedder")
    srv.fail("embeddings", fault)
    t = time.perf_counter()
    vec = client.embeddings(["hello world"])[0]
    assert np.allclose(vec, srv.vector("hello world", srv.dim)) and client.stats["retries"] == 1
    if fault == "429":  # Retry-After: 0.3 is waited for (backoff_s alone would be 0.01)
        assert time.perf_counter() - t >= 0.29


def test_exhausted_retries_and_bad_answers_name_the_backend_and_the_request(srv):
    from fanout.errors import FanoutError, ModelError
    from fanout.models.served import ServedClient

    cfg = served_cfg(srv.url, max_retries=2)
    client = ServedClient(cfg.served("embedder"), cfg.remote, "embedder")
    host = srv.url.split("//")[1].split("/")[0]
    srv.fail("embeddings", "500", "500", "500")
    with pytest.raises(ModelError, match=rf"openai:emb@{host} \(embedder\) POST /embeddings of 1 text\(s\) to "
                                         rf".*HTTP 500 .*overloaded.*after 3 tries"):
        client.embeddings(["a"])
    assert issubclass(ModelError, FanoutError)
    n = srv.count("embeddings")
    with pytest.raises(ModelError, match=r"HTTP 404 .*check the base URL"):  # a 4xx is not retried
        client.post("nowhere", {}, "POST /nowhere")
    from fanout.actors.served import ServedEmbedder

    emb = ServedEmbedder(cfg)
    srv.fail("embeddings", "wrong_dim")
    with pytest.raises(ModelError, match=rf"vectors of size \[{srv.dim + 1}\], expected {srv.dim}"):
        emb.embed_texts(["x"])
    assert srv.count("embeddings") >= n + 1
    with FakeServer() as dead:
        url = dead.url
    down = served_cfg(url, max_retries=1)
    with pytest.raises(ModelError, match=r"ConnectionRefusedError.*after 2 tries.*check that the server is up"):
        ServedClient(down.served("embedder"), down.remote, "embedder").embeddings(["a"])


def test_expander_structured_output_and_fallbacks(srv):
    from fanout.actors.served import ServedExpander

    cfg = served_cfg(srv.url)
    exp = ServedExpander(cfg)
    rows = pa.table({"qid": ["1"], "query": ["sync settings"]})
    out = exp(rows).to_pylist()[0]
    assert out["source"] == "model" and [v["kind"] for v in out["variants"]] == ["lex", "vec", "hyde"]
    body = srv.requests[-1][2]
    assert body["response_format"]["type"] == "json_schema" and body["messages"][0]["role"] == "system"
    # Russian query: the prompt is the Russian one (the query's language)
    exp(pa.table({"qid": ["r"], "query": ["настройки синхронизации"]}))
    assert "русском" in srv.requests[-1][2]["messages"][0]["content"]
    # a server that refuses response_format: auto steps down to the grammar, once, and keeps it
    srv.fail("chat/completions", "refuse_schema")
    out = exp(pa.table({"qid": ["2"], "query": ["sync devices"]})).to_pylist()[0]
    assert out["source"] == "model" and exp.structured == "grammar" and "grammar" in srv.requests[-1][2]
    # a server that says so with a 500 naming the field (llama-cpp-python) is understood too, without retries;
    # once a kind was answered, a 500 is an outage like any other (retried)
    other = ServedExpander(cfg)
    srv.fail("chat/completions", "refuse_schema_500")
    n = srv.count("chat/completions")
    assert other(pa.table({"qid": ["2"], "query": ["sync devices"]})).to_pylist()[0]["source"] == "model"
    assert other.structured == "grammar" and srv.count("chat/completions") == n + 2 and other.client.stats["retries"] == 0
    srv.fail("chat/completions", "500")
    assert other(pa.table({"qid": ["2b"], "query": ["sync phone"]})).to_pylist()[0]["source"] == "model"
    assert other.structured == "grammar" and other.client.stats["retries"] == 1
    # empty and off-format answers: the strict parser keeps nothing, the query runs alone (counted)
    srv.fail("chat/completions", "empty", "off_format")
    out = exp(pa.table({"qid": ["3", "4"], "query": ["sync notes", "code blocks"]})).to_pylist()
    assert [o["source"] for o in out] == ["fallback", "fallback"] and [o["error"] for o in out] == [None, None]
    assert exp.stats["fallback_empty"] == 2 and exp.stats["dropped_junk"] >= 1
    # a server that stays down: the row carries the error, naming the backend
    srv.fail("chat/completions", *["500"] * 10)
    out = exp(pa.table({"qid": ["5"], "query": ["version history"]})).to_pylist()[0]
    assert out["source"] == "fallback" and "openai:gen@" in out["error"] and "HTTP 500" in out["error"]
    # completions + fields format
    fcfg = served_cfg(srv.url, expand_api="completions", structured="none").replace(expand={"format": "fields"})
    out = ServedExpander(fcfg)(pa.table({"qid": ["6"], "query": ["sync settings"]})).to_pylist()[0]
    assert srv.requests[-1][0] == "completions" and out["source"] in ("model", "fallback")


def test_reranker_rerank_and_logprobs(srv):
    from fanout.actors.served import ServedReranker

    batch = pa.table({"query": ["sync settings"] * 3, "passage": ["sync settings page", "sync only", "pancakes"]})
    for api in ("rerank", "logprobs"):
        rr = ServedReranker(served_cfg(srv.url, rerank_api=api))
        scores = rr(batch)["_rerank"].to_pylist()
        assert scores[0] > scores[1] > scores[2] and all(0 <= s <= 1 for s in scores), (api, scores)
    srv.fail("rerank", *["500"] * 10)
    rr = ServedReranker(served_cfg(srv.url, max_retries=1))
    assert rr(batch)["_rerank"].to_pylist() == [None] * 3 and rr.stats["failed"] == 3


def test_a_batch_stopped_by_an_outage_resumes_without_loss_or_repeats(srv, tmp_path, monkeypatch):
    import json

    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.errors import ModelError
    from fanout.exec.runner import Runner

    monkeypatch.setenv("FANOUT_API_KEY", KEY)
    cfg = served_cfg(srv.url, max_retries=1).replace(models={"cache_dir": str(tmp_path / "cache")},
                                                      cache={"enabled": False}, runner={"slice_rows": 3})
    db, runner = tmp_path / "db", Runner(cfg)
    index_vault(write_vault(tmp_path / "vault"), db, "t", cfg, runner)
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"id": f"q{i}", "query": f"sync notes {i}"}) + "\n" for i in range(12)))
    searcher = Searcher(db, "t", cfg, runner)
    run_batch(q, tmp_path / "clean.jsonl", searcher, SearchOptions(n=3))
    srv.embedded, srv.down_after = 0, srv.count("embeddings") + 2  # two slices answered, then an outage
    with pytest.raises(ModelError, match="HTTP 503") as err:
        run_batch(q, tmp_path / "out.jsonl", searcher, SearchOptions(n=3))
    assert KEY not in str(err.value)
    assert Path(str(tmp_path / "out.jsonl") + ".parts").exists() and srv.embedded == 6
    srv.down_after = None
    run_batch(q, tmp_path / "out.jsonl", searcher, SearchOptions(n=3))  # the same command, server back
    assert srv.embedded == 12  # each query's text embedded once over the two runs
    assert (tmp_path / "out.jsonl").read_text() == (tmp_path / "clean.jsonl").read_text()
    assert KEY not in (tmp_path / "out.jsonl").read_text()  # the batch output holds no key either


def test_chunk_tokens_are_counted_by_the_servers_tokenizer_where_it_has_one(caplog):
    """remote.tokenize auto: the first tokenize endpoint that answers counts a long chunk's prompt (so a served
    embedder's chunks are the local model's); a server with none, or `estimate`, leaves the chunker's estimate."""
    from fanout.actors.embedder import format_prompt
    from fanout.actors.tokenizer import ServedCounter, shared_counter

    from fanout.config import load_config

    long = " ".join(["word"] * 300)  # over embedder.n_ctx bytes: counted by the server, not bounded by its bytes
    with FakeServer(tokenize=True) as s:
        cfg = load_config("local").replace(models={"embedder": f"openai:emb@{s.url}"})
        counter = shared_counter(cfg)
        assert isinstance(counter, ServedCounter)
        want = len(format_prompt(cfg.models.embed_prompt, "document", long, "T").split()) + 1
        assert counter(long, "T") == want
        assert counter("short", "T") == len(format_prompt(cfg.models.embed_prompt, "document", "short", "T").encode()) + 1
        paths = [p for p, _, _ in s.requests]
        assert paths[0] == "/extras/tokenize/count" and set(paths[1:]) == {"/tokenize"}  # found once, then kept
        assert shared_counter(cfg) is counter  # one per process and embedder
    with FakeServer() as s, caplog.at_level(logging.WARNING):
        cfg = load_config("local").replace(models={"embedder": f"openai:emb@{s.url}"})
        assert shared_counter(cfg) is None
        assert "no tokenize endpoint" in caplog.text
        est = cfg.replace(models={"embedder": f"openai:emb2@{s.url}"}, remote={"tokenize": "estimate"})
        before = len(s.requests)
        assert shared_counter(est) is None and len(s.requests) == before  # estimate asks nothing
