"""Served models (base layer): the `openai:<model>@<base_url>` spec of a model role and the `remote:` section
(keys, timeouts, concurrency, batching, retries) shared by every role a server plays. Imports nothing of fanout
but fanout.errors (through sections.py's ConfigError).

A role whose spec starts with `openai:` is answered by an OpenAI-compatible server (llama.cpp's llama-server,
vLLM, TEI, Ollama, llama-cpp-python's server) through fanout/models/served.py; every other spec is a GGUF
file run in-process (fanout/actors/). Nothing changes for a config that names no server.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Literal

from fanout.config.sections import ConfigError, _at_least, _check

SERVED_PREFIX = "openai:"
ROLES = ("embedder", "expander", "reranker")


@dataclass(frozen=True)
class ServedSpec:
    """A parsed `openai:<model>@<base_url>`: the model name the server knows, its base URL (with /v1 when the
    server wants it: requests go to `<base_url>/embeddings`, `/rerank`, ...) and the URL's host:port, which
    is what an index and the caches record (never a key: the URL may not carry credentials)."""

    model: str
    base_url: str
    host: str

    @property
    def name(self) -> str:
        """How an index, a cache key and an error message name this model: `openai:<model>@<host>`."""
        return f"{SERVED_PREFIX}{self.model}@{self.host}"


def is_served(spec: str) -> bool:
    return spec.startswith(SERVED_PREFIX)


def served_spec(spec: str, role: str = "model") -> ServedSpec:
    """Parse `openai:<model>@<base_url>`; a ConfigError names the role, what was given and the form."""
    form = "openai:<model>@<base_url>, e.g. openai:embeddinggemma@http://127.0.0.1:8080/v1"
    rest = spec[len(SERVED_PREFIX):] if is_served(spec) else ""
    cut = max(rest.find("@http://"), rest.find("@https://")) if rest else -1
    if not rest or cut <= 0:
        raise ConfigError(f"models.{role} {spec[:120]!r} is not a served model spec; write {form}")
    model, url = rest[:cut].strip(), rest[cut + 1:].strip().rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        raise ConfigError(f"models.{role}: the base URL carries credentials ({parts.scheme}://...@{parts.hostname}); "
                          "fanout never stores a key in a spec (it would land in the index's manifest): put the "
                          "key in the environment variable named by remote.api_key_env or in remote.api_key_file")
    if parts.query or parts.fragment or not parts.hostname:
        raise ConfigError(f"models.{role}: base URL {url[:120]!r} must be scheme://host[:port][/path] with no "
                          f"query or fragment; write {form}")
    port = f":{parts.port}" if parts.port else ""
    return ServedSpec(model=model, base_url=url, host=f"{parts.hostname}{port}")


@dataclass(frozen=True)
class RemoteConfig:
    """How fanout talks to the servers of the roles whose spec is `openai:...` (fanout/models/served.py)."""

    # the environment variable that holds the bearer key (read when the client starts, never stored or logged);
    # unset or empty and no api_key_file: no Authorization header (a local llama-server needs none)
    api_key_env: str = "FANOUT_API_KEY"
    api_key_file: str = ""  # a file whose first line is the key (a mounted secret); wins over api_key_env
    # seconds fanout waits for a connection or the server's next bytes: a stalled server costs a retry, not a
    # hung job
    timeout_s: float = 60.0
    # requests in flight per pool actor (threads, one kept-alive connection each): a served model's throughput grows with
    # concurrent requests until the server's slots are full; llama-server's default is 4 slots (-np)
    concurrency: int = 4
    # texts per /v1/embeddings request and documents per /v1/rerank request: servers batch a request's inputs
    # together; 32 keeps one request inside llama-server's default 2048-token batch for query-sized texts
    batch_size: int = 32
    max_retries: int = 4  # retries of a request after a timeout, reset, 429, 5xx or unreadable body (0 = none)
    backoff_s: float = 0.5  # first wait before a retry, doubled each time (a 429's Retry-After wins when given)
    max_backoff_s: float = 30.0  # no wait is longer than this, Retry-After included
    # CPUs each served role's Ray actor reserves: it holds no model, only an HTTP client waiting on a server
    num_cpus: float = 0.1
    # the expander: chat (the server applies the model's chat template) or completions (a plain few-shot prompt
    # for a base model or a server without chat)
    expand_api: Literal["chat", "completions"] = "chat"
    # how the expander's output is held to its format: json_schema (`response_format`, OpenAI's structured
    # outputs: vLLM, llama-server, Ollama), grammar (a GBNF `grammar` field: llama-server, llama-cpp-python),
    # none (prompt only; the strict parser drops off-format lines), or auto: json_schema, then grammar, then none,
    # each tried once when the server refuses the previous with a 4xx (the choice is logged and kept)
    structured: Literal["auto", "json_schema", "grammar", "none"] = "auto"
    # the reranker: rerank (POST /v1/rerank, the Jina/Cohere shape: llama-server, vLLM, TEI's /rerank under a /v1
    # proxy) or logprobs (POST /v1/completions with the Qwen3-Reranker yes/no prompt, one token, P(yes) from the
    # top log-probabilities: any completions server, e.g. Ollama or a Qwen3-Reranker whose /rerank scores are off)
    rerank_api: Literal["rerank", "logprobs"] = "rerank"
    # what /v1/rerank's relevance_score is: probability (0..1: TEI, vLLM cross-encoders; clamped) or logit
    # (llama-server returns the raw score: a sigmoid makes it 0..1, as fanout's blend expects)
    rerank_score: Literal["probability", "logit"] = "probability"
    # how a served embedder's chunks are measured against embedder.n_ctx: auto asks the server's own tokenize
    # endpoint (llama-cpp-python's /extras/tokenize/count, /tokenize of llama-server, vLLM and TEI), so the chunks
    # are the local model's; a server without one, or estimate, cuts by the chunker's estimate (chars_per_token)
    tokenize: Literal["auto", "estimate"] = "auto"

    def validate(self) -> None:
        _at_least("remote", self, 1, "concurrency", "batch_size")
        _at_least("remote", self, 0, "max_retries", "backoff_s", "max_backoff_s")
        _check(self.timeout_s > 0, f"remote.timeout_s must be > 0, got {self.timeout_s}")
        _check(self.num_cpus > 0, f"remote.num_cpus must be > 0 (fractional is fine), got {self.num_cpus}")
        for name, allowed in (("expand_api", ("chat", "completions")),
                              ("structured", ("auto", "grammar", "json_schema", "none")),
                              ("rerank_api", ("logprobs", "rerank")), ("rerank_score", ("logit", "probability")),
                              ("tokenize", ("auto", "estimate"))):
            _check(getattr(self, name) in allowed,
                   f"remote.{name} must be one of {sorted(allowed)}, got {getattr(self, name)!r}")
