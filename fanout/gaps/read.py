"""Reading a `fanout batch` answers file for `fanout gaps`, in any format batch writes (parquet, CSV, JSONL;
local or a fanout.store.storage URI), streamed as tables of COLUMNS; unreadable lines and values are counted in
ReadStats, never fatal."""

from __future__ import annotations

import io
import json
import logging
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from fanout.errors import UserError

log = logging.getLogger(__name__)
BANDS = ("lost", "unanswered", "weak")  # flagged bands; lost: its page of the previous run is gone (--previous)
COLUMNS = ("qid", "query", "rank", "path", "title", "score", "error", "index")
READ_ROWS = 65_536  # answer rows per streamed batch


# -- reading: any batch output format -> batches of COLUMNS --------------------------------------------
@dataclass
class ReadStats:
    rows: int = 0  # answer rows read
    queries: int = 0  # queries seen (error rows included)
    errors: int = 0  # error rows: queries fanout batch could not answer
    bad_lines: int = 0  # lines or rows that could not be read (malformed JSON, a ragged CSV row, a bad score)
    answered: int = 0
    flagged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BANDS, 0))
    index: str | None = None
    lost_pages: list[str] | None = None  # with --previous: pages that answered then and are gone now


def text_key(query: str) -> str:
    """Repeats of one question: NFC, casefolded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFC", query).casefold().split())


def _ext(uri: str) -> str:
    name = uri.rsplit("/", 1)[-1].lower()
    for ext in (".parquet", ".jsonl", ".csv"):
        if name.endswith(ext):
            return ext
    raise UserError(f"answers file {uri!r}: unknown type; give the output of `fanout batch` (.parquet, .jsonl "
                    f"or .csv)")


def _normalize(t: pa.Table, where: str) -> pa.Table:
    """Any batch output table -> COLUMNS (missing ones null; `score` float, `rank` int)."""
    if "qid" not in t.column_names:
        raise UserError(f"{where}: no `qid` column (columns: {t.column_names}); give the output of `fanout batch`")
    cols = {}
    for name in COLUMNS:
        typ = pa.float64() if name == "score" else pa.int32() if name == "rank" else pa.string()
        if name in t.column_names:
            cols[name] = t.column(name).cast(typ)
        else:
            cols[name] = pa.nulls(t.num_rows, typ)
    return pa.table(cols)


def read_answers(uri: str, storage_cfg: Any = None, stats: ReadStats | None = None,
                 on_bytes: Callable[[int, int], None] | None = None) -> Iterator[pa.Table]:
    """Stream a batch output file as tables of COLUMNS; `on_bytes(read, total)` reports progress."""
    import pyarrow.fs as pafs

    from fanout.io.batch_io import filesystem

    stats = stats or ReadStats()
    ext = _ext(str(uri))
    fs, path = filesystem(uri, storage_cfg)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"answers file {str(uri)!r} not found; give the --out file of `fanout batch`")
    if info.type != pafs.FileType.File:
        raise UserError(f"answers file {str(uri)!r} is not a file; give the --out file of `fanout batch`")
    total = info.size or 0
    if ext == ".parquet":
        import pyarrow.parquet as pq

        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            names = set(pf.schema_arrow.names)
            done = 0
            for b in pf.iter_batches(batch_size=READ_ROWS, columns=[c for c in COLUMNS if c in names]):
                t = _normalize(pa.Table.from_batches([b]), str(uri))
                done += b.num_rows
                if on_bytes:
                    on_bytes(round(total * done / max(pf.metadata.num_rows, 1)), total)
                yield t
        return
    with fs.open_input_stream(path) as raw:
        counted = _Counted(raw)
        if ext == ".csv":
            yield from _read_csv(counted, str(uri), stats, lambda: on_bytes and on_bytes(counted.n, total))
        else:
            yield from _read_jsonl(counted, str(uri), stats, lambda: on_bytes and on_bytes(counted.n, total))


class _Counted(io.RawIOBase):
    """A readable stream that counts the bytes read through it (progress for CSV/JSONL)."""

    def __init__(self, raw: Any):
        self.raw, self.n = raw, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.raw.read(len(b))
        b[:len(data)] = data
        self.n += len(data)
        return len(data)


def _read_csv(stream: Any, where: str, stats: ReadStats, tick: Callable) -> Iterator[pa.Table]:
    import pyarrow.csv as pcsv

    def bad(row: Any) -> str:
        stats.bad_lines += 1
        return "skip"

    text_cols = {c: pa.string() for c in COLUMNS if c not in ("score", "rank")}
    reader = pcsv.open_csv(io.BufferedReader(stream, 1 << 20),
                           read_options=pcsv.ReadOptions(block_size=4 << 20, use_threads=False),
                           parse_options=pcsv.ParseOptions(newlines_in_values=True, invalid_row_handler=bad),
                           convert_options=pcsv.ConvertOptions(strings_can_be_null=True, null_values=[""],  # not "NA"
                                                               column_types={**text_cols, "score": pa.string(),
                                                                             "rank": pa.string()}))
    for b in reader:
        t = pa.Table.from_batches([b])
        for name, typ in (("score", pa.float64()), ("rank", pa.int32())):
            if name in t.column_names:
                t = t.set_column(t.column_names.index(name), name, _numbers(t.column(name), typ, stats))
        tick()
        yield _normalize(t, where)


def _numbers(col: pa.ChunkedArray, typ: pa.DataType, stats: ReadStats) -> pa.Array:
    """Text -> numbers; an unreadable value is null and counted (one bad cell never stops the read)."""
    try:
        return col.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        out = []
        for v in col.to_pylist():
            try:
                out.append(None if v in (None, "") else float(v) if typ == pa.float64() else int(v))
            except ValueError:
                stats.bad_lines += 1
                out.append(None)
        return pa.array(out, typ)


def _read_jsonl(stream: Any, where: str, stats: ReadStats, tick: Callable) -> Iterator[pa.Table]:
    """JSONL batch output: one line per query, `{id, query, index, results: [...], error}`."""
    rows: dict[str, list] = {c: [] for c in COLUMNS}

    def add(**kw: Any) -> None:
        for c in COLUMNS:
            rows[c].append(kw.get(c))

    text = io.TextIOWrapper(io.BufferedReader(stream, 1 << 20), encoding="utf-8", errors="replace")
    for lineno, line in enumerate(text, 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            if not isinstance(q, dict):
                raise TypeError("not an object")
            base = {"qid": str(q.get("id", q.get("qid", f"line-{lineno}"))), "query": q.get("query"),
                    "index": q.get("index"), "error": q.get("error")}
            results = q.get("results") or []
            if not isinstance(results, list):
                raise TypeError("`results` is not a list")
            if not results or base["error"] is not None:
                add(**base)
            for r in results:
                score = r.get("score")
                add(**base, rank=r.get("rank"), path=r.get("path"), title=r.get("title"),
                    score=float(score) if isinstance(score, (int, float)) else None)
        except (ValueError, TypeError, AttributeError) as e:
            stats.bad_lines += 1
            log.warning("%s line %d skipped: %s", where, lineno, e)
        if len(rows["qid"]) >= READ_ROWS:
            tick()
            yield _table(rows)
            rows = {c: [] for c in COLUMNS}
    if rows["qid"]:
        tick()
        yield _table(rows)


def _table(rows: dict[str, list]) -> pa.Table:
    types = {"score": pa.float64(), "rank": pa.int32()}
    return pa.table({c: pa.array([None if v is None else str(v) if c not in types else v for v in rows[c]],
                                 types.get(c, pa.string())) for c in COLUMNS})
