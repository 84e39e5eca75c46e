"""Batch output: results out (parquet, JSONL, CSV), local paths or object-store URIs (`filesystem()` of
fanout/io/batch_input.py). Output is validated before any work (`check_out`) and written by streaming
(`write_results`); CSV output cells a spreadsheet would run as a formula start with `'` (fanout/safe_text.py,
`csv_safe`); `read_output` reads a finished output back as one table.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fanout.errors import UserError
from fanout.io.batch_input import file_ext, filesystem
from fanout.safe_text import CSV_CELL_RE
from fanout.schemas import ANSWERS, SECTION

if TYPE_CHECKING:
    import duckdb
    import pyarrow.dataset as pads

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
OUT_FORMATS = (".jsonl", ".parquet", ".csv")


def check_out(out: str | Path, inp: str | Path | None = None, storage_cfg: StorageConfig | None = None) -> str:
    """Validate the output path before any work: a known extension, not a folder, not the input file, and
    a parent folder that exists (or can be made) and is writable; on an object store, a bucket that exists.
    Returns the extension."""
    ext = file_ext(out, OUT_FORMATS, "output")
    fs, path = filesystem(out, storage_cfg)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.Directory:
        raise UserError(f"output {str(out)!r} is a folder; give a file path ending in one of {list(OUT_FORMATS)}")
    if inp is not None:
        ifs, ipath = filesystem(inp, storage_cfg)
        same = type(ifs) is type(fs) and ipath == path
        if not same and isinstance(fs, pafs.LocalFileSystem):
            with contextlib.suppress(OSError):
                same = os.path.samefile(ipath, path)
        if same:
            raise UserError(f"output {str(out)!r} is the input file; write the results to another file")
    if isinstance(fs, pafs.LocalFileSystem):
        probe = Path(path).parent
        if not probe.exists():  # its folder is made (as `mkdir` would), but a typo higher up must not become a
            probe = probe.parent  # new tree of folders
            if not probe.exists():
                raise UserError(f"output {str(out)!r}: folder {str(probe)!r} does not exist; create it first or "
                                f"write somewhere else")
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise UserError(f"output {str(out)!r}: folder {str(probe)!r} is not writable; choose another place")
    else:
        bucket = path.split("/", 1)[0]
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise UserError(f"output {str(out)!r}: bucket {bucket!r} does not exist (or these credentials cannot "
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


def arrow_reader(con: duckdb.DuckDBPyConnection, sql: str, batch_size: int) -> pa.RecordBatchReader:
    """A duckdb query's rows as a RecordBatchReader (duckdb 2.0: `to_arrow_reader`; 1.x: `fetch_record_batch`)."""
    rel = con.sql(sql)
    fn = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader
    return fn(batch_size)


def parts_dataset(fs: pafs.FileSystem, path: str, schema: pa.Schema = ANSWERS) -> pads.Dataset:
    """The readable result parts under `path` as one pyarrow dataset (`schema`: ANSWERS, or ANSWERS_SECTIONS
    for a --sections job)."""
    import pyarrow.dataset as pads

    files = [f.path for f in fs.get_file_info(pafs.FileSelector(path, recursive=True))
             if f.type == pafs.FileType.File and f.path.endswith(".parquet")]
    return pads.dataset(files, schema=schema, filesystem=fs, format="parquet")


def write_results(parts: pads.Dataset, out: str | Path, storage_cfg: StorageConfig | None = None,
                  index: str | None = None, sections: bool = False) -> dict[str, int]:
    """Stream the parts (a pyarrow dataset of ANSWERS rows) into `out` in input order, atomically: locally
    tmp + rename; on an object store one upload (the object appears whole when the stream closes; a rename
    there would be a second full copy). parquet/CSV: one row per result page, plus one per bad query and one
    without a page per query nothing came back for; JSONL: one line per query. Every row carries the query
    text and `index` (fanout.store.db.index_stamp); `sections` (a --sections job) adds each page's sections."""
    import duckdb

    ext = file_ext(out, OUT_FORMATS, "output")
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


def _write_out(con: duckdb.DuckDBPyConnection, fs: pafs.FileSystem, tmp: str, ext: str, index: str | None, sections: bool = False
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

    ext = file_ext(out, OUT_FORMATS, "output")
    fs, path = filesystem(out, storage_cfg)
    if ext == ".parquet":
        return pq.read_table(path, filesystem=fs)
    with fs.open_input_stream(path) as f:
        if ext == ".csv":
            return pcsv.read_csv(f, convert_options=pcsv.ConvertOptions(
                column_types={fl.name: fl.type for fl in FLAT}, strings_can_be_null=True))
        return pjson.read_json(f)
