"""A batch's rows as the caller gave them (a file, a pa.Table, a pandas DataFrame, a list of dicts or of query
strings) -> the job's input file, and the caller's own columns joined back onto the answers (`Extra`):
what `KnowledgeBase.batch` and `expand` take in.

Each in-memory row is parsed once, here, into a frozen `BatchRow` (`parse_batch_row`): the job's fields
(carry_rows.ROW_FIELDS, values as given: the row parser checks them, so a bad value is that row's error row
naming its field) and the caller's other columns. A row that cannot be a query row at all (not an object, a
value JSON cannot hold) is an error `BatchRow` naming the row and the fix; the reader makes it that row's
error row (`_error`, fanout/io/batch_input.py) and the batch's other rows still answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import pyarrow as pa

from fanout.api.types import as_path
from fanout.errors import UserError

Rows: TypeAlias = pa.Table | Iterable[Mapping[str, Any]] | str | os.PathLike | Any  # Any: a pandas DataFrame


def column_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise UserError(f"`{what}` must be a column name (non-empty text), got {value!r}")
    return value


# the answers' own columns: a caller's column of one of these names cannot come back beside them
ANSWER_COLUMNS = ("qid", "rank", "path", "title", "heading", "snippet", "score", "field", "error", "query", "index",
                  "sections", "results", "expansion", "variants")


def input_file(rows: Rows, tmp: str, query_column: str = "query", id_column: str | None = None,
                keep_columns: bool = True) -> tuple[str, int | None, Extra | None]:
    """`rows` as a path the batch reader takes (a file of the caller's, or one written to `tmp`), its row
    count when known without reading, and the caller's other columns to join back onto the answers (`Extra`,
    in-memory rows with `keep_columns` only)."""
    if isinstance(rows, str | os.PathLike):
        if query_column != "query" or id_column is not None:
            raise UserError("`query_column` / `id_column` apply to in-memory rows (a table, a DataFrame, a list); "
                            "a file's rows name their fields `query` and `id` (fanout batch's input format)")
        return as_path(rows, "rows"), None, None
    if type(rows).__name__ == "DataFrame" and hasattr(rows, "to_dict"):  # pandas, without importing it
        cols = rows.columns  # type: ignore[union-attr]  # a DataFrame (tested by name above)
        _has_columns([str(c) for c in cols], query_column, id_column)
        try:
            rows = pa.Table.from_pandas(rows, preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError, UnicodeError):  # a column of mixed types, a lone
            rows = rows.to_dict("records")  # surrogate: row by row below, so each bad row is its own error row
    if isinstance(rows, Mapping) or not isinstance(rows, Iterable | pa.Table):
        raise UserError(f"`rows` must be a pa.Table, a pandas DataFrame, a list of dicts or of query strings, or a "
                        f"file path/URI, got {type(rows).__name__}")
    if isinstance(rows, pa.Table):
        _has_columns(rows.column_names, query_column, id_column)
        rows = rows.to_pylist()
    parsed = [parse_batch_row(r, n, query_column, id_column) for n, r in enumerate(rows, 1)]
    extra = _extra(parsed) if keep_columns else None
    path = os.path.join(tmp, "input.jsonl")
    with Path(path).open("w", encoding="utf-8") as f:
        f.writelines(row.line() + "\n" for row in parsed)
    return path, len(parsed), extra


def _has_columns(names: list[str], query_column: str, id_column: str | None) -> None:
    if query_column not in names:
        raise UserError(f"`rows` has no column {query_column!r} (`query_column`); its columns: {names}. Name "
                        f"the column that holds the queries: query_column=...")
    if id_column is not None and id_column not in names:
        raise UserError(f"`rows` has no column {id_column!r} (`id_column`); its columns: {names}")


@dataclass(frozen=True)
class BatchRow:
    """One in-memory batch row, parsed at the edge: `fields` the job reads (query, its id, the agent fields,
    `searches`, `queries`, `filter`: values as given, the row parser checks them), `columns` the caller's other
    columns (joined back onto the answers), or `error` when the row cannot be a query row at all."""

    n: int  # 1-based position in the batch
    fields: tuple[tuple[str, Any], ...] = ()
    columns: tuple[tuple[str, Any], ...] | None = None  # None: not an object (nothing to join back)
    error: str | None = None

    def job(self) -> dict[str, Any]:
        """The row as the job's reader takes it (what a line of a batch file holds)."""
        return dict(self.fields)

    def line(self) -> str:
        """The row as one JSONL line. Values JSON has no type for (dates, decimals) are written as their text;
        a row JSON cannot hold (a lone surrogate is escaped and named by the reader) becomes an error line."""
        if self.error is not None:
            return json.dumps({"_error": self.error})
        row = self.job()
        try:
            line = json.dumps(row, ensure_ascii=False, default=str)
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (\ud800): escaped, so the reader names this row
            return json.dumps(row, default=str)
        except (TypeError, ValueError, RecursionError) as e:
            return json.dumps({"_error": f"row {self.n} cannot be read ({type(e).__name__}: {str(e)[:80]}); "
                                         "give its values as text, numbers, lists or objects of those"})
        return line


def parse_batch_row(row: object, n: int, query_column: str = "query", id_column: str | None = None) -> BatchRow:
    """The `n`-th in-memory row as a BatchRow: `query_column` becomes `query`, `id_column` (else `id`, else
    `qid`) the row's id, the other ROW_FIELDS are taken as given and every column but the query's is kept for
    the answers; a row that is not an object is an error BatchRow saying so."""
    from fanout.pipelines.carry_rows import ROW_FIELDS

    if isinstance(row, str):  # a list of query strings
        row = {"query": row}
    if not isinstance(row, Mapping):
        shown = json.dumps(row, ensure_ascii=False, default=str)[:80]
        return BatchRow(n, error=f"row {n} is not an object: {shown}; give each row as an object with a "
                                 f"{query_column!r} field (or the query itself as a string)")
    r = dict(row)
    job = {k: r[k] for k in ROW_FIELDS if k in r and k != "query"}
    if query_column in r:
        job["query"] = r[query_column]
    rid = r.get(id_column) if id_column is not None else r.get("id", r.get("qid"))
    if rid is not None:
        job["id"] = rid
    return BatchRow(n, tuple(job.items()), tuple((k, v) for k, v in r.items() if k != query_column))


def _extra(rows: list[BatchRow]) -> Extra | None:
    """The caller's columns keyed by the id each row gets in the job (its `id`, else `row-N`), the first row
    of an id winning; None when the rows have no other columns."""
    from fanout.io.batch_input import row_id

    names: dict[str, None] = {}
    for r in rows:
        if r.columns:
            names.update(dict.fromkeys(k for k, _ in r.columns))
    if not names:
        return None
    clash = sorted(set(names) & set(ANSWER_COLUMNS))
    if clash:
        raise UserError(f"`rows` has column(s) {clash}, which the answers have too; rename them, or pass "
                        f"keep_columns=False to leave the caller's columns out of the answers")
    keys: dict[str, int] = {}
    for r in rows:
        if r.columns is not None:
            keys.setdefault(row_id(r.job(), r.n), r.n - 1)
    return Extra(keys, [None if r.columns is None else dict(r.columns) for r in rows], list(names))


class Extra:
    """A batch's caller columns, joined onto its answers by `qid` (`BatchResult.to_arrow`)."""

    def __init__(self, keys: dict[str, int], rows: list[dict[str, Any] | None], names: list[str]):
        self.keys, self.rows, self.names = keys, rows, names
        self.joined = False  # set by `join`: a BatchResult's table is joined once

    def join(self, answers: pa.Table) -> pa.Table:
        key = "qid" if "qid" in answers.column_names else "id"  # JSONL output: a row per query, its `id`
        at = [self.keys.get(q) for q in answers.column(key).to_pylist()]
        for name in self.names:
            if name in answers.column_names:  # the caller's `id` beside JSONL's: the same value
                continue
            vals = [None if i is None else (self.rows[i] or {}).get(name) for i in at]
            try:
                col = pa.array(vals)
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # values of mixed types: as text
                col = pa.array([None if v is None else str(v) for v in vals], pa.string())
            answers = answers.append_column(name, col)
        self.joined = True
        return answers
