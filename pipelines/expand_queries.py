"""Stage: the variants of each query: the caller's (agent) when given, else the cache, else the Expander.

Order of sources per query: agent variants (no model call) > expansions cache > QueryExpander actor (a small
local LLM under a GBNF grammar; its lines are filtered and fall back deterministically inside the actor).
A query whose BM25 probe was decisive keeps only the original. A cached expansion is ALWAYS used when
present; `expand.enabled` (or `--expand/--no-expand`) only decides whether a missing one is generated.
Workers never write the cache: new expansions leave as `_new_exp` rows for the one cache writer.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa

from actors.expander import prompt_key
from fanout.caches import NEW_COLUMNS, ROW_TYPES, Caches
from fanout.config import Config
from fanout.db import Collection
from fanout.models import ModelError
from fanout.runner import Runner, model_id
from fanout.schemas import VARIANT
from fanout.text import detect_lang
from pipelines.lanes import fetch_chunks, fts_page_lists
from pipelines.passages import query_keys, snippet

log = logging.getLogger(__name__)
SOURCES = ("agent", "probe_skip", "cache", "model", "fallback", "none")


class ExpandQueries:
    """Stage: + `expansion` (where the variants came from) and `variants` numbered from 0 (the original).

    `generate`: call the expander for queries with no agent variants and no cached expansion (a model
    stage then: its pool is `expander`); otherwise those queries keep only the original.
    """

    def __init__(self, cfg: Config, db: str, collection: str, generate: bool = False, runner: Runner | None = None):
        self.cfg = cfg
        self.generate = generate
        self.kinds = set(cfg.expand.use_kinds)  # the cache keeps every line; only these are searched
        self.version = prompt_key(cfg.expand)  # the expansions cache's prompt version
        # the index the queries are for: the fields prompt takes its language and page titles from it
        self.collection = json.dumps({"db": db, "name": collection})
        col = Collection(db, collection, cfg)
        self.col = col
        self.caches = Caches(col, "", cfg.models.embed_prompt, memory_rows=cfg.cache.memory_rows) \
            if cfg.cache.enabled else None
        self._model: str | None = None
        self.runner = (runner or Runner(cfg)) if generate else None
        self.stats: dict[str, int] = {k: 0 for k in SOURCES}

    @property
    def model(self) -> str | None:
        """The expander's cache identity; None when its file is absent and nothing may be generated (then no
        cached expansion of it can be checked either)."""
        if self._model is None:
            try:
                self._model = model_id(self.cfg, "expander", provision=self.generate)
            except ModelError:
                if self.generate:
                    raise
                return None
        return self._model

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.select([c for c in ("qid", "query", "intent", "variants", "error") if c in batch.column_names]
                            ).to_pylist()
        skip = batch.column("skip_expansion").to_pylist() if "skip_expansion" in batch.column_names \
            else [False] * batch.num_rows
        source: list[str | None] = [None] * len(rows)
        variants: list[list[dict]] = [[] for _ in rows]
        pending: list[int] = []
        for i, r in enumerate(rows):
            if r.get("error") is not None:
                continue
            variants[i] = [{"kind": "orig", "text": r["query"], "source": "query"}]
            if r["variants"]:
                source[i] = "agent"
                variants[i] += [{"kind": v["kind"], "text": v["text"], "source": "agent"} for v in r["variants"]]
            elif skip[i]:
                source[i] = "probe_skip"
            else:
                pending.append(i)
        new_rows: list[list[dict]] = [[] for _ in rows]
        if pending:
            version = self.version
            keys = [(rows[i]["query"], rows[i]["intent"]) for i in pending]
            model = self.model
            cached = self.caches.get_expansions(model, version, keys) if self.caches and model else {}
            todo = []
            for i, key in zip(pending, keys):
                hit = cached.get(key)
                if hit is not None:
                    source[i] = "cache"
                    variants[i] += [{**v, "source": "cache"} for v in hit[0] if v["kind"] in self.kinds]
                elif self.generate:
                    todo.append(i)
                else:
                    source[i] = "none"
            if todo:
                probe = batch.column("_probe").to_pylist() if "_probe" in batch.column_names else None
                self._expand(rows, todo, source, variants, new_rows, probe)
        for i, s in enumerate(source):
            if s is not None:
                self.stats[s] += 1
        numbered = [[{"vid": k, **v} for k, v in enumerate(vs)] for vs in variants]
        cols = {"expansion": pa.array(source, pa.string()), "variants": pa.array(numbered, pa.list_(VARIANT)),
                NEW_COLUMNS["expansions"]: pa.array(new_rows, pa.list_(ROW_TYPES["expansions"]))}
        for name, arr in cols.items():
            if name in batch.column_names:
                batch = batch.set_column(batch.schema.get_field_index(name), name, arr)
            else:
                batch = batch.append_column(name, arr)
        return batch

    def grounding(self, queries: list[str], probe: list[list[dict] | None] | None) -> list[list[str]]:
        """expand.ground_hits: each query's top BM25 pages as `title > heading: snippet` lines (the probe's
        lists when the search ran one, else a BM25 search here), for the fields prompt."""
        n, chars = self.cfg.expand.ground_hits, self.cfg.expand.ground_chars
        if probe is None:
            probe = fts_page_lists(self.col, queries, self.cfg)
        tops = [[p["chunk_id"] for p in (pages or [])[:n]] for pages in probe]
        rows = fetch_chunks(self.col, {c for ids in tops for c in ids})
        out = []
        for q, ids in zip(queries, tops):
            keys = query_keys(q)
            lines = []
            for c in ids:
                r = rows.get(c)
                if r is None:
                    continue
                head = " > ".join(x for x in (r["title"], r["heading"]) if x)
                lines.append(f"{head}: {snippet(r['text'] or '', keys, 60, chars)}")
            out.append(lines)
        return out

    def _expand(self, rows: list[dict[str, Any]], todo: list[int], source: list, variants: list,
                new_rows: list, probe: list | None = None) -> None:
        queries = [rows[i]["query"] for i in todo]
        table = pa.table({"qid": [rows[i]["qid"] for i in todo], "query": queries,
                          "intent": pa.array([rows[i]["intent"] for i in todo], pa.string()),
                          "lang": [detect_lang(rows[i]["query"]) for i in todo],
                          "collection": [self.collection] * len(todo)})
        if self.cfg.expand.ground_hits and self.cfg.expand.format == "fields":
            hits = self.grounding(queries, [probe[i] for i in todo] if probe is not None else None)
            table = table.append_column("grounding", pa.array(hits, pa.list_(pa.string())))
        res = self.runner.map("expander", table).to_pylist()
        for i, r in zip(todo, res):
            src = "model" if r["source"] == "model" else "fallback"
            source[i] = src
            got = [{"kind": v["kind"], "text": v["text"]} for v in r["variants"] or []]
            variants[i] += [{**v, "source": src} for v in got if v["kind"] in self.kinds]
            if not r.get("error"):  # never cache a model error
                new_rows[i] = Caches.expansion_rows(self.model, self.version, [
                    {"query": rows[i]["query"], "intent": rows[i]["intent"], "variants": got, "source": src}])
        n_fb = sum(source[i] == "fallback" for i in todo)
        if n_fb:
            log.info("expansion fell back for %d queries", n_fb)
