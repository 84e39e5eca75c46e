"""Stage: turn caller rows into QUERIES, with an ERRORS row (id, field, fix) for every bad row.

Accepted variant forms (all may be combined): the seed's agent fields `short_query` (-> lex),
`rephrased_query` (-> vec), `expected_answer` (-> hyde) and `intent`; qmd's `searches: [{type, query}]`;
OHS's `queries: [...]` (plain rephrasings, each searched like the original: lex and vec).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Literal, overload

import pyarrow as pa

from fanout.config.vocab import FIELD_KINDS, MAX_SEARCHES, SEARCH_TYPES
from fanout.errors import FilterError, RowError
from fanout.filters import combine, parse_filter
from fanout.schemas import CARRY, ERRORS, QUERIES, VARIANT
from fanout.text import nfc

if TYPE_CHECKING:
    from fanout.config import Config

MAX_CHARS = 2000  # longer text is a mistake (a whole document pasted as a query)


@overload
def _text(row: dict[str, Any], field: str, required: Literal[True]) -> str: ...
@overload
def _text(row: dict[str, Any], field: str, required: bool = False) -> str | None: ...


def _text(row: dict[str, Any], field: str, required: bool = False) -> str | None:
    v = row.get(field)
    if v is None or (isinstance(v, float) and math.isnan(v)):  # None or NaN (CSV/parquet nulls)
        if required:
            raise RowError(field, f"`{field}` is missing; give the question as a non-empty string")
        return None
    if not isinstance(v, str):
        raise RowError(field, f"`{field}` must be a string, got {type(v).__name__} {str(v)[:40]!r}")
    v = nfc(" ".join(v.split()))  # one normal form, as the index holds (fanout/text.py)
    if required and not v:
        raise RowError(field, f"`{field}` is empty; give the question as a non-empty string")
    if len(v) > MAX_CHARS:
        raise RowError(field, f"`{field}` has {len(v)} characters, over {MAX_CHARS}; shorten it")
    return v or None


def _searches(value: object) -> list[tuple[str, str]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise RowError("searches", "`searches` is not valid JSON; give a list of {type, query}") from None
    if not isinstance(value, list):
        raise RowError("searches", f"`searches` must be a list of {{type, query}}, got {type(value).__name__}")
    if len(value) > MAX_SEARCHES:
        raise RowError("searches", f"`searches` has {len(value)} entries, at most {MAX_SEARCHES} are allowed")
    out = []
    for i, s in enumerate(value):
        if not isinstance(s, dict):
            raise RowError(f"searches[{i}]", "each search must be an object {type, query}")
        kind = s.get("type")
        if kind not in SEARCH_TYPES:
            raise RowError(f"searches[{i}].type", f"unknown variant type {kind!r}; use one of {list(SEARCH_TYPES)}")
        text = _text(s, "query")
        if not text:
            raise RowError(f"searches[{i}].query", "search query is empty; give a non-empty string")
        out.append((kind, text))
    return out


def parse_row(row: dict[str, Any]) -> dict[str, Any]:
    """One input row -> one QUERIES row; raises RowError naming the field."""
    query = _text(row, "query", required=True)
    variants: list[tuple[str, str]] = []
    for field, kind in FIELD_KINDS.items():
        if (t := _text(row, field)) is not None:
            variants.append((kind, t))
    if row.get("searches") is not None:
        variants.extend(_searches(row["searches"]))
    if (qs := row.get("queries")) is not None:
        if isinstance(qs, str):
            qs = [qs]
        if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs):
            raise RowError("queries", "`queries` must be a list of strings (rephrasings of the question)")
        for q in qs:
            if q.strip():
                variants += [("lex", nfc(" ".join(q.split()))), ("vec", nfc(" ".join(q.split())))]
    seen: set[tuple[str, str]] = set()
    uniq = []
    for kind, text in variants:
        key = (kind, text.casefold())
        if key not in seen and text.casefold() != query.casefold():
            seen.add(key)
            uniq.append({"kind": kind, "text": text})
    try:
        filt = parse_filter(row.get("filter"))
    except FilterError as e:
        raise RowError(e.field, str(e)) from None
    return {"query": query, "intent": _text(row, "intent"), "variants": uniq, "filter": filt}


def parse_queries(rows: list[dict[str, Any]] | pa.Table) -> tuple[pa.Table, pa.Table]:
    """Rows -> (QUERIES, ERRORS). A row without `id` gets `row-<n>` (1-based line number)."""
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    good, bad = [], []
    seen_ids: set[str] = set()
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            bad.append({"qid": f"row-{n}", "field": "", "error": f"row {n} is not an object: {str(row)[:80]}"})
            continue
        rid = row.get("id", row.get("qid"))
        qid = str(rid) if rid is not None and str(rid) != "" else f"row-{n}"
        if qid in seen_ids:
            bad.append({"qid": qid, "field": "id", "error": f"duplicate id {qid!r} (row {n}); ids must be unique"})
            continue
        seen_ids.add(qid)
        if "_error" in row:  # a line the reader could not parse
            bad.append({"qid": qid, "field": row.get("_field", ""), "error": row["_error"]})
            continue
        try:
            good.append({"qid": qid, **parse_row(row)})
        except RowError as e:
            bad.append({"qid": qid, "field": e.field, "error": f"row {n}: {e}"})
    return pa.Table.from_pylist(good, schema=QUERIES), pa.Table.from_pylist(bad, schema=ERRORS)


PARSED = pa.schema([("_row", pa.int64()), ("qid", pa.string()), ("query", pa.string()), ("intent", pa.string()),
                    ("variants", pa.list_(VARIANT)), ("error", pa.string()), ("field", pa.string()),
                    ("filter", pa.string())])  # JSON list of filters that all apply (fanout/filters.py), or null


class ParseQueries:
    """Stage: INPUT_ROWS (`_row`, `id`, `raw` JSON, `_error`, `_dup`) -> one parsed row per query.

    A bad row keeps its place with `error` and `field` set (later stages pass it through untouched). An id
    seen earlier in the same table, or marked `_dup` by the job's whole-input pass, is an error row.
    """

    def __init__(self, cfg: Config | None = None, filter: tuple[tuple[str, tuple[str, ...]], ...] = ()):
        del cfg
        self.job_filter = parse_filter({k: list(v) for k, v in filter}) if filter else {}  # every row's
        self.stats: dict[str, int] = {"rows": 0, "parsed": 0, "dropped_bad_row": 0, "dropped_duplicate_id": 0,
                                      "filtered": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        cols = set(batch.column_names)
        n = batch.num_rows
        rows = batch.column("_row").to_pylist()
        ids = batch.column("id").to_pylist()
        raws = batch.column("raw").to_pylist()
        errs = batch.column("_error").to_pylist() if "_error" in cols else [None] * n
        dups = batch.column("_dup").to_pylist() if "_dup" in cols else [None] * n
        out = []
        seen: dict[str, int] = {}
        for pos, qid, raw, err, dup in zip(rows, ids, raws, errs, dups):
            rec = {"_row": pos, "qid": qid, "query": None, "intent": None, "variants": [],
                   "error": None, "field": None, "filter": None}
            first = dup if dup is not None else seen.get(qid)
            if first is not None and first != pos:
                rec.update(error=f"duplicate id {qid!r} (row {pos}; first on row {first}); ids must be unique",
                           field="id")
                self.stats["dropped_duplicate_id"] += 1
                out.append(rec)
                continue
            seen.setdefault(qid, pos)
            try:
                if err is not None:
                    raise RowError("", err)
                row = json.loads(raw)
                if not isinstance(row, dict):
                    raise RowError("", f"row {pos} is not an object: {str(raw)[:80]}")
                p = parse_row(row)
                rec.update(query=p["query"], intent=p["intent"],
                           variants=[{"vid": None, "kind": v["kind"], "text": v["text"], "source": "agent"}
                                     for v in p["variants"]])
                if filters := combine(self.job_filter, p["filter"]):
                    rec["filter"] = json.dumps(filters, ensure_ascii=False)
                    self.stats["filtered"] += 1
                self.stats["parsed"] += 1
            except RowError as e:
                msg = str(e)
                rec.update(error=msg if err is not None or msg.startswith("row ") else f"row {pos}: {msg}",
                           field=e.field)
                self.stats["dropped_bad_row"] += 1
            out.append(rec)
        self.stats["rows"] += n
        parsed = pa.Table.from_pylist(out, schema=PARSED)
        if CARRY in cols:  # a Ray Data caller's own columns (pipelines/carry_rows.py), row for row
            parsed = parsed.append_column(CARRY, batch.column(CARRY))
        return parsed
