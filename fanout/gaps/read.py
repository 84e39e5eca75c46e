"""Reading a `fanout batch` answers file for `fanout gaps`, in any format batch writes (parquet, CSV, JSONL;
local or a fanout.store.storage URI), streamed as tables of COLUMNS; unreadable lines and values are counted in
ReadStats, never fatal: a score that is not a number or a rank out of range (any format), a CSV row that is
not UTF-8 or has the wrong number of fields, a malformed JSONL line. Each kind is logged once per file and
column. fanout's own CSV escape of formula-like cells (a leading `'`, fanout/safe_text.py) is undone."""

from __future__ import annotations

import io
import json
import logging
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fanout.errors import InputMissing, UserError

if TYPE_CHECKING:
    from fanout.config import StorageConfig

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


def _normalize(t: pa.Table, where: str, stats: ReadStats | None = None) -> pa.Table:
    """Any batch output table -> COLUMNS (missing ones null; `score` float, `rank` int). A value that does not
    convert (a score `high`, a rank past int32, a list where text belongs) is null and its row counted."""
    if "qid" not in t.column_names:
        raise UserError(f"{where}: no `qid` column (columns: {t.column_names}); give the output of `fanout batch`")
    stats = stats if stats is not None else ReadStats()
    cols = {}
    for name in COLUMNS:
        typ = pa.float64() if name == "score" else pa.int32() if name == "rank" else pa.string()
        if name in t.column_names:
            cols[name] = _numbers(t.column(name), typ, stats, where, name) if name in ("score", "rank") else \
                _text(t.column(name), stats, where, name)
        else:
            cols[name] = pa.nulls(t.num_rows, typ)
    return pa.table(cols)


def _text(col: pa.ChunkedArray, stats: ReadStats, where: str, name: str) -> pa.ChunkedArray | pa.Array:
    try:
        return col.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        bad = col.length() - col.null_count
        stats.bad_lines += bad
        log.warning("%s: column `%s` is %s, not text (%s); its %d values are left out (rows counted as "
                    "unreadable)", where, name, col.type, str(e).splitlines()[0][:120], bad)
        return pa.nulls(len(col), pa.string())


def read_answers(uri: str, storage_cfg: StorageConfig | None = None, stats: ReadStats | None = None,
                 on_bytes: Callable[[int, int], None] | None = None) -> Iterator[pa.Table]:
    """Stream a batch output file as tables of COLUMNS; `on_bytes(read, total)` reports progress."""
    import pyarrow.fs as pafs

    from fanout.io.batch_input import filesystem

    stats = stats or ReadStats()
    ext = _ext(str(uri))
    fs, path = filesystem(uri, storage_cfg)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise InputMissing(f"answers file {str(uri)!r} not found; give the --out file of `fanout batch`")
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
                t = _normalize(pa.Table.from_batches([b]), str(uri), stats)
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

    # every column read as text, its UTF-8 checked per column here (a bad row is left out, not the file)
    reader = pcsv.open_csv(io.BufferedReader(stream, 1 << 20),
                           read_options=pcsv.ReadOptions(block_size=4 << 20, use_threads=False),
                           parse_options=pcsv.ParseOptions(newlines_in_values=True, invalid_row_handler=bad),
                           convert_options=pcsv.ConvertOptions(strings_can_be_null=True, null_values=[""],  # not "NA"
                                                               column_types=dict.fromkeys(COLUMNS, pa.string()),
                                                               check_utf8=False))
    import pyarrow.compute as pc

    from fanout.safe_text import CSV_UNCELL_RE

    for b in reader:
        t = _utf8_rows(pa.Table.from_batches([b]), where, stats)
        for name in COLUMNS:  # fanout's CSV escape of formula-like cells (`'=...`) undone, where there is one
            if name in t.column_names and pa.types.is_string(t.schema.field(name).type) and \
                    pc.any(pc.starts_with(t.column(name), "'")).as_py():
                t = t.set_column(t.column_names.index(name), name,
                                 pc.replace_substring_regex(t.column(name), pattern=CSV_UNCELL_RE, replacement="\\1"))
        tick()
        yield _normalize(t, where, stats)


def _utf8_rows(t: pa.Table, where: str, stats: ReadStats) -> pa.Table:
    """CSV text columns read unchecked -> checked; a row holding bytes that are not UTF-8 is left out and
    counted (one validation pass per column; rows are looked at only in a column that fails it)."""
    import pyarrow.compute as pc

    keep = None
    for name in COLUMNS:
        if name not in t.column_names:
            continue
        try:
            t.column(name).validate(full=True)
            continue
        except pa.ArrowInvalid:
            col = t.column(name).cast(pa.binary())
        ok = []
        for v in col.to_pylist():
            try:
                ok.append(v is None or isinstance(v.decode("utf-8"), str))
            except UnicodeDecodeError:
                ok.append(False)
        log.warning("%s: column `%s`: %d rows are not UTF-8 text; they are left out (counted as unreadable)",
                    where, name, ok.count(False))
        mask = pa.array(ok)
        keep = mask if keep is None else pc.and_(keep, mask)
        t = t.set_column(t.column_names.index(name), name,
                         pa.array([v.decode("utf-8") if good and v is not None else None
                                   for v, good in zip(col.to_pylist(), ok)], pa.string()))
    if keep is not None:
        stats.bad_lines += t.num_rows - pc.sum(keep).as_py()
        t = t.filter(keep)
    return t


def _numbers(col: pa.ChunkedArray, typ: pa.DataType, stats: ReadStats, where: str = "", name: str = "") -> pa.Array:
    """Text or numbers -> `typ`; a value that is not a number (or a rank past int32) is null and its row
    counted, once logged per file and column (one bad cell never stops the read)."""
    try:
        return col.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        out: list[float | int | None] = []
        bad = 0
        for v in col.to_pylist():
            try:
                if v is None or v == "":
                    out.append(None)
                    continue
                if isinstance(v, (bytes, list, dict, bool)):
                    raise TypeError(type(v).__name__)
                x = float(v) if typ == pa.float64() else int(float(v)) if float(v).is_integer() else None
                if x is None or (typ == pa.int32() and not -2**31 <= x < 2**31):
                    raise ValueError(v)
                out.append(x)
            except (ValueError, TypeError, OverflowError):
                bad += 1
                out.append(None)
        stats.bad_lines += bad
        if bad:
            log.warning("%s: column `%s`: %d values are not %s; their rows are counted as unreadable",
                        where, name, bad, "numbers" if typ == pa.float64() else "ranks (whole numbers up to 2^31)")
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
