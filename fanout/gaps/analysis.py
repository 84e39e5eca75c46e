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
from fanout.gaps.groups import Group, Text, cluster, make_groups, mark_lacking, page_headings
from fanout.gaps.previous import lost_pages
from fanout.gaps.read import READ_ROWS, ReadStats, read_answers, text_key

if TYPE_CHECKING:
    from fanout.exec.runner import Runner

log = logging.getLogger(__name__)

FLAGGED = pa.schema([("qid", pa.string()), ("query", pa.string()), ("group_id", pa.int32()),
                     ("band", pa.string()), ("score", pa.float64())])

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
