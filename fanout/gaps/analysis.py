"""`fanout gaps`: a `fanout batch` answers file -> the questions the notes do not answer, grouped.

    read the answers (streamed: parquet batches, CSV blocks, JSONL lines; any fanout.store.storage URI) -> one
    record per query (the rows of a query are contiguous, as `fanout batch` writes them) -> its band by its
    best score: unanswered (< gaps.unanswered_below), weak (< gaps.weak_below), else answered and dropped
    -> flagged queries by text (repeats counted) -> their vectors (the query-vector cache; a missing one is
    embedded, counted) -> groups (scikit-learn agglomerative clustering, average linkage on cosine distance;
    past gaps.cluster_exact_max texts it is fitted on a sample and the rest joins its nearest group) -> each
    group named by its most central queries and its tf-idf terms, with its asks, its closest pages and the
    terms their headings lack -> report.md, report.html (fanout/gaps/report.py), flagged.parquet,
    groups.parquet.

Why scikit-learn's AgglomerativeClustering: the number of gaps is unknown, and a distance threshold (not a
k) says what "the same question" means; average linkage on cosine keeps one odd query from chaining two
topics together (single linkage does); it is the maintained reference implementation, and its cost
(O(n^2) memory) is bounded by fitting on at most `cluster_exact_max` distinct texts.

The answers must come from the collection and index version asked about: every row of `fanout batch`
output carries `index` (`<collection>@<stamp>`, fanout.store.db.index_stamp); another one is refused. Error
rows (a query that did not parse) and unreadable lines are counted, never fatal.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from fanout.config import Config, GapsConfig
from fanout.errors import UserError
from fanout.gaps.previous import lost_pages
from fanout.gaps.read import BANDS, READ_ROWS, ReadStats, read_answers, text_key
from fanout.text import stem_key, terms

if TYPE_CHECKING:
    from fanout.exec.runner import Runner

log = logging.getLogger(__name__)

FLAGGED = pa.schema([("qid", pa.string()), ("query", pa.string()), ("group_id", pa.int32()),
                     ("band", pa.string()), ("score", pa.float64())])
GROUPS = pa.schema([("group_id", pa.int32()), ("name", pa.string()), ("asks", pa.int64()),
                    ("queries", pa.int64()), ("lost", pa.int64()), ("unanswered", pa.int64()), ("weak", pa.int64()),
                    ("mean_score", pa.float64()), ("band", pa.string()), ("examples", pa.list_(pa.string())),
                    ("terms", pa.list_(pa.string())), ("pages", pa.list_(pa.string()))])


# -- one record per query, flagged ones kept -----------------------------------------------------------
@dataclass
class Query:
    qid: str
    query: str
    score: float  # best score of its pages (0 when none came back)
    band: str
    pages: list[tuple[str, str, float]]  # (path, title, score) of its top pages, best first


def band_of(score: float, g: GapsConfig) -> str | None:
    return "unanswered" if score < g.unanswered_below else "weak" if score < g.weak_below else None


def check_answered_by(stamp: str | None, want: str, where: str) -> None:
    """Refuse answers of another collection or index version (fanout.store.db.index_stamp)."""
    if stamp is None:
        raise UserError(f"{where}: no `index` value on its rows, so which index answered is unknown (a file "
                        f"from an older fanout batch, or not a batch output); answer the queries again with "
                        f"`fanout batch QUERIES --out FILE --db DB -c {want.split('@')[0]}`")
    have_col, want_col = stamp.split("@")[0], want.split("@")[0]
    if have_col != want_col:
        raise UserError(f"{where}: answered from collection {have_col!r}, not {want_col!r}; pass -c {have_col} "
                        f"(and its --db), or answer the queries against {want_col!r} with `fanout batch`")
    if stamp != want:
        raise UserError(f"{where}: answered by index version {stamp}, but {want_col!r} is now {want} (re-indexed "
                        f"or rebuilt since): its scores and pages may no longer hold; answer the queries again "
                        f"with `fanout batch` against the current index")


def flagged_queries(tables: Iterator[pa.Table], g: GapsConfig, want_index: str, where: str,
                    stats: ReadStats, gone: dict[str, str] | None = None) -> Iterator[Query]:
    """One Query per flagged query (answered ones are only counted). Rows of one query are contiguous (as
    fanout batch writes them): a query's record is complete when the next qid starts. `gone` (from --previous,
    fanout/gaps/previous.py): text key -> the page that answered it in the previous run and is no longer in the
    index; such a query is flagged `lost` whatever its score now (another page may still mention the topic)."""
    cur: dict[str, Any] | None = None

    def finish(q: dict[str, Any]) -> Query | None:
        stats.queries += 1
        if q["error"] is not None or q["query"] is None:
            stats.errors += 1
            return None
        score = max((p[2] for p in q["pages"]), default=0.0)
        band = "lost" if gone and text_key(q["query"]) in gone else band_of(score, g)
        if band is None:
            stats.answered += 1
            return None
        stats.flagged[band] += 1
        pages = sorted(q["pages"], key=lambda p: -p[2])[:g.top_pages]
        return Query(q["qid"], q["query"], score, band, pages)

    for t in tables:
        stats.rows += t.num_rows
        for stamp in t.column("index").unique().to_pylist():
            if stamp is None or stamp != stats.index:
                check_answered_by(stamp, want_index, where)
                stats.index = stamp
        cols = [t.column(c).to_pylist() for c in ("qid", "query", "path", "title", "score", "error")]
        for qid, query, path, title, score, error in zip(*cols):
            if qid is None:
                stats.bad_lines += 1
                continue
            if cur is None or qid != cur["qid"]:
                if cur is not None and (q := finish(cur)) is not None:
                    yield q
                cur = {"qid": qid, "query": query, "error": error, "pages": []}
            if error is not None:
                cur["error"] = error
            if path is not None and score is not None and math.isfinite(score):
                cur["pages"].append((path, title or path, float(score)))
    if cur is not None and (q := finish(cur)) is not None:
        yield q


# -- by text, vectors, groups ------------------------------------------------------------------------------
@dataclass
class Text:
    text: str  # the first spelling seen
    asks: int = 0
    score: float = 0.0  # best score over its asks
    bands: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BANDS, 0))
    pages: dict[str, tuple[str, float, int]] = field(default_factory=dict)  # path -> (title, best, asks)


def add_query(texts: dict[str, Text], q: Query) -> str:
    """Count one flagged query under its text; returns the text key."""
    key = text_key(q.query)
    t = texts.get(key)
    if t is None:
        t = texts[key] = Text(q.query)
    t.asks += 1
    t.score = max(t.score, q.score)
    t.bands[q.band] += 1
    for path, title, score in q.pages:
        old = t.pages.get(path, (title, 0.0, 0))
        t.pages[path] = (title, max(old[1], score), old[2] + 1)
    return key


SPOOL = pa.schema([("qid", pa.string()), ("query", pa.string()), ("key", pa.string()), ("band", pa.string()),
                   ("score", pa.float64())])


class Spool:
    """The flagged queries, one row each, written to a parquet file as they come (memory holds the distinct
    texts only, not every flagged query); read back with their group once the groups exist."""

    def __init__(self, path: Path, rows: int = READ_ROWS):
        import pyarrow.parquet as pq

        self.path, self.rows = path, rows
        path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = pq.ParquetWriter(path, SPOOL)
        self.buf: dict[str, list] = {n: [] for n in SPOOL.names}

    def add(self, q: Query, key: str) -> None:
        for n, v in zip(SPOOL.names, (q.qid, q.query, key, q.band, q.score)):
            self.buf[n].append(v)
        if len(self.buf["qid"]) >= self.rows:
            self.flush()

    def flush(self) -> None:
        if self.buf["qid"]:
            self.writer.write_table(pa.table(self.buf, schema=SPOOL))
            self.buf = {n: [] for n in SPOOL.names}

    def close(self) -> None:
        self.flush()
        self.writer.close()

    def flagged(self, group_of: dict[str, int]) -> Iterator[pa.RecordBatch]:
        """FLAGGED batches: each spooled row with its text's group."""
        import pyarrow.parquet as pq

        for b in pq.ParquetFile(self.path).iter_batches(batch_size=self.rows):
            gid = pa.array([group_of[k] for k in b.column("key").to_pylist()], pa.int32())
            yield pa.RecordBatch.from_arrays([b.column("qid"), b.column("query"), gid, b.column("band"),
                                              b.column("score")], schema=FLAGGED)


# flagged texts per pass of the query-vector lookup and embed stages (one cache read, one embedder call each):
# bounds the rows held at once, not a speed setting
QUERY_VECTOR_ROWS = 2000


def query_vectors(texts: list[str], cfg: Config, db: str, collection: str,
                  runner: Runner | None = None) -> tuple[np.ndarray, int]:
    """Unit vectors of the texts (as the query, the `query` prompt role) through the search's own stages:
    LookupVectors reads the collection's query-vector cache, EmbedVariants embeds what it does not hold
    (`runner`'s embedder; default an in-process one). Returns (vectors, embedded count)."""
    from fanout.exec.runner import Runner
    from fanout.models.identity import model_identity
    from fanout.pipelines.retrieve_variants import EmbedVariants, LookupVectors
    from fanout.schemas import VARIANT

    if not texts:
        return np.zeros((0, 1), np.float32), 0
    vcfg = cfg.replace(retrieve={"lanes": ("vec",)})  # every text wants its vector, whatever lanes search
    sha = model_identity(cfg, "embedder")[1]
    lookup = LookupVectors(vcfg, db, collection, embed_model=sha)
    embed = EmbedVariants(vcfg, runner or Runner(cfg), embed_model=sha)
    rows: list[list[float]] = []
    for i in range(0, len(texts), QUERY_VECTOR_ROWS):
        part = texts[i:i + QUERY_VECTOR_ROWS]
        batch = pa.table({"qid": [str(k) for k in range(len(part))], "error": pa.nulls(len(part), pa.string()),
                          "variants": pa.array([[{"vid": 0, "kind": "vec", "text": t, "source": None}]
                                                for t in part], pa.list_(VARIANT))})
        out = embed(lookup(batch))
        rows += [v[0]["vector"] for v in out.column("vectors").to_pylist()]
    if lookup.stats["cached"] < len(set(texts)):
        log.info("%d of %d flagged queries were not in the query-vector cache: embedded them",
                 embed.stats["embedded"], len(texts))
    x = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0), embed.stats["embedded"]


def cluster(x: np.ndarray, g: GapsConfig) -> np.ndarray:
    """Group labels (0..k-1) of unit vectors; -1 = joined no group (only past `cluster_exact_max`)."""
    n = len(x)
    if n <= 1:
        return np.zeros(n, dtype=np.int64)
    from sklearn.cluster import AgglomerativeClustering

    def fit(v: np.ndarray) -> np.ndarray:
        return AgglomerativeClustering(n_clusters=None, distance_threshold=g.cluster_distance, metric="cosine",
                                       linkage="average").fit_predict(v)

    if n <= g.cluster_exact_max:
        return fit(x)
    rng = np.random.default_rng(g.seed)
    sample = np.sort(rng.choice(n, g.cluster_exact_max, replace=False))
    lab = fit(x[sample])
    k = int(lab.max()) + 1
    cent = np.zeros((k, x.shape[1]), np.float32)
    np.add.at(cent, lab, x[sample])
    cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-9)
    labels = np.empty(n, dtype=np.int64)
    for i in range(0, n, 8192):  # nearest centroid, in blocks (bounded memory)
        sims = x[i:i + 8192] @ cent.T
        best = sims.argmax(axis=1)
        near = sims[np.arange(len(best)), best] >= 1.0 - g.cluster_distance
        labels[i:i + 8192] = np.where(near, best, -1)
    return labels


# -- groups: names, asks, pages ----------------------------------------------------------------------------
@dataclass
class Group:
    gid: int
    keys: list[str]  # text keys, most central first
    examples: list[str]
    terms: list[str]
    asks: int
    bands: dict[str, int]
    mean_score: float  # asks-weighted mean of the best scores
    pages: list[dict]  # {path, title, score, asks, lacks: [terms no heading of the page mentions]}

    @property
    def band(self) -> str:
        return max(BANDS, key=lambda b: (self.bands[b], b == "lost", b == "unanswered"))

    @property
    def name(self) -> str:
        return " / ".join(self.terms[:3]) if self.terms else (self.examples[0] if self.examples else "?")


# words that name no topic, beyond fanout.text's search stopwords (which keep them out of full text too)
NAMING_STOPWORDS = frozenset({
    "have", "has", "had", "many", "much", "does", "did", "was", "were", "will", "would", "should", "could",
    "some", "any", "all", "more", "most", "very", "also", "just", "only", "want", "need", "there", "here",
    "than", "then", "them", "they", "we", "our", "us", "its", "it's", "been", "being", "way", "ways",
    "thing", "things", "есть", "был", "была", "были", "будет", "мой", "моя", "мои", "все", "всё", "так",
    "там", "тут", "уже", "ещё", "нужно", "надо", "очень",
})


def _name_terms(text: str) -> list[str]:
    return [w for w in terms(text) if w not in NAMING_STOPWORDS and len(w) >= 2 and not w.isdigit()]


def top_terms(group_texts: list[str], df_all: dict[str, int], n_all: int, k: int) -> list[str]:
    """Terms of a group by tf-idf: in how many of the group's texts a term occurs, times log(1 + N/df) over
    all flagged texts (Unicode words, English and Russian stopwords out: fanout.text.terms)."""
    df: dict[str, int] = {}
    shown: dict[str, str] = {}
    for t in group_texts:
        for w in set(_name_terms(t)):
            s = stem_key(w)
            df[s] = df.get(s, 0) + 1
            shown.setdefault(s, w)
    ranked = sorted(df, key=lambda s: (-df[s] * math.log(1 + n_all / df_all.get(s, 1)), shown[s]))
    return [shown[s] for s in ranked[:k]]


def make_groups(texts: dict[str, Text], keys: list[str], x: np.ndarray, labels: np.ndarray,
                g: GapsConfig) -> list[Group]:
    """Groups, most asked first (the unclustered ones, label -1, last), named and with their pages."""
    df_all: dict[str, int] = {}
    for k in keys:
        for s in {stem_key(w) for w in _name_terms(texts[k].text)}:
            df_all[s] = df_all.get(s, 0) + 1
    members: dict[int, list[int]] = {}
    for i, lab in enumerate(labels.tolist()):
        members.setdefault(lab, []).append(i)
    groups = []
    for lab, idx in members.items():
        cent = x[idx].mean(axis=0)
        sims = x[idx] @ cent
        order = [idx[j] for j in sorted(range(len(idx)), key=lambda j: (-sims[j], -texts[keys[idx[j]]].asks))]
        gkeys = [keys[i] for i in order]
        ts = [texts[k] for k in gkeys]
        asks = sum(t.asks for t in ts)
        pages: dict[str, list] = {}
        for t in ts:
            for path, (title, score, n) in t.pages.items():
                p = pages.setdefault(path, [title, 0.0, 0])
                p[1], p[2] = max(p[1], score), p[2] + n
        close = [kv for kv in pages.items() if kv[1][1] > 0]  # a page at score 0 had no evidence: not close
        top = sorted(close, key=lambda kv: (-kv[1][2], -kv[1][1], kv[0]))[:g.top_pages]
        groups.append(Group(
            gid=lab, keys=gkeys, examples=[t.text for t in ts[:g.top_queries]],
            terms=top_terms([t.text for t in ts], df_all, len(keys), g.top_terms), asks=asks,
            bands={b: sum(t.bands[b] for t in ts) for b in BANDS},
            mean_score=sum(t.score * t.asks for t in ts) / max(asks, 1),
            pages=[{"path": p, "title": v[0], "score": v[1], "asks": v[2], "lacks": []} for p, v in top]))
    groups.sort(key=lambda gr: (gr.gid < 0, -gr.asks, gr.mean_score, gr.keys[0]))
    for n, gr in enumerate(groups, 1):
        gr.gid = -1 if gr.gid < 0 else n
    return groups


def mark_lacking(groups: list[Group], headings: dict[str, set[str]]) -> None:
    """For each closest page: the group's terms that neither its title nor any heading mentions (the
    section the page would need). `headings`: path -> stem keys of its title and headings."""
    for gr in groups:
        for p in gr.pages:
            have = headings.get(p["path"], set())
            p["lacks"] = [t for t in gr.terms if stem_key(t) not in have]


def page_headings(cfg: Config, db: str, collection: str, paths: list[str]) -> dict[str, set[str]]:
    """path -> stem keys of the words of its title and headings (the chunks table, the pinned version)."""
    from fanout.store.db import Collection

    if not paths:
        return {}
    col = Collection(db, collection, cfg)
    col.refresh()
    out: dict[str, set[str]] = {}
    with col.guard(col.chunks_name):
        tbl = col.table(col.chunks_name)
        for i in range(0, len(paths), 200):
            quoted = ", ".join("'" + p.replace("'", "''") + "'" for p in paths[i:i + 200])
            rows = tbl.search().where(f"path IN ({quoted})").select(["path", "title", "heading"]).limit(None)
            for r in rows.to_arrow().to_pylist():
                keys = out.setdefault(r["path"], set())
                for text in (r["title"] or "", r["heading"] or "", r["path"].rsplit("/", 1)[-1]):
                    keys.update(stem_key(w) for w in terms(text))
    return out


# -- the whole command -------------------------------------------------------------------------------------
@dataclass
class GapsResult:
    stats: ReadStats
    groups: list[Group]
    spool: Spool  # the flagged queries (Spool.flagged(group_of) gives FLAGGED rows)
    group_of: dict[str, int]  # text key -> group id
    distinct: int  # distinct flagged texts
    embedded: int  # flagged texts not in the query-vector cache, embedded now
    seconds: dict[str, float] = field(default_factory=dict)

    def flagged(self) -> Iterator[pa.RecordBatch]:
        return self.spool.flagged(self.group_of)


def find_gaps(answers: str, db: str, collection: str, cfg: Config, spool: Path,
              progress: Callable[[int, int], None] | None = None,
              runner: Runner | None = None, previous: str | None = None) -> GapsResult:
    """Read, band, group and name; only the spool file (`spool`) is written here (fanout/gaps/report.py
    writes the report). Memory: the distinct flagged texts and one batch of answer rows."""
    import time

    from fanout.store.db import Collection, index_stamp

    g = cfg.gaps
    col = Collection(db, collection, cfg)
    want = index_stamp(collection, col.require())
    stats = ReadStats()
    t0 = time.perf_counter()
    tables = read_answers(answers, cfg.storage, stats, progress)
    texts: dict[str, Text] = {}
    gone = lost_pages(previous, col, cfg) if previous else None
    if gone is not None:
        stats.lost_pages = sorted(set(gone.values()))
    sp = Spool(spool)
    try:
        for q in flagged_queries(tables, g, want, answers, stats, gone):
            sp.add(q, add_query(texts, q))
    finally:
        sp.close()
    if stats.queries == 0:
        raise UserError(f"{answers}: no query rows in it; give the --out file of `fanout batch`")
    t1 = time.perf_counter()
    keys = list(texts)
    x, embedded = query_vectors([texts[k].text for k in keys], cfg, db, collection, runner)
    t2 = time.perf_counter()
    labels = cluster(x, g) if keys else np.zeros(0, dtype=np.int64)
    groups = make_groups(texts, keys, x, labels, g) if keys else []
    paths = sorted({p["path"] for gr in groups[:g.max_groups] for p in gr.pages})
    mark_lacking(groups, page_headings(cfg, db, collection, paths))
    group_of = {k: gr.gid for gr in groups for k in gr.keys}
    t3 = time.perf_counter()
    return GapsResult(stats, groups, sp, group_of, len(keys), embedded,
                      {"read": t1 - t0, "vectors": t2 - t1, "groups": t3 - t2})


def groups_table(groups: list[Group]) -> pa.Table:
    return pa.table({
        "group_id": [gr.gid for gr in groups], "name": [gr.name for gr in groups], "asks": [gr.asks for gr in groups],
        "queries": [len(gr.keys) for gr in groups], "lost": [gr.bands["lost"] for gr in groups],
        "unanswered": [gr.bands["unanswered"] for gr in groups],
        "weak": [gr.bands["weak"] for gr in groups], "mean_score": [gr.mean_score for gr in groups],
        "band": [gr.band for gr in groups], "examples": [gr.examples for gr in groups],
        "terms": [gr.terms for gr in groups], "pages": [[p["path"] for p in gr.pages] for gr in groups]},
        schema=GROUPS)
