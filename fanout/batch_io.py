"""Reading query rows (JSONL, parquet, CSV) and writing results (parquet, JSONL, CSV by extension)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

FLAT = pa.schema([
    ("qid", pa.string()), ("rank", pa.int32()), ("path", pa.string()), ("title", pa.string()),
    ("heading", pa.string()), ("snippet", pa.string()), ("score", pa.float64()),
    ("field", pa.string()), ("error", pa.string()),
])
FORMATS = (".jsonl", ".json", ".parquet", ".csv")


def _fmt(path: Path) -> str:
    ext = path.suffix.lower()
    if ext not in FORMATS:
        raise ValueError(f"{str(path)!r}: unknown file type {ext!r}; use one of {list(FORMATS)}")
    return ext


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Query rows. A JSONL line that does not parse becomes an error row naming its line number."""
    path = Path(path)
    ext = _fmt(path)
    if ext in (".jsonl", ".json"):
        text = path.read_text(encoding="utf-8")
        if ext == ".json" and text.lstrip().startswith("["):
            return json.loads(text)
        rows: list[dict[str, Any]] = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                rows.append({"id": f"line-{n}", "_field": "", "_error":
                             f"line {n} is not valid JSON ({e.msg} at column {e.colno}); fix the line"})
        return rows
    table = pq.read_table(path) if ext == ".parquet" else pcsv.read_csv(path)
    return table.to_pylist()


def flat_rows(results: pa.Table, errors: pa.Table) -> pa.Table:
    """Results and error rows as one flat table (one row per result page, one per bad query)."""
    res = results.select(["qid", "rank", "path", "title", "heading", "snippet", "score"]).to_pylist()
    err = [{"qid": e["qid"], "field": e["field"], "error": e["error"]} for e in errors.to_pylist()]
    return pa.Table.from_pylist(res + err, schema=FLAT)


def write_table(flat: pa.Table, path: str | Path, order: list[str] | None = None) -> None:
    """Write atomically; JSONL groups rows into one line per query, in `order` when given."""
    path = Path(path)
    ext = _fmt(path)
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    if ext == ".parquet":
        pq.write_table(flat, tmp)
    elif ext == ".csv":
        pcsv.write_csv(flat, tmp)
    else:
        by_q: dict[str, dict[str, Any]] = {}
        for r in flat.to_pylist():
            q = by_q.setdefault(r["qid"], {"id": r["qid"], "results": []})
            if r["error"]:
                q.update({"error": r["error"], "field": r["field"]})
            else:
                q["results"].append({k: r[k] for k in ("rank", "path", "title", "heading", "snippet", "score")})
        ids = order if order is not None else list(by_q)
        with tmp.open("w", encoding="utf-8") as f:
            for qid in ids:
                if qid in by_q:
                    f.write(json.dumps(by_q[qid], ensure_ascii=False) + "\n")
    tmp.replace(path)
