"""Stage: the variants of each query: the caller's (agent) when given, else the cache, else the Expander.

Order of sources per query: agent variants (no model call) > expansions cache > QueryExpander actor (a small
local LLM under a GBNF grammar; its lines are filtered and fall back deterministically inside the actor).
A query whose BM25 probe was decisive, or any query when expansion is off, keeps only the original.
"""

from __future__ import annotations

import json
import logging

import pyarrow as pa

from actors._llama import model_id
from actors.expander import prompt_key
from fanout.caches import Caches
from fanout.config import Config
from fanout.runner import Runner
from fanout.schemas import VARIANTS
from fanout.text import detect_lang

log = logging.getLogger(__name__)


def expand_queries(queries: pa.Table, skip: dict[str, bool], runner: Runner, cfg: Config,
                   caches: Caches | None = None, expand: bool | None = None) -> tuple[pa.Table, dict]:
    """QUERIES -> (VARIANTS, counters). `expand` overrides cfg.expand.enabled (e.g. `--no-expand`)."""
    expand = cfg.expand.enabled if expand is None else expand
    stats = {"agent": 0, "probe_skip": 0, "cache": 0, "model": 0, "fallback": 0, "none": 0}
    out: dict[str, list[dict]] = {}
    pending: list[dict] = []
    for q in queries.to_pylist():
        qid = q["qid"]
        out[qid] = [{"qid": qid, "vid": 0, "kind": "orig", "text": q["query"], "source": "query"}]
        if q["variants"]:
            stats["agent"] += 1
            out[qid] += [{"qid": qid, "kind": v["kind"], "text": v["text"], "source": "agent"}
                         for v in q["variants"]]
        elif skip.get(qid):
            stats["probe_skip"] += 1
        elif not expand:
            stats["none"] += 1
        else:
            pending.append(q)
    if pending:
        model = model_id(cfg, "expander")
        version = prompt_key(cfg.expand)
        cached = caches.get_expansions(model, version, [(q["query"], q["intent"]) for q in pending]) \
            if caches else {}
        todo = []
        for q in pending:
            hit = cached.get((q["query"], q["intent"]))
            if hit is None:
                todo.append(q)
                continue
            stats["cache"] += 1
            out[q["qid"]] += [{"qid": q["qid"], **v, "source": "cache"} for v in hit[0]]
        if todo:
            batch = pa.table({"qid": [q["qid"] for q in todo], "query": [q["query"] for q in todo],
                              "intent": pa.array([q["intent"] for q in todo], pa.string()),
                              "lang": [detect_lang(q["query"]) for q in todo]})
            if caches:  # the index the queries are for: the fields prompt takes its language and titles
                spec = json.dumps({"db": str(caches.col.db_dir.resolve()), "name": caches.col.name})
                batch = batch.append_column("collection", pa.array([spec] * len(todo), pa.string()))
            res = runner.map("expander", batch)
            new = []
            by_qid = {q["qid"]: q for q in todo}
            for r in res.to_pylist():
                src = r["source"]
                stats["model" if src == "model" else "fallback"] += 1
                variants = [{"kind": v["kind"], "text": v["text"]} for v in r["variants"] or []]
                out[r["qid"]] += [{"qid": r["qid"], **v, "source": src} for v in variants]
                q = by_qid[r["qid"]]
                if not r.get("error"):  # never cache a model error
                    new.append({"query": q["query"], "intent": q["intent"], "variants": variants, "source": src})
            if caches:
                caches.put_expansions(model, version, new)
    rows = []
    for qid, vs in out.items():
        for vid, v in enumerate(vs):
            rows.append({**v, "vid": vid})
    if stats["fallback"]:
        log.info("expansion fell back for %d queries", stats["fallback"])
    return pa.Table.from_pylist(rows, schema=VARIANTS), stats
