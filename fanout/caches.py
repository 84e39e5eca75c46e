"""Persistent caches as Lance tables next to the index: expansions, query vectors, rerank scores.

Each row is keyed by a sha256 of everything that determines its value (model file hash, prompt version,
text), so a model or prompt change misses instead of serving stale values. Upserts use `merge_insert` on the
key (no duplicates). duckdb reads them through Arrow: `duckdb.sql("select * from t")` with
`t = Caches(...).table("expansions")`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from typing import Any

import pyarrow as pa

from fanout.db import Collection

log = logging.getLogger(__name__)

SCHEMAS = {
    "expansions": pa.schema([("key", pa.string()), ("query", pa.string()), ("intent", pa.string()),
                             ("model", pa.string()), ("prompt_version", pa.string()),
                             ("variants", pa.string()), ("source", pa.string()), ("created", pa.float64())]),
    "rerank": pa.schema([("key", pa.string()), ("query", pa.string()), ("intent", pa.string()),
                         ("passage_hash", pa.string()),
                         ("model", pa.string()), ("score", pa.float64()), ("created", pa.float64())]),
}


def cache_key(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join("" if p is None else str(p) for p in parts).encode()).hexdigest()[:32]


def _quote(keys: list[str]) -> str:
    return ", ".join(f"'{k}'" for k in keys)  # keys are hex digests: nothing to escape


class Caches:
    """The caches of one collection (tables `<collection>_cache_<name>`)."""

    def __init__(self, col: Collection, embed_model: str, embed_prompt: str, dim: int | None = None):
        self.col = col
        self.embed_model = embed_model
        self.embed_prompt = embed_prompt
        self.dim = dim
        self.hits: dict[str, int] = {}
        self.misses: dict[str, int] = {}

    def _name(self, name: str) -> str:
        return f"{self.col.name}_cache_{name}"

    def table(self, name: str) -> pa.Table:
        """The whole cache table as Arrow (for duckdb / analysis)."""
        n = self._name(name)
        return self.col.table(n).to_arrow() if self.col.has(n) else (SCHEMAS.get(name) or pa.schema([])).empty_table()

    def _get(self, name: str, keys: list[str], columns: list[str]) -> dict[str, dict]:
        n = self._name(name)
        if not keys or not self.col.has(n):
            self.misses[name] = self.misses.get(name, 0) + len(keys)
            return {}
        tbl = self.col.table(n)
        with contextlib.suppress(Exception):  # see writes of other processes (older lancedb: no-op)
            tbl.checkout_latest()
        found: dict[str, dict] = {}
        uniq = sorted(set(keys))
        for i in range(0, len(uniq), 500):
            part = uniq[i:i + 500]
            res = tbl.search().where(f"key IN ({_quote(part)})").select(["key", *columns]).limit(len(part))
            for r in res.to_arrow().to_pylist():
                found[r["key"]] = r
        self.hits[name] = self.hits.get(name, 0) + sum(k in found for k in keys)
        self.misses[name] = self.misses.get(name, 0) + sum(k not in found for k in keys)
        return found

    def _put(self, name: str, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        n = self._name(name)
        if not self.col.has(n):
            try:
                self.col.db.create_table(n, data=rows)
                return
            except (ValueError, OSError):  # created concurrently: fall through to an upsert
                pass
        tbl = self.col.table(n)
        tbl.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(rows)

    # -- query vectors ---------------------------------------------------------------------------------
    def _vkey(self, role: str, text: str) -> str:
        return cache_key("qvec", self.embed_model, self.embed_prompt, role, text)

    def get_vectors(self, items: list[tuple[str, str]]) -> dict[tuple[str, str], list[float]]:
        keys = {self._vkey(r, t): (r, t) for r, t in items}
        found = self._get("qvec", list(keys), ["vector"])
        return {keys[k]: v["vector"] for k, v in found.items()}

    def put_vectors(self, vectors: dict[tuple[str, str], list[float]]) -> None:
        if not vectors:
            return
        items = list(vectors.items())
        dim = len(items[0][1])
        rows = pa.table({
            "key": [self._vkey(r, t) for (r, t), _ in items],
            "text": [t for (_, t), _ in items], "role": [r for (r, _), _ in items],
            "model": [self.embed_model] * len(items),
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array([x for _, v in items for x in v], pa.float32()), dim),
            "created": [time.time()] * len(items),
        })
        self._put("qvec", rows)

    # -- expansions ------------------------------------------------------------------------------------
    def get_expansions(self, model: str, version: str, queries: list[tuple[str, str | None]]
                       ) -> dict[tuple[str, str | None], tuple[list[dict], str]]:
        keys = {cache_key("exp", model, version, q, i): (q, i) for q, i in queries}
        found = self._get("expansions", list(keys), ["variants", "source"])
        return {keys[k]: (json.loads(v["variants"]), v["source"]) for k, v in found.items()}

    def put_expansions(self, model: str, version: str, rows: list[dict]) -> None:
        """rows: {query, intent, variants: [{kind, text}], source}."""
        now = time.time()
        data = [{"key": cache_key("exp", model, version, r["query"], r["intent"]), "query": r["query"],
                 "intent": r["intent"], "model": model, "prompt_version": version,
                 "variants": json.dumps(r["variants"], ensure_ascii=False), "source": r["source"],
                 "created": now} for r in rows]
        self._put("expansions", pa.Table.from_pylist(data, schema=SCHEMAS["expansions"]))

    # -- rerank scores ---------------------------------------------------------------------------------
    def get_rerank(self, model: str, triples: list[tuple[str, str | None, str]]
                   ) -> dict[tuple[str, str | None, str], float]:
        """Scores keyed by (query, intent, passage): the intent is part of the reranker's prompt."""
        keys = {cache_key("rr", model, q, i, p): (q, i, p) for q, i, p in triples}
        found = self._get("rerank", list(keys), ["score"])
        return {keys[k]: v["score"] for k, v in found.items()}

    def put_rerank(self, model: str, scores: dict[tuple[str, str | None, str], float]) -> None:
        now = time.time()
        data = [{"key": cache_key("rr", model, q, i, p), "query": q, "intent": i,
                 "passage_hash": hashlib.sha256(p.encode()).hexdigest()[:16], "model": model, "score": s,
                 "created": now} for (q, i, p), s in scores.items()]
        self._put("rerank", pa.Table.from_pylist(data, schema=SCHEMAS["rerank"]))

    def stats(self) -> dict[str, Any]:
        return {"hits": dict(self.hits), "misses": dict(self.misses)}

