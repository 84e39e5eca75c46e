"""Stages: embed the variants (EmbedVariants), then retrieve, fuse and fetch (Retrieve).

Routing (qmd): `lex` -> full-text only; `vec`/`hyde` -> vectors only; the original query -> both. Plus an
exact title/alias lane for the original query and `lex` variants (OHS, trip2g-alias). The vectors of a
batch's variants are read from the cache or embedded in as few calls as possible (EmbedVariants, a model
stage); Retrieve then runs the full-text lists, ONE batched LanceDB vector search and the alias lane, fuses
them (fuse_rrf), keeps each query's top pages and fetches their chunks for titles, snippets and passages.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pyarrow as pa

from fanout.caches import NEW_COLUMNS, ROW_TYPES, Caches
from fanout.config import Config
from fanout.db import Collection, fts_columns, pin_batch
from fanout.runner import Runner, model_identity
from fanout.schemas import CANDIDATE, HIT, HITS, LANE_KINDS, QVEC, VECTOR_LANES
from fanout.text import nfc
from pipelines.fuse_rrf import fuse_rrf, sent_lists

FTS_KINDS = LANE_KINDS["fts"]
VEC_KINDS = LANE_KINDS["vec"]
ALIAS_KINDS = LANE_KINDS["alias"]
_NON_WORD = re.compile(r"[^\w\s'-]+", re.UNICODE)


def fts_text(q: str) -> str:
    """Plain words only: the FTS parser must not see quotes, colons or brackets from a question."""
    return " ".join(_NON_WORD.sub(" ", q).split())


def to_pages(rows: list[dict], k: int, score_key: str) -> list[dict]:
    """Collapse chunk hits (best first) to pages, keeping each page's best chunk; cut to k pages."""
    seen: set[str] = set()
    out = []
    for r in rows:
        if r["path"] in seen:
            continue
        seen.add(r["path"])
        out.append({"path": r["path"], "chunk_id": r["chunk_id"], "_score": float(r[score_key])})
        if len(out) == k:
            break
    return out


def fts_page_lists(col: Collection, texts: list[str], cfg: Config, wheres: list[str | None] | None = None
                   ) -> list[list[dict]]:
    """One BM25 page list per text, over the per-language body/title/heading columns with boosts;
    `wheres[i]` prefilters text i (fanout/filters.py)."""
    langs = cfg.index.languages
    cols = fts_columns(langs)
    r = cfg.retrieve
    boost = {"body": r.fts_boost_body, "title": r.fts_boost_title, "heading": r.fts_boost_heading}
    boosts = [boost[c.split("_", 1)[0]] for c in cols]
    tables = col.fts_search_many([fts_text(t) for t in texts], cols, boosts, r.k * 3, ["path", "chunk_id"],
                                 wheres)
    return [to_pages(t.to_pylist(), r.k, "_score") if t.num_rows else [] for t in tables]


def alias_key(s: str) -> str:
    s = nfc(s).casefold().strip()
    s = s.removesuffix(".md")
    return " ".join(_NON_WORD.sub(" ", s).split())


def alias_map(col: Collection) -> dict[str, list[str]]:
    """normalised title / alias / alias last path segment -> page paths (built once per index version)."""
    return col.memo("alias_map", lambda: _build_alias_map(col))


def _build_alias_map(col: Collection) -> dict[str, list[str]]:
    with col.guard(col.documents_name):
        docs = col.table(col.documents_name).to_arrow().select(["path", "title", "aliases"]).to_pylist()
    m: dict[str, list[str]] = defaultdict(list)
    for d in docs:
        keys = [d["title"], d["path"].rsplit("/", 1)[-1]]
        for a in d["aliases"] or []:
            keys += [a, a.rsplit("/", 1)[-1]]
        for key in {alias_key(k) for k in keys if k}:
            if key and d["path"] not in m[key]:
                m[key].append(d["path"])
    return dict(m)


def allowed_paths(col: Collection, where: str, paths: list[str]) -> list[str]:
    """The paths (of `paths`, in order) that have a chunk passing `where`: the alias lane's filter."""
    if not paths:
        return []
    inlist = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
    with col.guard(col.chunks_name):
        t = col.table(col.chunks_name).search().where(f"({where}) AND path IN ({inlist})") \
            .select(["path"]).limit(None).to_arrow()
    ok = set(t["path"].to_pylist())
    return [p for p in paths if p in ok]


def hit_rows(qid: str, vid: int, kind: str, lane: str, pages: list[dict]) -> list[dict]:
    return [{"qid": qid, "vid": vid, "kind": kind, "lane": lane, "path": p["path"], "chunk_id": p["chunk_id"],
             "_rank": i, "_score": p["_score"]} for i, p in enumerate(pages, 1)]


def _set(batch: pa.Table, name: str, arr: pa.Array) -> pa.Table:
    if name in batch.column_names:
        return batch.set_column(batch.schema.get_field_index(name), name, arr)
    return batch.append_column(name, arr)


class EmbedVariants:
    """Model stage: + `vectors` (one per vector-lane variant: `vid`, `vector`) and `_new_qvec` cache rows.

    Vectors come from the query-vector cache when present (read directly); the rest are embedded in one
    runner call per batch, each distinct (prompt role, text) once.
    """

    def __init__(self, cfg: Config, db: str, collection: str, runner: Runner | None = None):
        self.cfg = cfg
        self.runner = runner or Runner(cfg)
        col = Collection(db, collection, cfg)
        sha = model_identity(cfg, "embedder")[1]
        self.caches = Caches(col, sha, cfg.models.embed_prompt, memory_rows=cfg.cache.memory_rows) \
            if cfg.cache.enabled else None
        self.stats: dict[str, int] = {"texts": 0, "cached": 0, "embedded": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        errors = batch.column("error").to_pylist()
        variants = batch.column("variants").to_pylist()
        role_of = {"hyde": self.cfg.retrieve.hyde_prompt}
        wanted: list[list[tuple[int, str, str]]] = [[] for _ in range(n)]
        # the kinds some vector lane searches (vec; title_vec / heading_vec: pipelines/retrieve_titles.py)
        kinds = {k for ln in self.cfg.retrieve.lanes if ln in VECTOR_LANES for k in LANE_KINDS[ln]}
        if kinds:
            for i, vs in enumerate(variants):
                if errors[i] is None:
                    wanted[i] = [(v["vid"], role_of.get(v["kind"], "query"), v["text"])
                                 for v in vs or [] if v["kind"] in kinds]
        items = list(dict.fromkeys((r, t) for w in wanted for _, r, t in w))
        found = self.caches.get_vectors(items) if self.caches and items else {}
        missing = sorted({x for x in items if x not in found})  # sorted: the same embed batches as before
        new: dict[tuple[str, str], list[float]] = {}
        if missing:
            out = self.runner.map("embedder", pa.table({"text": [t for _, t in missing],
                                                        "role": [r for r, _ in missing]}))
            new = dict(zip(missing, out["vector"].to_pylist()))
            found.update(new)
        self.stats["texts"] += sum(len(w) for w in wanted)
        self.stats["cached"] += len(items) - len(missing)
        self.stats["embedded"] += len(missing)
        vectors = [[{"vid": vid, "vector": found[(r, t)]} for vid, r, t in w] for w in wanted]
        new_rows: list[list[dict]] = [[] for _ in range(n)]
        if new and self.caches:  # each new vector leaves once, with the first query that asked for it
            owner: dict[tuple[str, str], int] = {}
            for i, w in enumerate(wanted):
                for _, r, t in w:
                    owner.setdefault((r, t), i)
            for key, vec in new.items():
                new_rows[owner[key]] += self.caches.vector_rows({key: vec})
        batch = _set(batch, "vectors", pa.array(vectors, pa.list_(QVEC)))
        return _set(batch, NEW_COLUMNS["qvec"], pa.array(new_rows, pa.list_(ROW_TYPES["qvec"])))


class Retrieve:
    """Stage: full-text + vector + alias lanes -> fuse_rrf -> top `keep` pages per query with their chunk's
    title, heading and snippet (and the rerank passage when `rerank`) as `candidates`; `_hits` (every list's
    entries) when `explain`. Opens the collection once."""

    def __init__(self, cfg: Config, db: str, collection: str, keep: int = 10, rerank: bool = False,
                 explain: bool = False):
        self.cfg = cfg
        self.col = Collection(db, collection, cfg)
        self.keep, self.rerank, self.explain = keep, rerank, explain
        self.stats: dict[str, int] = {"queries": 0, "fts_lists": 0, "vec_lists": 0, "alias_lists": 0}

    def hits(self, batch: pa.Table) -> list[dict]:
        """Every list's page hits for the batch, in the order fusion reads them (orig full text, lex full
        text, vectors, alias; variants in order within each)."""
        cfg, k, lanes = self.cfg, self.cfg.retrieve.k, set(self.cfg.retrieve.lanes)
        rows = batch.select(["qid", "error", "variants"]).to_pylist()
        probe = batch.column("_probe").to_pylist() if "_probe" in batch.column_names else [None] * len(rows)
        wheres = batch.column("_where").to_pylist() if "_where" in batch.column_names else [None] * len(rows)
        vectors = batch.column("vectors").to_pylist() if "vectors" in batch.column_names else [None] * len(rows)
        ok = [i for i, r in enumerate(rows) if r["error"] is None]
        out: list[dict] = []
        fts_todo: list[tuple[str, dict]] = []
        fts_where: list[str | None] = []
        if "fts" in lanes:
            for i in ok:
                qid = rows[i]["qid"]
                for v in rows[i]["variants"]:
                    if v["kind"] == "orig" and probe[i] is not None:
                        out.extend(hit_rows(qid, v["vid"], "orig", "fts", probe[i]))
                    elif v["kind"] in FTS_KINDS:
                        fts_todo.append((qid, v))
                        fts_where.append(wheres[i])
            lists = fts_page_lists(self.col, [v["text"] for _, v in fts_todo], cfg, fts_where)
            for (qid, v), pages in zip(fts_todo, lists):
                out.extend(hit_rows(qid, v["vid"], v["kind"], "fts", pages))
            self.stats["fts_lists"] += len(fts_todo)
        if "vec" in lanes:
            order: list[tuple[str, dict]] = []
            vecs = []
            groups: dict[str | None, list[int]] = defaultdict(list)  # one batched search per distinct filter
            for i in ok:
                kinds = {v["vid"]: v for v in rows[i]["variants"]}
                for x in vectors[i] or []:
                    groups[wheres[i]].append(len(vecs))
                    order.append((rows[i]["qid"], kinds[x["vid"]]))
                    vecs.append(x["vector"])
            by_q: dict[int, list[dict]] = defaultdict(list)
            for where, members in groups.items():
                res = self.col.vector_search_many([vecs[j] for j in members], k * 3, ["path", "chunk_id"], where)
                for r in sorted(res.to_pylist(), key=lambda r: (r["query_index"], r["_distance"])):
                    r["_sim"] = 1.0 - float(r["_distance"])
                    by_q[members[int(r["query_index"])]].append(r)
            for qi, (qid, v) in enumerate(order):
                out.extend(hit_rows(qid, v["vid"], v["kind"], "vec", to_pages(by_q[qi], k, "_sim")))
            self.stats["vec_lists"] += len(vecs)
        if "_title_hits" in batch.column_names:  # title_vec / heading_vec lists (RetrieveTitles)
            for i, hs in enumerate(batch.column("_title_hits").to_pylist()):
                if rows[i]["error"] is None:
                    out.extend({"qid": rows[i]["qid"], **h} for h in hs or [])
        if "alias" in lanes:
            amap = alias_map(self.col)
            for i in ok:
                for v in rows[i]["variants"]:
                    paths = amap.get(alias_key(v["text"])) if v["kind"] in ALIAS_KINDS else None
                    if paths and wheres[i]:
                        paths = allowed_paths(self.col, wheres[i], paths[:k])
                    if paths:
                        pages = [{"path": p, "chunk_id": f"{p}#0", "_score": 1.0} for p in paths[:k]]
                        out.extend(hit_rows(rows[i]["qid"], v["vid"], v["kind"], "alias", pages))
                        self.stats["alias_lists"] += 1
        return out

    def __call__(self, batch: pa.Table) -> pa.Table:
        from pipelines.format_results import fetch_chunks
        from pipelines.rerank_candidates import best_passage, query_keys, snippet

        pin_batch(self.col, batch)  # the index versions ProbeBM25 pinned for this batch (one consistent read)
        hits = self.hits(batch)
        qids = batch.column("qid").to_pylist()
        errors = batch.column("error").to_pylist()
        queries = batch.column("query").to_pylist()
        ok_qids = [q for q, e in zip(qids, errors) if e is None]
        sent = sent_lists(pa.Table.from_pylist(
            [{"qid": q, "vid": v["vid"], "kind": v["kind"]}
             for q, e, vs in zip(qids, errors, batch.column("variants").to_pylist()) if e is None for v in vs or []],
            schema=pa.schema([("qid", pa.string()), ("vid", pa.int32()), ("kind", pa.string())])),
            self.cfg.retrieve.lanes)
        weights = {(q, w["vid"]): w["weight"] for q, ws in zip(qids, batch.column("_weights").to_pylist())
                   for w in ws or []} if "_weights" in batch.column_names else None  # clean_fields
        fused = fuse_rrf(pa.Table.from_pylist(hits, schema=HITS), self.cfg.fuse, ok_qids, sent, weights)
        fused = fused.filter(pa.compute.less_equal(fused["_rank"], self.keep))
        chunks = fetch_chunks(self.col, set(fused["chunk_id"].to_pylist()), self.cfg.cache.memory_rows)
        qtext = {q: t for q, t, e in zip(qids, queries, errors) if e is None}  # ok qids are unique
        lex = {q: [v["text"] for v in vs or [] if v["kind"] == "lex"]  # an agent's short_query, keywords
               for q, vs in zip(qids, batch.column("variants").to_pylist())}
        keys = {q: query_keys(t, *lex.get(q, [])) for q, t in qtext.items()}
        rc = self.cfg.retrieve
        per_q: dict[str, list[dict]] = defaultdict(list)
        ptoks = self.cfg.rerank.passage_tokens
        for r in fused.to_pylist():
            c = chunks.get(r["chunk_id"], {"title": r["path"], "heading": "", "text": ""})
            q = qtext[r["qid"]]
            snip = snippet(c["text"], keys[r["qid"]], rc.snippet_tokens, rc.snippet_chars)
            passage = None
            if self.rerank:
                head = " > ".join(x for x in (c["title"], c["heading"]) if x)
                passage = head + "\n" + best_passage(c["text"], q, ptoks)
            per_q[r["qid"]].append({"path": r["path"], "chunk_id": r["chunk_id"], "title": c["title"],
                                    "heading": c["heading"], "snippet": snip, "passage": passage,
                                    "_rrf": r["_rrf"], "_norm": r["_norm"], "_rank": r["_rank"],
                                    "score": r["_norm"], "_rerank": None})
        self.stats["queries"] += len(ok_qids)
        cands = [per_q.get(q, []) if e is None else None for q, e in zip(qids, errors)]
        batch = _set(batch, "candidates", pa.array(cands, pa.list_(CANDIDATE)))
        if self.explain:
            by_qid: dict[str, list[dict]] = defaultdict(list)
            for h in hits:
                by_qid[h["qid"]].append({k: v for k, v in h.items() if k != "qid"})
            batch = _set(batch, "_hits", pa.array([by_qid.get(q, []) if e is None else None
                                                  for q, e in zip(qids, errors)], pa.list_(HIT)))
        drop = [c for c in ("_probe", "vectors", "_where", "_title_hits", "_weights") if c in batch.column_names]
        return batch.drop_columns(drop)
