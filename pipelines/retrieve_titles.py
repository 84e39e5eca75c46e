"""Stage: the query's vector against page titles/aliases and headings, each embedded as its own short vector.

Two cheap lanes that need no generation (issue 11), off by default (`retrieve.lanes`; see configs/local.yaml
for what they scored): `title_vec` ranks pages by the best cosine between the original query's vector and the
page's title or one of its aliases (an alias's last path segment too); `heading_vec` ranks pages by their
best heading (`title > heading` when `retrieve.heading_text` is "breadcrumb"). A strong agent's short_query is
usually the page's title; these lanes find it by meaning when the words differ.

The vectors live in a small table `<collection>_titles` (key, setting, path, chunk_id, kind, text, vector),
built on first use from the documents and chunks tables and kept in step incrementally: `setting` hashes the
embedder file, its prompt format, the prompt role and the heading text form; a row's key hashes the setting
and the row, so only new titles/headings are embedded, removed ones are deleted, and a model change embeds
anew (rows of other settings stay, unused). Built under a file lock per table (several workers may start at
once) and checked once per pinned index version.

`RetrieveTitles` runs after EmbedVariants (it reads the `vectors` column) as an embedder-role stage (it may
embed titles on first use) and leaves `_title_hits` (HIT rows) for Retrieve to fuse with the other lanes.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import pyarrow as pa
from fanout.pipelines.lanes import allowed_paths
from fanout.pipelines.markdown import HEADING, scan_lines

from fanout.config import Config
from fanout.exec.runner import Runner
from fanout.models.identity import model_identity
from fanout.schemas import HIT, LANE_KINDS, WHERE
from fanout.store.caches import cache_key, table_lock
from fanout.store.db import Collection, pin_batch

log = logging.getLogger(__name__)

TITLE_LANES: dict[str, tuple[str, ...]] = {"title_vec": ("title", "alias"), "heading_vec": ("heading",)}  # row kinds
TITLES = pa.schema([("key", pa.string()), ("setting", pa.string()), ("path", pa.string()),
                    ("chunk_id", pa.string()), ("kind", pa.string()), ("text", pa.string())])
HITS_COLUMN = "_title_hits"
FILTER_OVERFETCH = 4  # a filtered query's title lists fetch k x this pages, then keep those that pass the filter


def titles_name(col: Collection) -> str:
    return f"{col.name}_titles"


def title_texts(col: Collection, heading_text: str = "breadcrumb") -> list[dict]:
    """(path, chunk_id, kind, text) rows: each page's title, aliases (+ last path segment) and headings.

    Deduped per page and kind (case-insensitively); a heading row points at the chunk it was found in;
    headings inside code fences are not headings.
    """
    with col.guard(col.documents_name):
        docs = col.table(col.documents_name).to_arrow().select(["path", "title", "aliases"])
    rows: list[dict] = []
    seen: set[tuple[str, str, str]] = set()
    title_of: dict[str, str] = {}

    def add(path: str, kind: str, text: str | None, chunk_id: str | None = None) -> None:
        text = " ".join((text or "").split())
        if text and (path, kind, text.casefold()) not in seen:
            seen.add((path, kind, text.casefold()))
            rows.append({"path": path, "chunk_id": chunk_id or f"{path}#0", "kind": kind, "text": text})

    for d in docs.to_pylist():
        title_of[d["path"]] = d["title"]
        add(d["path"], "title", d["title"])
        for a in d["aliases"] or []:
            add(d["path"], "alias", a)
            if "/" in a:
                add(d["path"], "alias", a.rsplit("/", 1)[-1])
    with col.guard(col.chunks_name):
        chunks = col.table(col.chunks_name).to_arrow().select(["chunk_id", "path", "heading", "text"])
    for c in chunks.to_pylist():
        names = [c["heading"].split(" > ")[-1]] if c["heading"] else []
        names += [m.group(2).strip() for ln in scan_lines(c["text"] or "")
                  if not ln.in_fence and (m := HEADING.match(ln.text)) and len(m.group(1)) > 1]
        t = title_of.get(c["path"], "")
        for h in names:
            if h.casefold() == t.casefold():  # an H1 that repeats the title is the title row already
                continue
            add(c["path"], "heading", f"{t} > {h}" if heading_text == "breadcrumb" and t else h, c["chunk_id"])
    return rows


def title_setting(cfg: Config) -> str:
    """What the vectors depend on besides the text."""
    r = cfg.retrieve
    sha = model_identity(cfg, "embedder")[1]
    return cache_key("titles", sha, cfg.models.embed_prompt, r.title_role, r.heading_text)[:16]


def ensure_titles(col: Collection, runner: Runner, cfg: Config, kinds: tuple[str, ...] = ("title", "alias", "heading")
                  ) -> tuple[str, object]:
    """Bring the titles table's rows of `kinds` in step with the collection for this setting; embed only new rows.

    Returns (setting id, the table's handle) to search with. Callers memoise it per pinned index version.
    """
    setting = title_setting(cfg)
    name = titles_name(col)
    with table_lock(col.db_dir, name):
        wanted = [w for w in title_texts(col, cfg.retrieve.heading_text) if w["kind"] in kinds]
        for w in wanted:
            w["key"] = cache_key(setting, w["path"], w["kind"], w["text"])
            w["setting"] = setting
        stored = col.db.open_table(name).to_arrow().select(["key", "setting", "kind"]) if col.has(name) else None
        mine = set() if stored is None else {
            k for k, st, kd in zip(stored["key"].to_pylist(), stored["setting"].to_pylist(),
                                   stored["kind"].to_pylist()) if st == setting and kd in kinds}
        missing = [w for w in wanted if w["key"] not in mine]
        stale = mine - {w["key"] for w in wanted}
        if missing:
            log.info("embedding %d titles/headings of %s", len(missing), col.name)
            out = runner.map("embedder", pa.table({"text": [w["text"] for w in missing],
                                                   "role": [cfg.retrieve.title_role] * len(missing)}))
            new = pa.Table.from_pylist(missing, schema=TITLES).append_column("vector", out["vector"])
            if stored is None:
                col.db.create_table(name, data=new)
            else:
                col.db.open_table(name).add(new)
        if stale:
            col.db.open_table(name).delete("key IN (" + ", ".join(f"'{k}'" for k in sorted(stale)) + ")")  # hex
        return setting, col.db.open_table(name)


def title_lane_hits(qvecs: list[tuple[str, int, str, list[float]]], tbl, setting: str, lane: str, k: int
                    ) -> list[dict]:
    """HITS rows (with qid) of one title lane for (qid, vid, kind, query vector) rows: one batched search."""
    if not qvecs:
        return []
    kinds_in = ", ".join(f"'{kd}'" for kd in TITLE_LANES[lane])
    vectors = [q for _, _, _, q in qvecs]
    q = tbl.search(vectors if len(vectors) > 1 else vectors[0]).distance_type("cosine")
    res = q.where(f"setting = '{setting}' AND kind IN ({kinds_in})", prefilter=True) \
        .select(["path", "chunk_id"]).limit(k * 4).to_arrow().to_pylist()
    by_q: dict[int, list[dict]] = defaultdict(list)
    for row in sorted(res, key=lambda x: (x.get("query_index", 0), x["_distance"])):
        by_q[int(row.get("query_index", 0))].append(row)
    out: list[dict] = []
    for qi, (qid, vid, kind, _) in enumerate(qvecs):
        seen: set[str] = set()
        for row in by_q[qi]:
            if row["path"] in seen:
                continue
            seen.add(row["path"])
            out.append({"qid": qid, "vid": vid, "kind": kind, "lane": lane, "path": row["path"],
                        "chunk_id": row["chunk_id"], "_rank": len(seen), "_score": 1.0 - float(row["_distance"])})
            if len(seen) == k:
                break
    return out


def filtered(col: Collection, where: str, hits: list[dict], k: int) -> list[dict]:
    """Of title-lane hits (with qid), those whose page passes the query's filter, re-ranked 1.., k per list."""
    ok = set(allowed_paths(col, where, sorted({h["path"] for h in hits})))
    out: list[dict] = []
    rank: dict[tuple, int] = defaultdict(int)
    for h in hits:  # in rank order per (qid, vid)
        key = (h["qid"], h["vid"])
        if h["path"] in ok and rank[key] < k:
            rank[key] += 1
            out.append({**h, "_rank": rank[key]})
    return out


class RetrieveTitles:
    """Embedder-role stage: + `_title_hits` (the title_vec / heading_vec lists of each query's routed variants).

    Reads the query vectors EmbedVariants left in `vectors`; builds or updates the titles table on first use
    per index version (its only model calls).
    """

    def __init__(self, cfg: Config, db: str, collection: str, runner: Runner | None = None):
        self.cfg = cfg
        self.runner = runner or Runner(cfg)
        self.col = Collection(db, collection, cfg)
        self.lanes = [ln for ln in cfg.retrieve.lanes if ln in TITLE_LANES]
        self.kinds = tuple(kd for ln in self.lanes for kd in TITLE_LANES[ln])
        self.stats: dict[str, int] = {f"{ln}_lists": 0 for ln in self.lanes}

    def __call__(self, batch: pa.Table) -> pa.Table:
        pin_batch(self.col, batch)
        rows = batch.select(["qid", "error", "variants"]).to_pylist()
        vectors = batch.column("vectors").to_pylist() if "vectors" in batch.column_names else [None] * len(rows)
        wheres = batch.column(WHERE).to_pylist() if WHERE in batch.column_names else [None] * len(rows)
        hits: list[dict] = []
        if self.lanes and any(v for v in vectors):
            setting, tbl = self.col.memo(f"titles:{','.join(self.kinds)}",
                                         lambda: ensure_titles(self.col, self.runner, self.cfg, self.kinds))
            k = self.cfg.retrieve.k
            for lane in self.lanes:
                groups: dict[str | None, list] = defaultdict(list)  # a query's filter -> its (qid, vid, kind, vector)
                for r, vs, where in zip(rows, vectors, wheres):
                    if r["error"] is None:
                        kind = {v["vid"]: v["kind"] for v in r["variants"] or []}
                        groups[where] += [(r["qid"], x["vid"], kind[x["vid"]], x["vector"]) for x in vs or []
                                          if kind.get(x["vid"]) in LANE_KINDS[lane]]
                for where, qvecs in groups.items():
                    if where is None:
                        hits += title_lane_hits(qvecs, tbl, setting, lane, k)
                    else:  # the titles table has no tags/props: over-fetch, keep the pages that pass the filter
                        hits += filtered(self.col, where, title_lane_hits(qvecs, tbl, setting, lane, k * FILTER_OVERFETCH), k)
                    self.stats[f"{lane}_lists"] += len(qvecs)
        per_q: dict[str, list[dict]] = defaultdict(list)
        for h in hits:
            per_q[h.pop("qid")].append(h)
        col = pa.array([per_q.get(r["qid"], []) for r in rows], pa.list_(HIT))
        if HITS_COLUMN in batch.column_names:
            return batch.set_column(batch.schema.get_field_index(HITS_COLUMN), HITS_COLUMN, col)
        return batch.append_column(HITS_COLUMN, col)
