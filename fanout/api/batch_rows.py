"""A batch's rows as the caller gave them (a file, a pa.Table, a pandas DataFrame, a list of dicts or of query
strings) -> the job's input file, and the caller's own columns joined back onto the answers (`Extra`):
what `KnowledgeBase.batch` and `expand` take in."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
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
    from fanout.pipelines.carry_rows import ROW_FIELDS

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
    else:
        rows = [{"query": r} if isinstance(r, str) else r for r in rows]  # a list of query strings
    renamed: list[Any] = []
    extra_rows: list[dict[str, Any] | None] = []
    for r in rows:
        if not isinstance(r, Mapping):
            renamed.append(r)  # the reader makes it that row's error row
            extra_rows.append(None)
            continue
        r = dict(r)
        job = {k: r[k] for k in ROW_FIELDS if k in r and k != "query"}
        if query_column in r:
            job["query"] = r[query_column]
        rid = r.get(id_column) if id_column is not None else r.get("id", r.get("qid"))
        if rid is not None:
            job["id"] = rid
        renamed.append(job)
        extra_rows.append({k: v for k, v in r.items() if k != query_column})
    extra = _extra(renamed, extra_rows) if keep_columns else None
    path = os.path.join(tmp, "input.jsonl")
    n = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for row in renamed:
            n += 1
            # a row that is not an object becomes that row's error row (the reader names it); values JSON has
            # no type for (dates, decimals) are written as their text
            try:
                line = json.dumps(row, ensure_ascii=False, default=str)
                line.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate (\ud800): escaped, so the reader names this row
                line = json.dumps(row, default=str)
            except (TypeError, ValueError, RecursionError) as e:
                line = json.dumps(f"row {n} cannot be read: {type(e).__name__}: {str(e)[:80]}")
            f.write(line + "\n")
    return path, n, extra


def _has_columns(names: list[str], query_column: str, id_column: str | None) -> None:
    if query_column not in names:
        raise UserError(f"`rows` has no column {query_column!r} (`query_column`); its columns: {names}. Name "
                        f"the column that holds the queries: query_column=...")
    if id_column is not None and id_column not in names:
        raise UserError(f"`rows` has no column {id_column!r} (`id_column`); its columns: {names}")


def _extra(job_rows: list[Any], extra_rows: list[dict[str, Any] | None]) -> Extra | None:
    """The caller's columns keyed by the id each row gets in the job (its `id`, else `row-N`), the first row
    of an id winning; None when the rows have no other columns."""
    from fanout.io.batch_io import row_id

    names: dict[str, None] = {}
    for e in extra_rows:
        if e:
            names.update(dict.fromkeys(e))
    if not names:
        return None
    clash = sorted(set(names) & set(ANSWER_COLUMNS))
    if clash:
        raise UserError(f"`rows` has column(s) {clash}, which the answers have too; rename them, or pass "
                        f"keep_columns=False to leave the caller's columns out of the answers")
    keys: dict[str, int] = {}
    for n, (job, e) in enumerate(zip(job_rows, extra_rows), 1):
        if e is not None:
            keys.setdefault(row_id(job, n), n - 1)
    return Extra(keys, extra_rows, list(names))


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
