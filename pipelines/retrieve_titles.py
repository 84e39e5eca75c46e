"""Stage: the query's vector against page titles/aliases and headings, each embedded as its own short vector.

Two cheap lanes that need no generation (issue 11): `title_vec` ranks pages by the best cosine between the
query vector and the page's title or one of its aliases (an alias's last path segment too); `heading_vec`
ranks pages by their best heading (`title > heading` when `retrieve.heading_text` is "breadcrumb"). A strong
agent's short_query is usually the page's title; these lanes find it by meaning when the words differ.

The vectors live in a small table `<collection>_titles` (key, setting, path, chunk_id, kind, text, vector),
built on first use from the documents and chunks tables and kept in step incrementally: `setting` hashes the
embedder file, its prompt format, the prompt role and the heading text form, a row's key hashes the setting and
the row, so only new titles/headings are embedded, removed ones are deleted, and a model change embeds anew.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import pyarrow as pa

from fanout.caches import cache_key
from fanout.config import Config
from fanout.db import Collection
from fanout.runner import Runner
from pipelines.chunk_notes import _HEADING, scan_lines

log = logging.getLogger(__name__)

TITLE_LANES = {"title_vec": ("title", "alias"), "heading_vec": ("heading",)}  # lane -> row kinds it searches
TITLES = pa.schema([("key", pa.string()), ("setting", pa.string()), ("path", pa.string()),
                    ("chunk_id", pa.string()), ("kind", pa.string()), ("text", pa.string())])


_READY: set[tuple] = set()  # (db, collection, setting, documents version, chunks version) checked in step


def titles_name(col: Collection) -> str:
    return f"{col.name}_titles"


def title_texts(col: Collection, heading_text: str = "breadcrumb") -> list[dict]:
    """(path, chunk_id, kind, text) rows: each page's title, aliases (+ last path segment) and headings.

    Deduped per page and kind (case-insensitively); a heading row points at the chunk it was found in.
    """
    docs = col.table(col.documents_name).search().select(["path", "title", "aliases"]).limit(None).to_arrow()
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
    chunks = col.table(col.chunks_name).search().select(["chunk_id", "path", "heading", "text"]).limit(None).to_arrow()
    for c in chunks.to_pylist():
        names = [c["heading"].split(" > ")[-1]] if c["heading"] else []
        names += [m.group(2).strip() for ln in scan_lines(c["text"] or "")
                  if not ln.in_fence and (m := _HEADING.match(ln.text)) and len(m.group(1)) > 1]
        t = title_of.get(c["path"], "")
        for h in names:
            if h.casefold() == t.casefold():  # an H1 that repeats the title is the title row already
                continue
            add(c["path"], "heading", f"{t} > {h}" if heading_text == "breadcrumb" and t else h, c["chunk_id"])
    return rows


def title_setting(cfg: Config, embed_model: str) -> str:
    """What the vectors depend on besides the text: rows of other settings stay in the table, unused."""
    r = cfg.retrieve
    return cache_key("titles", embed_model, cfg.models.embed_prompt, r.title_role, r.heading_text)[:16]


def ensure_titles(col: Collection, runner: Runner, cfg: Config, embed_model: str,
                  kinds: tuple[str, ...] = ("title", "alias", "heading")) -> str:
    """Bring the titles table's rows of `kinds` in step with the collection for this setting; embed only new rows.

    Returns the setting id to filter searches on. Checked once per process for each version of the
    collection's documents and chunks tables (a re-index in a long-lived process is seen).
    """
    setting = title_setting(cfg, embed_model)
    state = (str(col.db_dir.resolve()), col.name, setting, kinds, col.table(col.documents_name).version,
             col.table(col.chunks_name).version)
    if state in _READY:
        return setting
    wanted = [w for w in title_texts(col, cfg.retrieve.heading_text) if w["kind"] in kinds]
    for w in wanted:
        w["key"] = cache_key(setting, w["path"], w["kind"], w["text"])
        w["setting"] = setting
    name = titles_name(col)
    stored = col.table(name).to_arrow() if col.has(name) else None
    mine = set() if stored is None else {
        k for k, st, kd in zip(stored["key"].to_pylist(), stored["setting"].to_pylist(), stored["kind"].to_pylist())
        if st == setting and kd in kinds}
    want_keys = {w["key"] for w in wanted}
    missing = [w for w in wanted if w["key"] not in mine]
    stale = mine - want_keys
    if missing:
        log.info("embedding %d titles/headings of %s", len(missing), col.name)
        out = runner.map("embedder", pa.table({"text": [w["text"] for w in missing],
                                               "role": [cfg.retrieve.title_role] * len(missing)}))
        new = pa.Table.from_pylist(missing, schema=TITLES).append_column("vector", out["vector"])
        if stored is None:
            col.db.create_table(name, data=new)
        else:
            col.table(name).add(new)
    if stale:
        col.table(name).delete("key IN (" + ", ".join(f"'{k}'" for k in sorted(stale)) + ")")  # hex keys
    _READY.add(state)
    return setting


def title_lane_hits(qvecs: list[tuple[dict, list[float]]], col: Collection, runner: Runner, cfg: Config,
                    embed_model: str) -> list[dict]:
    """HITS rows of the title lanes for (variant row, query vector) pairs; one batched search per lane."""
    lanes = [ln for ln in cfg.retrieve.lanes if ln in TITLE_LANES]
    kinds = set(cfg.retrieve.title_kinds)
    qvecs = [(v, q) for v, q in qvecs if v["kind"] in kinds]
    if not lanes or not qvecs:
        return []
    setting = ensure_titles(col, runner, cfg, embed_model, tuple(kd for ln in lanes for kd in TITLE_LANES[ln]))
    tbl = col.table(titles_name(col))
    k = cfg.retrieve.k
    out: list[dict] = []
    for lane in lanes:
        kinds_in = ", ".join(f"'{kd}'" for kd in TITLE_LANES[lane])
        where = f"setting = '{setting}' AND kind IN ({kinds_in})"
        vectors = [q for _, q in qvecs]
        q = tbl.search(vectors if len(vectors) > 1 else vectors[0]).distance_type("cosine")
        res = q.where(where, prefilter=True).select(["path", "chunk_id", "text"]).limit(k * 4).to_arrow().to_pylist()
        by_q: dict[int, list[dict]] = defaultdict(list)
        for row in sorted(res, key=lambda x: (x.get("query_index", 0), x["_distance"])):
            by_q[int(row.get("query_index", 0))].append(row)
        for qi, (v, _) in enumerate(qvecs):
            seen: set[str] = set()
            rank = 0
            for row in by_q[qi]:
                if row["path"] in seen:
                    continue
                seen.add(row["path"])
                rank += 1
                out.append({"qid": v["qid"], "vid": v["vid"], "kind": v["kind"], "lane": lane,
                            "path": row["path"], "chunk_id": row["chunk_id"], "_rank": rank,
                            "_score": 1.0 - float(row["_distance"])})
                if rank == k:
                    break
    return out
