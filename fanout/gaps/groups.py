"""`fanout gaps`, second half: flagged query texts -> groups (clustering), each named by its central queries
and tf-idf terms, with its closest pages and the terms their headings lack (fanout/gaps/analysis.py reads
and bands the answers and calls these)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from fanout.config import Config, GapsConfig
from fanout.gaps.read import BANDS
from fanout.text import stem_key, terms


@dataclass
class Text:
    """One query text's flagged asks (fanout/gaps/analysis.py add_query): what the groups cluster."""

    text: str  # the first spelling seen
    asks: int = 0
    score: float = 0.0  # best score over its asks
    bands: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BANDS, 0))
    pages: dict[str, tuple[str, float, int]] = field(default_factory=dict)  # path -> (title, best, asks)


GROUPS = pa.schema([("group_id", pa.int32()), ("name", pa.string()), ("asks", pa.int64()),
                    ("queries", pa.int64()), ("lost", pa.int64()), ("unanswered", pa.int64()), ("weak", pa.int64()),
                    ("mean_score", pa.float64()), ("band", pa.string()), ("examples", pa.list_(pa.string())),
                    ("terms", pa.list_(pa.string())), ("pages", pa.list_(pa.string()))])


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


def groups_table(groups: list[Group]) -> pa.Table:
    return pa.table({
        "group_id": [gr.gid for gr in groups], "name": [gr.name for gr in groups], "asks": [gr.asks for gr in groups],
        "queries": [len(gr.keys) for gr in groups], "lost": [gr.bands["lost"] for gr in groups],
        "unanswered": [gr.bands["unanswered"] for gr in groups],
        "weak": [gr.bands["weak"] for gr in groups], "mean_score": [gr.mean_score for gr in groups],
        "band": [gr.band for gr in groups], "examples": [gr.examples for gr in groups],
        "terms": [gr.terms for gr in groups], "pages": [[p["path"] for p in gr.pages] for gr in groups]},
        schema=GROUPS)
