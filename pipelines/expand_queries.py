"""Stages: the variants of each query: the caller's (agent) when given, else the cache, else the Expander.

Order of sources per query: agent variants (no model call) > expansions cache > QueryExpander actor (a small
local LLM under a GBNF grammar; its lines are filtered and fall back deterministically inside the actor).
A query whose BM25 probe was decisive keeps only the original. A cached expansion is ALWAYS used when
present; `expand.enabled` (or `--expand/--no-expand`) only decides whether a missing one is generated.
Workers never write the cache: new expansions leave as `_new_exp` rows for the one cache writer.

Two stages, so that the process holding the model never opens the index (nor imports lancedb):
LookupExpansions (CPU pool) does everything but the model call: agent variants, the probe's skip, the cache,
and for the queries left to generate the prompt's inputs as columns (`_kb_lang`, `_titles`: the knowledge
base's language and page titles). ExpandQueries (expander pool, only
when missing expansions are generated) sends those rows to the expander and fills in their variants.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
from fanout.actors.expander import prompt_key

from fanout.agent_fields import count_languages, language_code
from fanout.config import Config
from fanout.exec.runner import Runner
from fanout.models.identity import model_key
from fanout.schemas import VARIANT, set_column
from fanout.store.caches import NEW_COLUMNS, ROW_TYPES, Caches
from fanout.store.db import Collection
from fanout.text import detect_lang

log = logging.getLogger(__name__)
SOURCES = ("agent", "probe_skip", "cache", "model", "fallback", "none")
# what LookupExpansions hands the model stage for a query left to generate (null on every other row)
PROMPT_COLUMNS = {"_kb_lang": pa.string(), "_titles": pa.list_(pa.string())}


def expand_context(col: Collection, cfg: Config) -> tuple[str | None, list[str]]:
    """(knowledge-base language, page titles) of the index for the fields prompt; built once per index version.
    The language is the most common known language code of the notes (never a note's free text); titles only
    with `expand.titles_in_prompt`, sorted, at most `expand.max_titles`."""
    def build() -> tuple[str | None, list[str]]:
        with col.guard(col.documents_name):
            langs = [lg for lg in count_languages(col) if language_code(lg)]
            titles: list[str] = []
            if cfg.expand.titles_in_prompt:
                docs = col.read(col.documents_name, ["title"])
                titles = sorted({" ".join(t.split()) for t in docs["title"].to_pylist() if t},
                                key=str.casefold)[:cfg.expand.max_titles]
        return (langs[0] if langs else None), titles
    key = ("expand_context", cfg.expand.titles_in_prompt, cfg.expand.max_titles)
    return col.memo(key, build)


class LookupExpansions:
    """Stage (CPU pool): + `expansion` (where the variants came from), `variants` numbered from 0 (the
    original) and `_new_exp` (empty here). A query with no agent variants and no cached expansion gets
    `expansion` null and its prompt columns (PROMPT_COLUMNS) when `generate`: ExpandQueries, the model stage
    after this one, fills it in; without `generate` it keeps only the original (`none`)."""

    def __init__(self, cfg: Config, db: str, collection: str, generate: bool = False, model: str | None = None):
        """`model`: the expander's cache identity as the driver resolved it ("": none, no cached expansion can
        be checked; the compositions pass it, so a CPU node never needs the model); resolved here when None."""
        self.cfg = cfg
        self.generate = generate
        self.kinds = set(cfg.expand.use_kinds)  # the cache keeps every line; only these are searched
        self.version = prompt_key(cfg.expand)  # the expansions cache's prompt version
        self.col = Collection(db, collection, cfg)
        self.caches = Caches(self.col, "", cfg.models.embed_prompt, memory_rows=cfg.cache.memory_rows) \
            if cfg.cache.enabled else None
        self.model = (model_key(cfg, "expander", generate) if model is None else model) or None
        self.stats: dict[str, int] = {k: 0 for k in SOURCES if k not in ("model", "fallback")} | {"to_model": 0}

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
        todo: list[int] = []
        if pending:
            keys = [(rows[i]["query"], rows[i]["intent"]) for i in pending]
            model = self.model
            cached = self.caches.get_expansions(model, self.version, keys) if self.caches and model else {}
            for i, key in zip(pending, keys):
                hit = cached.get(key)
                if hit is not None:
                    source[i] = "cache"
                    variants[i] += [{**v, "source": "cache"} for v in hit[0] if v["kind"] in self.kinds]
                elif self.generate:
                    todo.append(i)
                else:
                    source[i] = "none"
        for s in source:
            if s is not None:
                self.stats[s] += 1
        self.stats["to_model"] += len(todo)
        numbered = [[{"vid": k, **v} for k, v in enumerate(vs)] for vs in variants]
        cols = {"expansion": pa.array(source, pa.string()), "variants": pa.array(numbered, pa.list_(VARIANT)),
                NEW_COLUMNS["expansions"]: pa.array([[] for _ in rows], pa.list_(ROW_TYPES["expansions"]))}
        if self.generate:
            cols.update(self._prompt_columns(batch, rows, todo))
        for name, arr in cols.items():
            batch = set_column(batch, name, arr)
        return batch

    def _prompt_columns(self, batch: pa.Table, rows: list[dict[str, Any]], todo: list[int]) -> dict[str, pa.Array]:
        n = len(rows)
        kb: list[str | None] = [None] * n
        titles: list[list[str] | None] = [None] * n
        if todo and self.cfg.expand.format == "fields":
            kb_lang, tl = expand_context(self.col, self.cfg)
            for i in todo:
                kb[i], titles[i] = kb_lang, tl
        return {name: pa.array(v, typ) for (name, typ), v in zip(PROMPT_COLUMNS.items(), (kb, titles))}


class ExpandQueries:
    """Model stage (pool `expander`): the queries LookupExpansions left to generate (`expansion` null, no
    error) go to the expander in one runner call per batch; their variants, source (`model` or `fallback`)
    and new cache rows (`_new_exp`) are filled in, and the prompt columns dropped. Opens no index."""

    def __init__(self, cfg: Config, runner: Runner | None = None):
        self.cfg = cfg
        self.kinds = set(cfg.expand.use_kinds)
        self.version = prompt_key(cfg.expand)
        self.model = model_key(cfg, "expander")
        self.runner = runner or Runner(cfg)
        self.stats: dict[str, int] = {"model": 0, "fallback": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        source = batch.column("expansion").to_pylist()
        errors = batch.column("error").to_pylist()
        todo = [i for i, (s, e) in enumerate(zip(source, errors)) if s is None and e is None]
        if todo:
            variants = batch.column("variants").to_pylist()
            new_rows = batch.column(NEW_COLUMNS["expansions"]).to_pylist()
            self._expand(batch, todo, source, variants, new_rows)
            batch = set_column(batch, "expansion", pa.array(source, pa.string()))
            batch = set_column(batch, "variants", pa.array(variants, pa.list_(VARIANT)))
            batch = set_column(batch, NEW_COLUMNS["expansions"], pa.array(new_rows, pa.list_(ROW_TYPES["expansions"])))
        return batch.drop_columns([c for c in PROMPT_COLUMNS if c in batch.column_names])

    def _expand(self, batch: pa.Table, todo: list[int], source: list, variants: list, new_rows: list) -> None:
        idx = pa.array(todo, pa.int64())
        sub = batch.take(idx)
        queries = sub.column("query").to_pylist()
        intents = sub.column("intent").to_pylist()
        table = pa.table({"qid": sub.column("qid"), "query": sub.column("query"),
                          "intent": pa.array(intents, pa.string()),
                          "lang": [detect_lang(q) for q in queries],
                          **{c[1:]: sub.column(c) for c in PROMPT_COLUMNS if c in sub.column_names}})
        res = self.runner.map("expander", table).to_pylist()
        for i, q, it, r in zip(todo, queries, intents, res):
            src = "model" if r["source"] == "model" else "fallback"
            source[i] = src
            self.stats[src] += 1
            got = [{"kind": v["kind"], "text": v["text"]} for v in r["variants"] or []]
            base = len(variants[i])
            variants[i] = variants[i] + [{"vid": base + k, **v, "source": src}
                                         for k, v in enumerate(v for v in got if v["kind"] in self.kinds)]
            if not r.get("error"):  # never cache a model error
                new_rows[i] = Caches.expansion_rows(self.model, self.version, [
                    {"query": q, "intent": it, "variants": got, "source": src}])
        n_fb = sum(source[i] == "fallback" for i in todo)
        if n_fb:
            log.info("expansion fell back for %d queries", n_fb)
