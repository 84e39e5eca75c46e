"""Batch input: query rows in (JSONL, JSON, parquet, CSV); fanout/io/batch_output.py writes the results out.

Paths may be local or any object-store URI `fanout.store.storage` takes (`s3://bucket/q.jsonl`, `gs://`, `az://`,
`file://`), through `filesystem()`: endpoint, region and credentials come from the config's `storage:` section
(pass `cfg.storage`) or the usual environment variables, and are never logged.

Input is read as a stream of INPUT_ROWS tables (`_row` position, `id`, the row as JSON `raw`, `_error`):
a JSONL line that does not parse (malformed, nested too deep for the parser, a lone surrogate escape such as
`\\ud800` that is no text), or a CSV line with the wrong number of fields, becomes an error row naming its
line; the other rows are answered. Every CSV field is text (CSV has no types). JSONL and parquet carry
types, and read the same: an `id` that is a number is its text, a number in a query field (`query`,
`short_query`, ...) is an error row naming the field (JSON `{"query": 2024}` and a parquet integer
column alike). Rows without an id get `row-<n>` (n = 1-based position among the input's rows, stable across
resumes). A JSONL line that is exactly `{"_error": "..."}` is an error row with that message: how the API's
edge (fanout/api/batch_rows.py) hands on an in-memory row it refused, as `rows_table` takes `_error`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fanout.errors import InputMissing, UserError
from fanout.schemas import INPUT_ROWS
from fanout.store import storage

if TYPE_CHECKING:
    from fanout.config import StorageConfig

FORMATS = (".jsonl", ".json", ".parquet", ".csv")
ID_FIELDS = ("id", "qid")  # a number here is the id's text, in every format
CHUNK_ROWS = 4096  # input rows per staged table


def filesystem(uri: str | Path, storage_cfg: StorageConfig | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) for a local path or a URI (fanout.store.storage: config's `storage:` or environment)."""
    return storage.filesystem(uri, storage_cfg)


def file_ext(path: str | Path, allowed: tuple[str, ...] = FORMATS, what: str = "input") -> str:
    name = str(path).rsplit("/", 1)[-1]
    ext = ("." + name.rsplit(".", 1)[-1].lower()) if "." in name else ""
    if ext not in allowed:
        raise UserError(f"{str(path)!r}: unknown {what} file type {ext or '(none)'!r}; use one of {list(allowed)}")
    return ext


def row_id(row: object, n: int) -> str:
    rid = row.get("id", row.get("qid")) if isinstance(row, dict) else None
    if isinstance(rid, float) and math.isnan(rid):
        rid = None
    return str(rid) if rid is not None and str(rid) != "" else f"row-{n}"


def _raw(row: object) -> str:
    return json.dumps(row, ensure_ascii=False, default=str)


def rows_table(rows: list[dict] | pa.Table, start: int = 1) -> pa.Table:
    """In-memory rows (list of dicts or a table) -> INPUT_ROWS, positions from `start`."""
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    out: dict[str, list[Any]] = {"_row": [], "id": [], "raw": [], "_error": [], "_dup": []}
    for n, r in enumerate(rows, start):
        err = r.get("_error") if isinstance(r, dict) else None
        out["_row"].append(n)
        out["id"].append(row_id(r, n))
        out["raw"].append(None if err else _raw(r))
        out["_error"].append(err)
        out["_dup"].append(None)
    return pa.table(out, schema=INPUT_ROWS)


class _Rows:
    """Accumulates input rows into INPUT_ROWS tables of CHUNK_ROWS."""

    def __init__(self) -> None:
        self.n = 0
        self.cols: dict[str, list] = {"_row": [], "id": [], "raw": [], "_error": [], "_dup": []}

    def add(self, rid: str | None, raw: str | None, error: str | None = None) -> None:
        self.n += 1
        self.cols["_row"].append(self.n)
        self.cols["id"].append(rid if rid else f"row-{self.n}")
        self.cols["raw"].append(raw)
        self.cols["_error"].append(error)
        self.cols["_dup"].append(None)

    def full(self) -> bool:
        return len(self.cols["_row"]) >= CHUNK_ROWS

    def take(self) -> pa.Table:
        t = pa.table(self.cols, schema=INPUT_ROWS)
        self.cols = {k: [] for k in self.cols}
        return t


def read_input(uri: str | Path, storage_cfg: StorageConfig | None = None) -> Iterator[pa.Table]:
    """Stream the query file as INPUT_ROWS tables (memory bounded by CHUNK_ROWS, except a `.json` array)."""
    ext = file_ext(uri)
    fs, path = filesystem(uri, storage_cfg)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise InputMissing(f"query file {str(uri)!r} not found; give the path of an existing .jsonl, .json, "
                           f".parquet or .csv file")
    if info.type != pafs.FileType.File:
        raise UserError(f"query file {str(uri)!r} is not a file; give a .jsonl, .json, .parquet or .csv file")
    acc = _Rows()
    if ext == ".parquet":
        yield from _read_parquet(fs, path, acc)
    else:
        with fs.open_input_stream(path) as raw_stream:
            text = io.TextIOWrapper(raw_stream, encoding="utf-8", errors="replace", newline="")
            if ext == ".csv":
                yield from _read_csv(text, acc)
            else:
                yield from _read_json(text, acc, ext)
    if acc.cols["_row"]:
        yield acc.take()


def _read_json(text: io.TextIOBase, acc: _Rows, ext: str) -> Iterator[pa.Table]:
    first = ""
    if ext == ".json":
        first = text.read(1)
        while first and first.isspace():
            first = text.read(1)
        if first == "[":
            try:
                rows = json.loads("[" + text.read())
            except (ValueError, RecursionError) as e:
                why = e if isinstance(e, ValueError) else "nested deeper than the JSON reader goes"
                raise UserError(f"JSON array input does not parse ({why}); fix it or use JSONL (one row per "
                                 f"line: a bad line is one error row)") from None
            for n, r in enumerate(rows, 1):
                if (bad := _not_text(r)) is not None:
                    acc.add(f"row-{acc.n + 1}", None, f"row {n} of the array {bad}")
                else:
                    acc.add(row_id(r, acc.n + 1) if isinstance(r, dict) else None, _raw(r))
                if acc.full():
                    yield acc.take()
            return
    for lineno, line in enumerate(_lines(first, text), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:  # the only ValueError json.loads raises on text
            acc.add(f"line-{lineno}", None, f"line {lineno} is not valid JSON ({e.msg} at column {e.colno}); "
                                            f"fix the line")
        except RecursionError:  # thousands of nested [ or {: Python's JSON reader recurses per level
            acc.add(f"line-{lineno}", None, f"line {lineno} is nested deeper than the JSON reader goes (a row "
                                            f"is an object of strings); fix the line")
        else:
            bad = _not_text(row) if "\\u" in line else None  # a lone surrogate can only come as an escape
            if bad is not None:
                rid = row_id(row, acc.n + 1) if isinstance(row, dict) else None
                rid = rid if _not_text(rid) is None else None
                acc.add(rid or f"line-{lineno}", None, f"line {lineno} {bad}")
            elif isinstance(row, dict) and len(row) == 1 and isinstance(row.get("_error"), str):
                acc.add(None, None, row["_error"][:500])  # a row the API's edge refused (fanout/api/batch_rows.py)
            else:
                acc.add(row_id(row, acc.n + 1) if isinstance(row, dict) else None, line.strip())
        if acc.full():
            yield acc.take()


def _not_text(value: object) -> str | None:
    """Why `value` (a parsed row) holds something that is not Unicode text, or None: a lone surrogate escape
    (`\\ud800` without its pair) parses but can never be written as UTF-8 (the whole batch would stop there)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"holds a lone surrogate escape (\\u{ord(e.object[e.start]):04x}, half of a UTF-16 pair): it is "
                f"not text; write the character itself or its full pair")
    except (ValueError, RecursionError, TypeError):
        return "holds a value that is not JSON text"
    return None


def _lines(first: str, text: io.TextIOBase) -> Iterator[str]:
    it = iter(text.readline, "")
    head = next(it, None)
    if head is None:
        if first:
            yield first
        return
    yield first + head
    yield from it


def _read_csv(text: io.TextIOBase, acc: _Rows) -> Iterator[pa.Table]:
    reader = csv.reader(text)
    header = next(reader, None)
    if not header:
        return
    header = [h.strip() for h in header]
    for rec in reader:
        lineno = reader.line_num
        if not rec or (len(rec) == 1 and not rec[0].strip()):
            continue
        if len(rec) != len(header):
            acc.add(f"line-{lineno}", None, f"line {lineno} has {len(rec)} fields, the header has {len(header)}; "
                                            f"quote fields that contain commas, or fix the line")
        else:
            row = {k: (v if v != "" else None) for k, v in zip(header, rec)}  # every CSV field is text
            acc.add(row_id(row, acc.n + 1), _raw(row))
        if acc.full():
            yield acc.take()


def _read_parquet(fs: pafs.FileSystem, path: str, acc: _Rows) -> Iterator[pa.Table]:
    with fs.open_input_file(path) as f:
        pf = pq.ParquetFile(f)
        for batch in pf.iter_batches(batch_size=CHUNK_ROWS):
            t = pa.Table.from_batches([batch])
            for name in ID_FIELDS:  # a number is the id's text (as row_id makes of a JSON number); a number
                # in a query field stays a number: an error row naming the field, as in JSONL
                if name in t.column_names and (pa.types.is_integer(t.schema.field(name).type)
                                               or pa.types.is_floating(t.schema.field(name).type)
                                               or pa.types.is_boolean(t.schema.field(name).type)):
                    t = t.set_column(t.schema.get_field_index(name), name, t.column(name).cast(pa.string()))
            for row in t.to_pylist():
                acc.add(row_id(row, acc.n + 1), _raw(row))
                if acc.full():
                    yield acc.take()
