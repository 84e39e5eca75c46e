"""Stages: embed the variants (EmbedVariants), then retrieve, fuse and fetch (Retrieve).

Routing (qmd): `lex` -> full-text only; `vec`/`hyde` -> vectors only; the original query -> both. Plus an
exact title/alias lane for the original query and `lex` variants (OHS, trip2g-alias). The vectors of a
batch's variants are read from the cache or embedded in as few calls as possible (EmbedVariants, a model
stage); Retrieve then runs the full-text lists, ONE batched LanceDB vector search and the alias lane, fuses
them (fuse_rrf), keeps each query's top pages and fetches their chunks for titles, snippets and passages.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
from fanout.pipelines.fuse_rrf import fuse_rows, sent_rows
from fanout.pipelines.lanes import (
    alias_key,
    alias_map,
    allowed_paths,
    column_pages,
    fetch_chunks,
    fts_page_lists,
    hit_rows,
)
from fanout.pipelines.passages import best_passage, query_keys, snippet

from fanout.config import Config
from fanout.exec.runner import Runner
from fanout.models.identity import model_identity
from fanout.schemas import CANDIDATE, HIT, LANE_KINDS, QUERY_TEXTS, QVEC, VECTOR_LANES, set_column
from fanout.store.caches import NEW_COLUMNS, ROW_TYPES, Caches, qvec_rows
from fanout.store.db import Collection, pin_batch

FTS_KINDS = LANE_KINDS["fts"]
VEC_KINDS = LANE_KINDS["vec"]
ALIAS_KINDS = LANE_KINDS["alias"]


WANT = pa.struct([("vid", pa.int32()), ("role", pa.string()), ("text", pa.string()),
                  ("vector", pa.list_(pa.float32()))])  # `_want`: a vector a query needs (null: not cached)


class LookupVectors:
    """Stage (CPU pool): + `_want`, the query vectors each query's vector lanes need (`vid`, prompt role, text),
    with the vector when the query-vector cache has it (read here, so the model pool never opens the index
    or imports lancedb: EmbedVariants then embeds only what is missing)."""

    def __init__(self, cfg: Config, db: str, collection: str, embed_model: str | None = None):
        """`embed_model`: the embedder's sha256 as the driver resolved it (search_stages passes it, so a CPU
        node never needs the model file); resolved here when not given."""
        self.cfg = cfg
        sha = embed_model or model_identity(cfg, "embedder")[1]
        self.caches = Caches(Collection(db, collection, cfg), sha, cfg.models.embed_prompt,
                             memory_rows=cfg.cache.memory_rows) if cfg.cache.enabled else None
        self.stats: dict[str, int] = {"texts": 0, "cached": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        errors = batch.column("error").to_pylist()
        variants = batch.column("variants").to_pylist()
        role_of = {"hyde": self.cfg.retrieve.hyde_prompt}
        wanted: list[list[tuple[int, str, str]]] = [[] for _ in range(n)]
        # the kinds the vector lane searches
        kinds = {k for ln in self.cfg.retrieve.lanes if ln in VECTOR_LANES for k in LANE_KINDS[ln]}
        if kinds:
            for i, vs in enumerate(variants):
                if errors[i] is None:
                    wanted[i] = [(v["vid"], role_of.get(v["kind"], "query"), v["text"])
                                 for v in vs or [] if v["kind"] in kinds]
        items = list(dict.fromkeys((r, t) for w in wanted for _, r, t in w))
        found = self.caches.get_vectors(items) if self.caches and items else {}
        self.stats["texts"] += sum(len(w) for w in wanted)
        self.stats["cached"] += sum(x in found for x in items)
        want = [[{"vid": vid, "role": r, "text": t, "vector": found.get((r, t))} for vid, r, t in w] for w in wanted]
        return set_column(batch, "_want", pa.array(want, pa.list_(WANT)))


class EmbedVariants:
    """Model stage: `_want` -> `vectors` (one per vector-lane variant: `vid`, `vector`) and `_new_qvec` cache
    rows. What LookupVectors found in the cache is kept; the rest is embedded in one runner call per batch,
    each distinct (prompt role, text) once. Holds no index: a model actor imports no lancedb."""

    def __init__(self, cfg: Config, runner: Runner | None = None, embed_model: str | None = None):
        """`embed_model`: the embedder's sha256 as the driver resolved it (the same key LookupVectors reads)."""
        self.cfg = cfg
        self.runner = runner or Runner(cfg)
        self.model = embed_model or model_identity(cfg, "embedder")[1]
        self.stats: dict[str, int] = {"embedded": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        want = batch.column("_want").to_pylist() if "_want" in batch.column_names else [[] for _ in range(n)]
        found = {(x["role"], x["text"]): x["vector"] for w in want for x in w or [] if x["vector"] is not None}
        missing = sorted({(x["role"], x["text"]) for w in want for x in w or []} - set(found))  # sorted: the
        new: dict[tuple[str, str], list[float]] = {}  # same embed batches whatever the cache held
        if missing:
            out = self.runner.map("embedder", pa.table({"text": [t for _, t in missing],
                                                        "role": [r for r, _ in missing],
                                                        QUERY_TEXTS: pa.array([self.cfg.embedder.query_batch_size]
                                                                              * len(missing), pa.int32())}))
            new = dict(zip(missing, out["vector"].to_pylist()))
            found.update(new)
        self.stats["embedded"] += len(missing)
        vectors = [[{"vid": x["vid"], "vector": found[(x["role"], x["text"])]} for x in w or []] for w in want]
        new_rows: list[list[dict]] = [[] for _ in range(n)]
        if new and self.cfg.cache.enabled:  # each new vector leaves once, with the first query that asked for it
            owner: dict[tuple[str, str], int] = {}
            for i, w in enumerate(want):
                for x in w or []:
                    owner.setdefault((x["role"], x["text"]), i)
            for key, vec in new.items():
                new_rows[owner[key]] += qvec_rows(self.model, self.cfg.models.embed_prompt, {key: vec})
        batch = set_column(batch, "vectors", pa.array(vectors, pa.list_(QVEC)))
        batch = batch.drop_columns(["_want"]) if "_want" in batch.column_names else batch
        return set_column(batch, NEW_COLUMNS["qvec"], pa.array(new_rows, pa.list_(ROW_TYPES["qvec"])))


def query_vectors(batch: pa.Table) -> tuple[list[list[tuple[int, int]]], np.ndarray | list]:
    """The `vectors` column as (per query its (vid, row) pairs, the vectors): a float32 matrix read from the
    Arrow buffers when every vector has the same length (converting 768 floats a vector to Python and back
    cost ~0.1 ms a query), else a list of the vectors as Python lists."""
    n = batch.num_rows
    if "vectors" not in batch.column_names:
        return [[] for _ in range(n)], []
    col = batch.column("vectors").combine_chunks()
    flat = pa.compute.list_flatten(col)  # the structs of the non-null lists, in query order
    parents = pa.compute.list_parent_indices(col).to_numpy()
    vid = flat.field("vid").to_numpy(zero_copy_only=False).tolist()
    pairs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for j, (i, v) in enumerate(zip(parents.tolist(), vid)):
        pairs[i].append((v, j))
    vec = flat.field("vector")
    lengths = pa.compute.list_value_length(vec).to_numpy(zero_copy_only=False)
    if len(vec) and not vec.null_count and not flat.null_count and (lengths == lengths[0]).all() and lengths[0]:
        values = pa.compute.list_flatten(vec).to_numpy(zero_copy_only=False)
        return pairs, np.asarray(values, np.float32).reshape(len(vec), int(lengths[0]))
    return pairs, vec.to_pylist()


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
        probe: list[Any] = batch.column("_probe").to_pylist() if "_probe" in batch.column_names else [None] * len(rows)
        wheres: list[Any] = batch.column("_where").to_pylist() if "_where" in batch.column_names else [None] * len(rows)
        vids, matrix = query_vectors(batch)
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
            at: list[int] = []  # each searched vector's row in `matrix`
            groups: dict[str | None, list[int]] = defaultdict(list)  # one batched search per distinct filter
            for i in ok:
                kinds = {v["vid"]: v for v in rows[i]["variants"]}
                for vid, j in vids[i]:
                    groups[wheres[i]].append(len(at))
                    order.append((rows[i]["qid"], kinds[vid]))
                    at.append(j)
            by_q: dict[int, list[dict]] = {}
            for where, members in groups.items():
                picked = [matrix[at[j]] for j in members] if isinstance(matrix, list) else \
                    matrix[np.asarray([at[j] for j in members], np.int64)]
                res = self.col.vector_search_many(picked, k * 3, ["path", "chunk_id"], where)
                if not res.num_rows:
                    continue
                # best first per query vector (a stable sort, as Python's sorted was: ties keep LanceDB's order)
                res = res.sort_by([("query_index", "ascending"), ("_distance", "ascending")])
                qi = res["query_index"].to_numpy()
                cuts = np.flatnonzero(np.diff(qi)) + 1
                starts, ends = np.concatenate(([0], cuts)), np.concatenate((cuts, [len(qi)]))
                paths, cids = res["path"].to_pylist(), res["chunk_id"].to_pylist()
                sims = (1.0 - res["_distance"].to_numpy().astype(np.float64)).tolist()
                for a, b in zip(starts.tolist(), ends.tolist()):
                    by_q[members[int(qi[a])]] = column_pages(paths[a:b], cids[a:b], sims[a:b], k)
            for qi_, (qid, v) in enumerate(order):
                out.extend(hit_rows(qid, v["vid"], v["kind"], "vec", by_q.get(qi_, [])))
            self.stats["vec_lists"] += len(at)
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
        pin_batch(self.col, batch)  # the index versions ProbeBM25 pinned for this batch (one consistent read)
        hits = self.hits(batch)
        qids = batch.column("qid").to_pylist()
        errors = batch.column("error").to_pylist()
        queries = batch.column("query").to_pylist()
        ok_qids = [q for q, e in zip(qids, errors) if e is None]
        variants = batch.column("variants").to_pylist()
        sent = sent_rows([{"qid": q, "vid": v["vid"], "kind": v["kind"]}
                          for q, e, vs in zip(qids, errors, variants) if e is None for v in vs or []],
                         self.cfg.retrieve.lanes)
        fused = fuse_rows(hits, self.cfg.fuse, ok_qids, sent, keep=self.keep)
        chunks = fetch_chunks(self.col, {r["chunk_id"] for r in fused}, self.cfg.cache.memory_rows)
        qtext = {q: t for q, t, e in zip(qids, queries, errors) if e is None}  # ok qids are unique
        lex = {q: [v["text"] for v in vs or [] if v["kind"] == "lex"]  # an agent's short_query, keywords
               for q, vs in zip(qids, variants)}
        keys = {q: query_keys(t, *lex.get(q, [])) for q, t in qtext.items()}
        rc = self.cfg.retrieve
        per_q: dict[str, list[dict]] = defaultdict(list)
        ptoks = self.cfg.rerank.passage_tokens
        for r in fused:
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
        batch = set_column(batch, "candidates", pa.array(cands, pa.list_(CANDIDATE)))
        if self.explain:
            by_qid: dict[str, list[dict]] = defaultdict(list)
            for h in hits:
                by_qid[h["qid"]].append({k: v for k, v in h.items() if k != "qid"})
            batch = set_column(batch, "_hits", pa.array([by_qid.get(q, []) if e is None else None
                                                  for q, e in zip(qids, errors)], pa.list_(HIT)))
        drop = [c for c in ("_probe", "vectors", "_where") if c in batch.column_names]
        return batch.drop_columns(drop)
