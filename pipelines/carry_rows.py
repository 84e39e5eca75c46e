"""Stages: a caller's own Ray Data rows in and out of the search stages (`fanout.ray.search`).

`WrapRows` turns each row of the caller's Dataset into the INPUT_ROWS the search stages read (`raw`: the query
and agent fields as JSON, as a batch file's line) and keeps every column of the row, untouched, in one struct
column (`_carry`) that ParseQueries hands on and the later stages pass through. `UnwrapAnswers` turns the
answered rows back into the caller's columns plus the answer: `hits` (a list of pages: rank, path, title,
heading, snippet, score) and `error` / `error_field` (null unless the row was refused). One row in, one row
out: the caller's row count, order within a block and columns are kept, so `.filter()`, `.groupby()` and
joins on the caller's own keys work after the search as before it.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fanout.config.vocab import FIELD_KINDS
from fanout.schemas import CARRY, INPUT_ROWS, RESULT, RESULT_SECTIONS

# what a row may give, as a batch file's line may (qmd's `searches`, OHS's `queries` too)
ROW_FIELDS = ("query", "intent", *FIELD_KINDS, "searches", "queries", "filter")
_ROW_PREFIX = re.compile(r"^row -?\d+: ")
HIT = pa.struct([(f.name, f.type) for f in RESULT if not f.name.startswith("_")])
HIT_SECTIONS = pa.struct([(f.name, f.type) for f in RESULT_SECTIONS if not f.name.startswith("_")])  # --sections


class WrapRows:
    """Stage: a caller's rows -> INPUT_ROWS + `_carry` (the caller's columns)."""

    def __init__(self, columns: dict[str, str], id_column: str | None = None):
        self.columns = columns  # row field -> the caller's column holding it (query, agent fields, filter)
        self.id_column = id_column
        self.stats: dict[str, int] = {"rows": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        have = set(batch.column_names)
        cols = {f: batch.column(c).to_pylist() for f, c in self.columns.items() if c in have}
        raws = []
        for i in range(n):
            row = {f: v[i] for f, v in cols.items() if v[i] is not None}
            try:
                raws.append(json.dumps(row, ensure_ascii=False, default=str))
            except (ValueError, RecursionError) as e:  # a value JSON cannot hold: that row's error, not the batch's
                raws.append(json.dumps({"_unreadable": str(e)[:80]}))
        # row numbers unique across blocks and workers without coordination (a Dataset's rows have no global
        # position before execution); ids: the caller's, else one per row
        rows = [secrets.randbits(62) for _ in range(n)]
        ids: list[str | None] = ([None if v is None else str(v) for v in batch.column(self.id_column).to_pylist()]
               if self.id_column in have else [None] * n)
        ids = [v if v else f"row-{r:x}" for v, r in zip(ids, rows)]  # None or "": one of ours
        self.stats["rows"] += n
        out = pa.table({"_row": pa.array(rows, pa.int64()), "id": ids, "raw": raws,
                        "_error": pa.nulls(n, pa.string()), "_dup": pa.nulls(n, pa.int64())}, schema=INPUT_ROWS)
        carry = pa.StructArray.from_arrays([c.combine_chunks() for c in batch.columns], names=batch.column_names) \
            if batch.num_columns else pa.nulls(n, pa.struct([]))
        return out.append_column(CARRY, carry)


class UnwrapAnswers:
    """Stage: answered rows with `_carry` -> the caller's columns + `hits`, `error`, `error_field`."""

    def __init__(self, hits_column: str = "hits", error_column: str = "error"):
        self.hits_column, self.error_column = hits_column, error_column
        self.stats: dict[str, int] = {"rows": 0, "error_rows": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        carry = batch.column(CARRY).combine_chunks()
        cols: dict[str, Any] = {f.name: carry.field(i) for i, f in enumerate(carry.type)}
        results = batch.column("results").combine_chunks()
        flat = results.values  # what `offsets` index, whatever the array's own offset
        kind = HIT_SECTIONS if flat.type.get_field_index("sections") >= 0 else HIT
        hits = pa.ListArray.from_arrays(results.offsets, pa.StructArray.from_arrays(
            [flat.field(f.name) for f in kind.fields], fields=list(kind.fields)), mask=results.is_null())
        cols[self.hits_column] = hits
        cols[self.error_column] = self.errors(batch)
        cols[f"{self.error_column}_field"] = pc.if_else(pc.is_valid(batch.column("error")), batch.column("field"),
                                                        pa.scalar(None, pa.string()))
        self.stats["rows"] += batch.num_rows
        self.stats["error_rows"] += int(pc.sum(pc.is_valid(batch.column("error"))).as_py() or 0)
        return pa.table(cols)

    @staticmethod
    def errors(batch: pa.Table) -> pa.Array:
        """The rows' errors worded for the caller: `row N: ` (a batch file's line; here a number made per row
        that the caller never saw) becomes the row's id when the caller gave one, else is dropped."""
        errs = batch.column("error").to_pylist()
        if not any(errs):
            return batch.column("error")
        key = next((c for c in ("qid", "id") if c in batch.column_names), None)
        ids = batch.column(key).to_pylist() if key else [None] * len(errs)
        out = []
        for e, i in zip(errs, ids):
            if e is not None:
                e = _ROW_PREFIX.sub("", e, count=1)
                if i and not i.startswith("row-"):
                    e = f"id {i!r}: {e}"
            out.append(e)
        return pa.array(out, pa.string())
