"""Fake model roles for tests and scaling benchmarks: deterministic outputs, an optional sleep per text.

`models.backend: fake` (configs/fake.yaml) selects them in place of the GGUF actors; each has the same
`__init__(cfg)` / `__call__(batch: pa.Table) -> pa.Table` shape as the real one, so every stage and runner
path runs unchanged, in milliseconds (datatrove ships a dummy inference server for the same reason).

- FakeEmbedder: a hashed bag of words (feature hashing of the text's terms, unit length), so texts that
  share words are close and a fake index is searchable with fake query vectors.
- FakeExpander: fixed lines derived from the query (`lex` = its first words, `vec` and `hyde` templates).
- FakeReranker: the share of the query's terms found in the passage.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pyarrow as pa

from fanout.config import Config
from fanout.models.identity import model_identity
from fanout.text import terms

VARIANT = pa.struct([("kind", pa.string()), ("text", pa.string())])
EXPANDER_OUTPUT = pa.schema([("qid", pa.string()), ("raw", pa.string()), ("variants", pa.list_(VARIANT)),
                             ("source", pa.string()), ("error", pa.string())])


def _bucket(term: str, dim: int) -> tuple[int, float]:
    h = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(h[:4], "little") % dim, 1.0 if h[4] & 1 else -1.0


# term -> signed bucket code (the axis, or ~axis for a -1 sign) per dim: a vault repeats its words, so the
# hash is taken once per distinct term (bounded: cleared past _CODES_MAX terms)
_CODES: dict[int, dict[str, int]] = {}
_CODES_MAX = 1 << 20


def _codes(words: list[str], dim: int) -> list[int]:
    cache = _CODES.setdefault(dim, {})
    if len(cache) > _CODES_MAX:
        cache.clear()
    out = []
    for t in words:
        c = cache.get(t)
        if c is None:
            i, sign = _bucket(t, dim)
            c = cache[t] = i if sign > 0 else ~i
        out.append(c)
    return out


def hashed_vectors(texts: list[str], dim: int) -> np.ndarray:
    """Rows of `hashed_vector(text, dim)` for many texts at once (the same bits, numpy instead of a loop)."""
    words = [terms(t.casefold()) for t in texts]
    counts = np.fromiter((len(w) for w in words), np.int64, len(words))
    codes = np.array(_codes([t for w in words for t in w], dim), np.int64)
    axis = np.where(codes >= 0, codes, ~codes)
    rows = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
    # the per-axis sums are small integers: any order of adding them gives the same float32 values
    v = np.bincount(rows * dim + axis, weights=np.where(codes >= 0, 1.0, -1.0),
                    minlength=len(texts) * dim).astype(np.float32).reshape(len(texts), dim)
    sq = np.einsum("ij,ij->i", v, v, dtype=np.float64)  # exact: integers
    n = np.sqrt(sq.astype(np.float32))  # below 2**24 the float32 sum is exact: np.linalg.norm's value
    empty = sq == 0.0
    n[empty] = 1.0
    v /= n[:, None]
    v[empty, 0] = 1.0
    for r in np.flatnonzero(sq >= 2 ** 24):  # a float32 sum that rounds: np.linalg.norm's own order
        v[r] = hashed_vector(texts[r], dim)
    return v


def hashed_vector(text: str, dim: int) -> np.ndarray:
    """Unit-length feature-hashing vector of the text's lower-cased terms (one fixed axis if it has none)."""
    v = np.zeros(dim, dtype=np.float32)
    for c in _codes(terms(text.casefold()), dim):
        if c >= 0:
            v[c] += 1.0
        else:
            v[~c] -= 1.0
    n = float(np.linalg.norm(v))
    if n == 0.0:
        v[0] = 1.0
        return v
    return v / n


class FakeEmbedder:
    """Columns `text` (+ `title`, `role`) -> + `vector` (float32, cfg.fake.dim, unit length)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.dim = cfg.fake.dim
        self.model_sha = model_identity(cfg, "embedder")[1]
        self.sleep_s = cfg.fake.embed_sleep_s
        self.truncated = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()
        titles = batch.column("title").to_pylist() if "title" in batch.column_names else [None] * len(texts)
        if self.sleep_s:
            time.sleep(self.sleep_s * len(texts))
        vecs = hashed_vectors([f"{ti or ''} {t or ''}" for t, ti in zip(texts, titles)], self.dim)
        col = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), self.dim)
        return batch.append_column("vector", col)


class FakeExpander:
    """Columns qid, query (+ intent, lang) -> qid, raw, variants, source, error (QueryExpander's output)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.model_id = "fake-expander"
        self.sleep_s = cfg.fake.expand_sleep_s
        self.stats: dict[str, int] = {"queries": 0, "model": 0}

    @staticmethod
    def lines(query: str) -> list[dict[str, str]]:
        words = terms(query)
        return [{"kind": "lex", "text": " ".join(words[:3]) + " notes"},
                {"kind": "vec", "text": f"how to {query}"},
                {"kind": "hyde", "text": f"The notes explain {query}."}]

    def __call__(self, batch: pa.Table) -> pa.Table:
        qids, queries = batch.column("qid").to_pylist(), batch.column("query").to_pylist()
        if self.sleep_s:
            time.sleep(self.sleep_s * len(queries))
        rows = []
        for qid, q in zip(qids, queries):
            self.stats["queries"] += 1
            self.stats["model"] += 1
            v = self.lines(q or "")
            rows.append({"qid": qid, "raw": "".join(f"{x['kind']}: {x['text']}\n" for x in v), "variants": v,
                         "source": "model", "error": None})
        return pa.Table.from_pylist(rows, schema=EXPANDER_OUTPUT)


class FakeReranker:
    """Columns query, passage (+ intent) -> + `_rerank`: the share of the query's terms in the passage."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.model_id = "fake-reranker"
        self.sleep_s = cfg.fake.rerank_sleep_s
        self.stats: dict[str, int] = {"pairs": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        queries, passages = batch.column("query").to_pylist(), batch.column("passage").to_pylist()
        if self.sleep_s:
            time.sleep(self.sleep_s * len(queries))
        out = []
        for q, p in zip(queries, passages):
            qt = {t.casefold() for t in terms(q or "")}
            pt = {t.casefold() for t in terms(p or "")}
            out.append(round(len(qt & pt) / len(qt), 6) if qt else 0.0)
        self.stats["pairs"] += len(out)
        return batch.append_column("_rerank", pa.array(out, pa.float64()))
