"""Batch input and output: query rows in (JSONL, JSON, parquet, CSV), results out (parquet, JSONL, CSV).

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
resumes). Output is validated before any work (`check_out`) and written by streaming (`write_results`); CSV
output cells a spreadsheet would run as a formula start with `'` (fanout/safe_text.py, `csv_safe`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fanout.safe_text import CSV_CELL_RE
from fanout.schemas import ANSWERS, INPUT_ROWS, SECTION
from fanout.store import storage

if TYPE_CHECKING:
    from fanout.config import StorageConfig

FLAT = pa.schema([
    ("qid", pa.string()), ("rank", pa.int32()), ("path", pa.string()), ("title", pa.string()),
    ("heading", pa.string()), ("snippet", pa.string()), ("score", pa.float64()),
    ("field", pa.string()), ("error", pa.string()),
    ("query", pa.string()),  # the query text (null when the row did not parse)
    ("index", pa.string()),  # which index answered: `<collection>@<stamp>` (fanout.store.db.index_stamp)
])
# --sections N: one more column, each page's best sections as a list (parquet) or that list as JSON text (CSV);
# in JSONL each result gains `sections` (docs/api.md#sections says why a list and not one row per section)
FLAT_SECTIONS = FLAT.append(pa.field("sections", pa.list_(SECTION)))
FORMATS = (".jsonl", ".json", ".parquet", ".csv")
OUT_FORMATS = (".jsonl", ".parquet", ".csv")
ID_FIELDS = ("id", "qid")  # a number here is the id's text, in every format
CHUNK_ROWS = 4096  # input rows per staged table


def filesystem(uri: str | Path, storage_cfg: StorageConfig | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) for a local path or a URI (fanout.store.storage: config's `storage:` or environment)."""
    return storage.filesystem(uri, storage_cfg)


def _ext(path: str | Path, allowed: tuple[str, ...] = FORMATS, what: str = "input") -> str:
    name = str(path).rsplit("/", 1)[-1]
    ext = ("." + name.rsplit(".", 1)[-1].lower()) if "." in name else ""
    if ext not in allowed:
        raise ValueError(f"{str(path)!r}: unknown {what} file type {ext or '(none)'!r}; use one of {list(allowed)}")
    return ext


def row_id(row: Any, n: int) -> str:
    rid = row.get("id", row.get("qid")) if isinstance(row, dict) else None
    if isinstance(rid, float) and math.isnan(rid):
        rid = None
    return str(rid) if rid is not None and str(rid) != "" else f"row-{n}"


def _raw(row: Any) -> str:
    return json.dumps(row, ensure_ascii=False, default=str)


def rows_table(rows: list[dict] | pa.Table, start: int = 1) -> pa.Table:
    """In-memory rows (list of dicts or a table) -> INPUT_ROWS, positions from `start`."""
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    out = {"_row": [], "id": [], "raw": [], "_error": [], "_dup": []}
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
    ext = _ext(uri)
    fs, path = filesystem(uri, storage_cfg)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"query file {str(uri)!r} not found")
    if info.type != pafs.FileType.File:
        raise ValueError(f"query file {str(uri)!r} is not a file; give a .jsonl, .json, .parquet or .csv file")
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
                raise ValueError(f"JSON array input does not parse ({why}); fix it or use JSONL (one row per "
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
        except ValueError as e:
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
            else:
                acc.add(row_id(row, acc.n + 1) if isinstance(row, dict) else None, line.strip())
        if acc.full():
            yield acc.take()


def _not_text(value: Any) -> str | None:
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


def check_out(out: str | Path, inp: str | Path | None = None, storage_cfg: StorageConfig | None = None) -> str:
    """Validate the output path before any work: a known extension, not a folder, not the input file, and
    a parent folder that exists (or can be made) and is writable; on an object store, a bucket that exists.
    Returns the extension."""
    ext = _ext(out, OUT_FORMATS, "output")
    fs, path = filesystem(out, storage_cfg)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.Directory:
        raise ValueError(f"--out {str(out)!r} is a folder; give a file path ending in one of {list(OUT_FORMATS)}")
    if inp is not None:
        ifs, ipath = filesystem(inp, storage_cfg)
        same = type(ifs) is type(fs) and ipath == path
        if not same and isinstance(fs, pafs.LocalFileSystem):
            with contextlib.suppress(OSError):
                same = os.path.samefile(ipath, path)
        if same:
            raise ValueError(f"--out {str(out)!r} is the input file; write the results to another file")
    if isinstance(fs, pafs.LocalFileSystem):
        parent = Path(path).parent
        probe = parent
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise ValueError(f"--out {str(out)!r}: folder {str(probe)!r} is not writable; choose another place")
    else:
        bucket = path.split("/", 1)[0]
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise ValueError(f"--out {str(out)!r}: bucket {bucket!r} does not exist (or these credentials cannot "
                             f"see it); create it or write somewhere else")
    return ext


def csv_safe(batch: pa.RecordBatch) -> pa.RecordBatch:
    """CSV output: every text cell starting with = + - @ tab, CR (or ') gets a leading `'`, so a spreadsheet
    shows it as text instead of running it (OWASP "CSV injection"; fanout/safe_text.py). `fanout gaps` and
    `fanout analyze` remove it again when they read fanout's CSV."""
    import pyarrow.compute as pc

    cols = [pc.replace_substring_regex(c, pattern=CSV_CELL_RE, replacement="'\\1")
            if pa.types.is_string(c.type) or pa.types.is_large_string(c.type) else c for c in batch.columns]
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def flat_rows(results: pa.Table, errors: pa.Table) -> pa.Table:
    """Results and error rows as one flat table (one row per result page, one per bad query)."""
    res = results.select(["qid", "rank", "path", "title", "heading", "snippet", "score"]).to_pylist()
    err = [{"qid": e["qid"], "field": e["field"], "error": e["error"]} for e in errors.to_pylist()]
    return pa.Table.from_pylist(res + err, schema=FLAT)


# -- output: parts (ANSWERS rows) -> one file, streamed in input order ------------------------------------
_FLAT_SQL = """
select qid, rank, path, title, heading, snippet, score, field, error, query from (
  select _row, qid, r.rank::integer as rank, r.path as path, r.title as title, r.heading as heading,
         r.snippet as snippet, r.score::double as score, null::varchar as field, null::varchar as error, query
  from (select _row, qid, query, unnest(results) as r from parts where error is null)
  union all
  select _row, qid, null, null, null, null, null, null, field, error, query from parts where error is not null
  union all  -- a query no page came back for (every page under --min-score): one row, no page
  select _row, qid, null, null, null, null, null, null, null, null, query from parts
  where error is null and coalesce(len(results), 0) = 0
) order by _row, rank
"""
_FLAT_SECTIONS_SQL = """
select qid, rank, path, title, heading, snippet, score, field, error, query, sections from (
  select _row, qid, r.rank::integer as rank, r.path as path, r.title as title, r.heading as heading,
         r.snippet as snippet, r.score::double as score, null::varchar as field, null::varchar as error, query,
         r.sections as sections
  from (select _row, qid, query, unnest(results) as r from parts where error is null)
  union all
  select _row, qid, null, null, null, null, null, null, field, error, query, null from parts where error is not null
  union all
  select _row, qid, null, null, null, null, null, null, null, null, query, null from parts
  where error is null and coalesce(len(results), 0) = 0
) order by _row, rank
"""
_QUERY_SQL = "select _row, qid, query, error, field, results from parts order by _row"


def arrow_reader(con: Any, sql: str, batch_size: int) -> pa.RecordBatchReader:
    """A duckdb query's rows as a RecordBatchReader (duckdb 2.0: `to_arrow_reader`; 1.x: `fetch_record_batch`)."""
    rel = con.sql(sql)
    fn = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader
    return fn(batch_size)


def parts_dataset(fs: pafs.FileSystem, path: str, schema: pa.Schema = ANSWERS) -> Any:
    """The readable result parts under `path` as one pyarrow dataset (`schema`: ANSWERS, or ANSWERS_SECTIONS
    for a --sections job)."""
    import pyarrow.dataset as pads

    files = [f.path for f in fs.get_file_info(pafs.FileSelector(path, recursive=True))
             if f.type == pafs.FileType.File and f.path.endswith(".parquet")]
    return pads.dataset(files, schema=schema, filesystem=fs, format="parquet")


def write_results(parts: Any, out: str | Path, storage_cfg: StorageConfig | None = None,
                  index: str | None = None, sections: bool = False) -> dict[str, int]:
    """Stream the parts (a pyarrow dataset of ANSWERS rows) into `out` in input order, atomically: locally
    tmp + rename; on an object store one upload (the object appears whole when the stream closes; a rename
    there would be a second full copy). parquet/CSV: one row per result page, plus one per bad query and one
    without a page per query nothing came back for; JSONL: one line per query. Every row carries the query
    text and `index` (fanout.store.db.index_stamp); `sections` (a --sections job) adds each page's sections."""
    import duckdb

    ext = _ext(out, OUT_FORMATS, "output")
    fs, path = filesystem(out, storage_cfg)
    local = isinstance(fs, pafs.LocalFileSystem)
    if local:
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    tmp = path + ".tmp" if local else path
    con = duckdb.connect()
    con.register("parts", parts)
    counts = dict(zip(("queries", "errors"), con.execute(
        "select count(*), count(error) from parts").fetchall()[0]))
    try:
        _write_out(con, fs, tmp, ext, index, sections)
    except BaseException:  # a full disk: a cut-short file must not keep the space it took
        if tmp != path:
            with contextlib.suppress(OSError):
                fs.delete_file(tmp)
        con.close()
        raise
    if tmp != path:
        fs.move(tmp, path)
    con.close()
    return counts


def _write_out(con: Any, fs: pafs.FileSystem, tmp: str, ext: str, index: str | None, sections: bool = False
               ) -> None:
    import pyarrow.csv as pcsv

    flat = FLAT_SECTIONS if sections else FLAT

    with fs.open_output_stream(tmp) as sink:
        if ext == ".jsonl":
            reader = arrow_reader(con, (_QUERY_SQL), 8192)
            keys = ("rank", "path", "title", "heading", "snippet", "score") + ("sections",) * sections
            for batch in reader:
                lines = []
                for r in batch.to_pylist():
                    q: dict[str, Any] = {"id": r["qid"], "query": r["query"], "index": index,
                                         "results": [{k: x[k] for k in keys} for x in r["results"] or []]}
                    if r["error"] is not None:
                        q.update(error=r["error"], field=r["field"])
                    lines.append(json.dumps(q, ensure_ascii=False) + "\n")
                sink.write("".join(lines).encode("utf-8"))
        else:
            reader = arrow_reader(con, _FLAT_SECTIONS_SQL if sections else _FLAT_SQL, 65536)
            csv_flat = FLAT.append(pa.field("sections", pa.string())) if sections else FLAT
            writer = pq.ParquetWriter(sink, flat) if ext == ".parquet" else pcsv.CSVWriter(sink, csv_flat)
            for batch in reader:
                cols = [batch.column(f.name).cast(f.type) for f in FLAT if f.name != "index"]
                cols.append(pa.array([index] * batch.num_rows, pa.string()))
                if sections:
                    cols.append(batch.column("sections").cast(pa.list_(SECTION)))
                out = pa.RecordBatch.from_arrays(cols, schema=flat)
                if ext == ".csv" and sections:  # CSV has no lists: the sections as one JSON text per page
                    text = [None if x is None else json.dumps(x, ensure_ascii=False)
                            for x in out.column("sections").to_pylist()]
                    out = pa.RecordBatch.from_arrays([*out.columns[:-1], pa.array(text, pa.string())],
                                                     schema=csv_flat)
                writer.write_batch(out if ext == ".parquet" else csv_safe(out))
            writer.close()


def read_output(out: str | Path, storage_cfg: StorageConfig | None = None) -> pa.Table:
    """A `fanout batch` output file read back whole: parquet and CSV as FLAT rows (CSV cells typed by FLAT),
    JSONL as one row per query with its `results` list."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    ext = _ext(out, OUT_FORMATS, "output")
    fs, path = filesystem(out, storage_cfg)
    if ext == ".parquet":
        return pq.read_table(path, filesystem=fs)
    with fs.open_input_stream(path) as f:
        if ext == ".csv":
            return pcsv.read_csv(f, convert_options=pcsv.ConvertOptions(
                column_types={fl.name: fl.type for fl in FLAT}, strings_can_be_null=True))
        return pjson.read_json(f)
