"""Stage: BM25 probe on the original query; skip expansion when the top page is clearly ahead.

qmd's rule on normalised scores x/(1+x): top >= min_top and top - second >= min_gap. Unlike qmd, the probe
also runs when an `intent` is given (qmd disables it then, so for agents it never fires). The probe's lists
are the original query's full-text lists, reused by retrieval (no second search).
"""

from __future__ import annotations

import bisect
import difflib
import json

import pyarrow as pa
from fanout.pipelines.lanes import fts_page_lists, index_languages

from fanout.config import Config
from fanout.config.vocab import LANG_NAMES
from fanout.filters import needs_columns, where_sql
from fanout.schemas import PAGE, PROBE_SEEN, WHERE, set_column
from fanout.store.db import Collection, tag_batch


def normalise(score: float) -> float:
    return abs(score) / (1.0 + abs(score))


def strong_signal(pages: list[dict], min_top: float, min_gap: float) -> bool:
    """True when the first page's normalised BM25 score is high and clearly ahead of the second."""
    if not pages:
        return False
    top = normalise(pages[0]["_score"])
    second = normalise(pages[1]["_score"]) if len(pages) > 1 else 0.0
    return top >= min_top and top - second >= min_gap


def filter_where(col: Collection, filters: list[dict[str, list[str]]]) -> tuple[str | None, str | None, str | None]:
    """(where, error field, error) for one query's filters, checked against this index."""
    def columns() -> set[str]:
        with col.guard(col.chunks_name):
            return set(col.dataset(col.chunks_name).schema.names)

    names = col.memo("chunk_columns", columns)  # once per index version, not per filtered row
    for c in needs_columns(filters):
        if c not in names:
            kind = "tag" if c == "tags" else "property"
            return None, f"filter.{kind}", (
                f"index {col.name!r} was built before {kind} filters existed (no `{c}` column); update it with "
                f"`fanout index VAULT --db {col.db_dir} -c {col.name}` (vectors are reused), or drop the "
                f"{kind} filter")
    langs = index_languages(col)
    for f in filters:
        bad = [v for v in f.get("lang", []) if v not in langs]
        if bad:  # name the known codes only: other `lang` values are free text from front matter
            known = [x for x in langs if x in LANG_NAMES]
            more = f" and {len(langs) - len(known)} other values" if len(known) < len(langs) else ""
            return None, "filter.lang", (f"`filter.lang` {bad[0][:40]!r}: no note of that language; the index "
                                         f"has {known}{more}")
    named = col.memo("filter_values", lambda: _filter_values(col))
    for f in filters:  # values of a kind are alternatives: it names nothing when none of them does
        for kind in ("folder", "path", "tag"):
            vals = f.get(kind, [])
            if vals and not any(_names_something(kind, v, named) for v in vals):
                return None, f"filter.{kind}", _names_nothing(kind, vals[0], named, len(vals))
    return where_sql(filters), None, None


def _filter_values(col: Collection) -> dict[str, list[str] | None]:
    """What a folder, path or tag filter can name in this index version: the notes' paths (sorted), their
    folders and their tags (nested tags with their parents, as indexed)."""
    with col.guard(col.documents_name):
        names = set(col.dataset(col.documents_name).schema.names)
        t = col.read(col.documents_name, ["path"] + (["tags"] if "tags" in names else []))
    paths = sorted(t["path"].to_pylist())
    folders = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
    tags = {x for v in t["tags"].to_pylist() for x in (v or [])} if "tags" in t.column_names else None
    return {"path": paths, "folder": sorted(folders), "tag": None if tags is None else sorted(tags)}


def _names_something(kind: str, value: str, named: dict[str, list[str] | None]) -> bool:
    have = named[kind]
    if have is None:  # an index without the column: needs_columns said so already
        return True
    if kind == "path":  # a prefix of some path
        at = bisect.bisect_left(have, value)
        return at < len(have) and have[at].startswith(value)
    at = bisect.bisect_left(have, value)
    return at < len(have) and have[at] == value


def _names_nothing(kind: str, value: str, named: dict[str, list[str] | None], n: int = 1) -> str:
    """The row's error for a folder, path or tag that no indexed note has (`n` values, none naming a note),
    with the names closest to the first."""
    have = named[kind] or []
    if kind == "path":
        pool = (named["folder"] or []) + (named["path"] or [])
    else:
        pool = have
    last = value.rstrip("/").rsplit("/", 1)[-1].casefold()
    close = [x for x in pool if x.rsplit("/", 1)[-1].casefold() == last][:3] or \
        difflib.get_close_matches(value, pool, n=3, cutoff=0.6)
    what = {"folder": "no indexed note is in folder", "path": "no indexed note's path starts with",
            "tag": "no indexed note has tag"}[kind]
    hint = f"; did you mean {' or '.join(repr(x) for x in close)}?" if close else \
        f"; the index has {len(have)} {kind}s" + (f", e.g. {have[:3]}" if have else "")
    more = f" (nor any of the other {n - 1} values)" if n > 1 else ""
    return (f"`filter.{kind}` {value[:60]!r}: {what} {value[:60]!r}{more}{hint} (folders and paths are relative "
            f"to the vault)")


class ProbeBM25:
    """Stage: + `_probe` (the original query's BM25 page list, reused by Retrieve) and `skip_expansion`."""

    def __init__(self, cfg: Config, db: str, collection: str):
        self.cfg = cfg
        self.col = Collection(db, collection, cfg)
        self.stats: dict[str, int] = {"queries": 0, "skip_expansion": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        batch = tag_batch(self.col, batch)  # one consistent index version for this batch's every stage
        batch = self.check_filters(batch)
        ok = [i for i, e in enumerate(batch.column("error").to_pylist()) if e is None]
        texts = batch.column("query").to_pylist()
        wheres = batch.column(WHERE).to_pylist()
        lists = fts_page_lists(self.col, [texts[i] for i in ok], self.cfg, [wheres[i] for i in ok]) if ok else []
        probe: list[list[dict] | None] = [None] * batch.num_rows
        skip = [False] * batch.num_rows
        seen: list[dict | None] = [None] * batch.num_rows
        for i, pages in zip(ok, lists):
            probe[i] = pages
            skip[i] = self.cfg.probe.enabled and strong_signal(pages, self.cfg.probe.min_top, self.cfg.probe.min_gap)
            top = normalise(pages[0]["_score"]) if pages else 0.0
            seen[i] = {"top": round(top, 4), "gap": round(top - (normalise(pages[1]["_score"]) if len(pages) > 1
                                                                 else 0.0), 4)}
        self.stats["queries"] += len(ok)
        self.stats["skip_expansion"] += sum(skip)
        batch = batch.append_column("_probe", pa.array(probe, pa.list_(PAGE)))
        batch = set_column(batch, PROBE_SEEN, pa.array(seen, pa.struct([("top", pa.float64()), ("gap", pa.float64())])))
        return batch.append_column("skip_expansion", pa.array(skip, pa.bool_()))

    def check_filters(self, batch: pa.Table) -> pa.Table:
        """+ `_where` per query; a filter this index cannot answer makes that row an error row (the rest go on)."""
        n = batch.num_rows
        raw = batch.column("filter").to_pylist() if "filter" in batch.column_names else [None] * n
        errors, fields = batch.column("error").to_pylist(), batch.column("field").to_pylist()
        pos = batch.column("_row").to_pylist() if "_row" in batch.column_names else list(range(1, n + 1))
        wheres: list[str | None] = [None] * n
        bad = 0
        for i, f in enumerate(raw):
            if f is None or errors[i] is not None:
                continue
            wheres[i], field, err = filter_where(self.col, json.loads(f))
            if err is not None:
                errors[i], fields[i] = f"row {pos[i]}: {err}", field
                bad += 1
        if bad:
            self.stats["dropped_bad_filter"] = self.stats.get("dropped_bad_filter", 0) + bad
            batch = set_column(batch, "error", pa.array(errors, pa.string()))
            batch = set_column(batch, "field", pa.array(fields, pa.string()))
        return set_column(batch, WHERE, pa.array(wheres, pa.string()))
