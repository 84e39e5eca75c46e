"""Served model roles: the embedder, the expander and the reranker answered by an OpenAI-compatible server
(`models.<role>: openai:<model>@<base_url>`; fanout/config/remote.py, docs/served-models.md).

Each has the shape and the columns of the in-process role it stands in for (actors/embedder.py,
actors/expander.py, actors/reranker.py), so the stage list, the caches and both runners are unchanged: a
cached vector, expansion or score is looked up before a stage calls its role and is never requested again.
They hold an HTTP client (fanout/models/served.py), no model: a Ray pool of them is light (Config.pool).

- ServedEmbedder: POST /embeddings, remote.batch_size texts a request (a search's embedder.query_batch_size
  when it sets one), remote.concurrency requests in flight; the same prompt formats as the local embedder;
  vectors normalised; a vector of another size than the first one's is refused.
- ServedExpander: POST /chat/completions (or /completions) in the query's language, the output held to the
  format by a JSON schema or the GBNF grammar (remote.structured) and parsed by the local expander's strict
  parsers; a failed query gets the fallback and an error in its row, as locally.
- ServedReranker: POST /rerank (Jina/Cohere shape) or, with remote.rerank_api: logprobs, P(yes) of one token
  from /completions after the Qwen3-Reranker prompt; a failed query's pairs get null scores, as locally.
"""

from __future__ import annotations

import json
import logging
import math
from importlib import resources

import numpy as np
import pyarrow as pa
from fanout.actors.embedder import Embedder
from fanout.actors.expander import KINDS, QueryExpander
from fanout.actors.reranker import SYSTEM, USER, rerank_rows

from fanout.agent_fields import FIELD_KINDS
from fanout.config import Config
from fanout.errors import ModelError
from fanout.models.served import ServedClient
from fanout.text import detect_lang

log = logging.getLogger(__name__)


class ServedEmbedder(Embedder):
    """`__call__(batch)`: as Embedder's (columns text, title, role -> + vector), the vectors from a server."""

    def __init__(self, cfg: Config):  # no super().__init__: there is no model to load
        spec = cfg.served("embedder")
        assert spec is not None
        self.cfg, self.acfg, self.prompt = cfg, cfg.embedder, cfg.models.embed_prompt
        self.client = ServedClient(spec, cfg.remote, "embedder")
        self.model_sha = spec.name  # the driver resolves the fingerprint (model_identity); an actor needs none
        self.batch_size = cfg.remote.batch_size
        self.dim = len(self.client.embeddings(["fanout"], what="POST /embeddings of one text (the vector size)")[0])
        self.truncated = 0  # the server truncates (or refuses) a text longer than its context: not counted here
        self.stats = self.client.stats

    def embed_texts(self, texts: list[str], per_call: int = 0) -> np.ndarray:
        """Formatted prompts -> (n, dim) float32 unit vectors, `per_call` (else remote.batch_size) a request."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        step = max(1, per_call or self.batch_size)
        parts = self.client.map(self.client.embeddings, [texts[i:i + step] for i in range(0, len(texts), step)])
        vecs = [v for part in parts for v in part]
        if any(len(v) != self.dim for v in vecs):
            raise self.client.error(f"POST /embeddings of {len(texts)} text(s)",
                                    f"vectors of size {sorted({len(v) for v in vecs})}, expected {self.dim}",
                                    "the server changed its model while fanout ran: restart the job")
        arr = np.asarray(vecs, dtype=np.float32)
        return arr / np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12)


def _gbnf() -> str:
    return resources.files("fanout").joinpath("grammars/expand.gbnf").read_text(encoding="utf-8")


def expansion_schema(cfg: Config) -> dict:
    """The JSON schema of one expansion: qmd's lines as {"lines": [{"kind", "text"}]}, or the fields as an object."""
    if cfg.expand.format == "fields":
        return {"type": "object", "additionalProperties": False, "required": list(cfg.expand.fields),
                "properties": {f: {"type": "string", "minLength": 1} for f in cfg.expand.fields}}
    line = {"type": "object", "additionalProperties": False, "required": ["kind", "text"],
            "properties": {"kind": {"type": "string", "enum": list(KINDS)}, "text": {"type": "string", "minLength": 1}}}
    return {"type": "object", "additionalProperties": False, "required": ["lines"],
            "properties": {"lines": {"type": "array", "items": line, "minItems": 1, "maxItems": 6}}}


def json_to_lines(text: str, cfg: Config) -> str:
    """A JSON-schema answer as the `kind: text` lines the strict parsers read (JSON that is not the schema's
    shape gives "" : the parser then counts nothing and the query falls back)."""
    try:
        obj = json.loads(text)
    except ValueError:
        return text  # not JSON at all: the strict parser sees it as it is (and drops off-format lines)
    if cfg.expand.format == "fields":
        if not isinstance(obj, dict):
            return ""
        return "".join(f"{f}: {' '.join(str(obj[f]).split())}\n" for f in FIELD_KINDS if obj.get(f))
    lines = obj.get("lines") if isinstance(obj, dict) else None
    if not isinstance(lines, list):
        return ""
    return "".join(f"{x.get('kind')}: {' '.join(str(x.get('text', '')).split())}\n" for x in lines if isinstance(x, dict))


STRUCTURED_ORDER = ("json_schema", "grammar", "none")


class ServedExpander(QueryExpander):
    """`__call__(batch)`: as QueryExpander's, the text from a server's chat (or completions) endpoint."""

    def __init__(self, cfg: Config):  # no super().__init__: there is no model to load
        spec = cfg.served("expander")
        assert spec is not None
        self.cfg, self.llm, self.grammar = cfg, None, None
        self.path = None  # type: ignore[assignment]  # no model file: the model is the server's
        self.client = ServedClient(spec, cfg.remote, "expander")
        self.model_id = f"{spec.name}"
        self.stats: dict[str, int] = {"queries": 0, "model": 0, "fallback_empty": 0, "fallback_error": 0}
        self.stop = [] if cfg.expand.format == "qmd" else ["\n"] if len(cfg.expand.fields) == 1 else ["\n\n"]
        # remote.structured: auto starts with the JSON schema and steps down when the server refuses it
        self.structured: str = "json_schema" if cfg.remote.structured == "auto" else cfg.remote.structured
        self.confirmed = False  # auto: has the server answered self.structured once?

    def fits(self, text: str, budget: int) -> bool:
        """No tokenizer here: the chunker's estimate (4 characters a token) against the budget."""
        return len(text) / self.cfg.chunk.chars_per_token <= budget

    def _payload(self, messages: list[dict[str, str]], structured: str) -> tuple[str, dict]:
        cfg, spec = self.cfg, self.client.spec
        body: dict = {"model": spec.model, "max_tokens": cfg.expand.max_tokens, "temperature": cfg.expand.temperature,
                      "top_p": 0.8, "seed": 0}
        if structured == "none" and self.stop:
            body["stop"] = self.stop
        if structured == "grammar":
            body["grammar"] = _gbnf() if cfg.expand.format == "qmd" else _fields_gbnf(cfg.expand.fields)
        elif structured == "json_schema":
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "expansion", "strict": True,
                                                       "schema": expansion_schema(cfg)}}
        if cfg.remote.expand_api == "chat":
            return "chat/completions", {**body, "messages": messages}
        prompt = "\n\n".join(m["content"] for m in messages) + "\n"  # a plain few-shot prompt for a base model
        return "completions", {**body, "prompt": prompt}

    def generate(self, query: str, intent: str | None, lang: str | None, kb_lang: str | None = None,
                 titles: tuple[str, ...] = ()) -> str:
        """The server's text for one query, as `kind: text` lines (a JSON answer is turned into them)."""
        if self.cfg.expand.format == "fields":
            messages = self.fields_messages(query, intent, kb_lang or lang or detect_lang(query), list(titles))
        else:
            messages = self.qmd_messages(query, intent, lang)
        # auto: a server that refuses this kind of structured output (400 or 422) gets the next kind; until a kind
        # has been answered once it is tried without retries and a 5xx naming its field counts as a refusal too
        # (llama-cpp-python answers a validation error with 500); any other failure is retried on the same kind
        probe = self.cfg.remote.structured == "auto" and not self.confirmed
        while True:
            path, body = self._payload(messages, self.structured)
            what = f"POST /{path} for one query ({self.structured} output)"
            try:
                out = self.client.post(path, body, what, retries=0 if probe else None)
                self.confirmed = True
                break
            except ModelError as e:
                if self.cfg.remote.structured != "auto":
                    raise
                status, field = getattr(e, "status", None), {"json_schema": "response_format"}.get(
                    self.structured, self.structured)
                refused = status in (400, 422) or (probe and status is not None and status >= 500 and field in str(e))
                nxt = STRUCTURED_ORDER.index(self.structured) + 1
                if not refused:
                    if not probe:
                        raise
                    probe = False  # not a refusal: this kind again, with the retries
                    continue
                if nxt >= len(STRUCTURED_ORDER):
                    raise
                log.warning("%s refused %s output (%s); trying %s", self.client.backend, self.structured, e,
                            STRUCTURED_ORDER[nxt])
                self.structured = STRUCTURED_ORDER[nxt]
        try:
            choice = out["choices"][0]
            text = choice["message"]["content"] if path == "chat/completions" else choice["text"]
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError):
            raise self.client.error(what, f"an answer without choices[0] text: {json.dumps(out)[:200]!r}",
                                    "point models.expander at an OpenAI-compatible chat or completions endpoint") from None
        text = str(text or "")
        if self.structured == "json_schema":
            text = json_to_lines(text, self.cfg)
        elif finish == "stop" and text and not text.endswith("\n"):
            text += "\n"
        return text


def _fields_gbnf(fields: tuple[str, ...]) -> str:
    """The fields format as a grammar: each field's line once, in order."""
    rules = " ".join(f'"{f}: " content "\\n"' for f in fields)
    return f"root ::= {rules}\ncontent ::= [^\\n ] [^\\n]{{0,239}}\n"


def _qwen3_prompt(query: str, doc: str, instruction: str) -> str:
    """The Qwen3-Reranker prompt in ChatML with the empty think block (REFERENCE.md), for /completions."""
    user = USER.format(instruction=instruction, query=query, document=" " + doc)
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def yes_probability(top: dict[str, float]) -> float:
    """P(yes) / (P(yes) + P(no)) from one position's top log-probabilities; a word missing from the list is
    taken at the list's lowest log-probability (an upper bound), so the score leans the right way."""
    if not top:
        raise ValueError("no top log-probabilities in the answer")
    floor = min(top.values())
    yes = max((lp for t, lp in top.items() if t.strip().lower() == "yes"), default=floor)
    no = max((lp for t, lp in top.items() if t.strip().lower() == "no"), default=floor)
    return 1.0 / (1.0 + math.exp(no - yes)) if no - yes < 700 else 0.0


class ServedReranker:
    """`__call__(batch)`: columns query, passage, intent (optional) -> the same plus `_rerank` in 0..1."""

    def __init__(self, cfg: Config):
        spec = cfg.served("reranker")
        assert spec is not None
        self.cfg = cfg
        self.client = ServedClient(spec, cfg.remote, "reranker")
        self.model_id = spec.name
        self.stats: dict[str, int] = {"pairs": 0, "scored": 0, "deduped": 0}

    def _rerank(self, query: str, docs: list[str]) -> list[float]:
        what = f"POST /rerank of {len(docs)} document(s)"
        body = self.client.post("rerank", {"model": self.client.spec.model, "query": query, "documents": docs,
                                           "top_n": len(docs)}, what)
        results = body.get("results") if isinstance(body, dict) else body
        scores: dict[int, float] = {}
        for r in results if isinstance(results, list) else []:
            s = r.get("relevance_score", r.get("score")) if isinstance(r, dict) else None
            if isinstance(r, dict) and isinstance(r.get("index"), int) and isinstance(s, (int, float)):
                scores[r["index"]] = float(s)
        if sorted(scores) != list(range(len(docs))):
            raise self.client.error(what, f"scores for {len(scores)} of {len(docs)} documents "
                                          f"({json.dumps(body)[:160]!r})",
                                    "point models.reranker at a Jina/Cohere-shaped /v1/rerank endpoint, or set "
                                    "remote.rerank_api: logprobs")
        if self.cfg.remote.rerank_score == "logit":
            return [1.0 / (1.0 + math.exp(-s)) if s > -700 else 0.0 for s in (scores[i] for i in range(len(docs)))]
        return [min(1.0, max(0.0, scores[i])) for i in range(len(docs))]

    def _logprob(self, query: str, doc: str, instruction: str) -> float:
        what = "POST /completions of one (query, passage) pair (yes/no logprobs)"
        body = self.client.post("completions", {"model": self.client.spec.model, "max_tokens": 1, "temperature": 0,
                                                "logprobs": 20, "prompt": _qwen3_prompt(query, doc, instruction)}, what)
        try:
            top = body["choices"][0]["logprobs"]["top_logprobs"][0]
            return yes_probability({str(k): float(v) for k, v in top.items()})
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise self.client.error(what, f"no top log-probabilities in the answer ({json.dumps(body)[:160]!r})",
                                    "use a server whose /v1/completions returns `logprobs` (llama-server, vLLM, "
                                    "llama-cpp-python) or set remote.rerank_api: rerank") from None

    def score(self, query: str, docs: list[str], intent: str | None = None) -> list[float]:
        if self.cfg.remote.rerank_api == "rerank":
            q = f"{query}\n{intent}" if intent else query
            step = self.cfg.remote.batch_size
            parts = self.client.map(lambda d: self._rerank(q, d), [docs[i:i + step] for i in range(0, len(docs), step)])
            return [s for part in parts for s in part]
        instruction = self.cfg.rerank.instruction + (f" Context: {intent}" if intent else "")
        return self.client.map(lambda d: self._logprob(query, d, instruction), docs)

    def __call__(self, batch: pa.Table) -> pa.Table:
        # a failed query (its retries spent) never kills the batch: null scores, counted, logged
        return rerank_rows(batch, self.score, self.stats, ModelError,
                           lambda q, docs, exc: log.warning("rerank failed for a query (%d passages): %s",
                                                            len(docs), exc))
