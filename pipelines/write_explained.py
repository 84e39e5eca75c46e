"""Job output with `--explain`: the usual batch columns plus the query text, the probe decision and every list
that found each page, readable (fanout/explain.py) and as JSON.

parquet/CSV: one row per result page (and one per bad query, one per query without pages), the columns of
`fanout.io.batch_output.FLAT` (with `query` and `index`) then `probe` (`BM25 probe: top 0.91, 0.30 ahead ->
expansion skipped`), `lists` (`fts/orig "q" #1 7.41; vec/vec "..." #3 0.71`) and `explain` (the JSON: lists with lane, kind, text, rank, score; rrf; fused rank;
rerank; probe; filter). JSONL: one line per query with `query`, `probe` and each result's `lists`/`explain`.
Streamed from the parts like `write_results` (duckdb over the parts dataset, input order, tmp + move).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from fanout.explain import lists_compact, probe_text
from fanout.io.batch_input import filesystem
from fanout.io.batch_output import FLAT, arrow_reader, csv_safe

if TYPE_CHECKING:
    import pyarrow.dataset as pads

    from fanout.config import StorageConfig

EXTRA = [("probe", pa.string()), ("lists", pa.string()), ("explain", pa.string())]  # FLAT has `query`, `index`
EXPLAINED = pa.schema([*FLAT, *EXTRA])
KEYS = ("rank", "path", "title", "heading", "snippet", "score")

_FLAT_SQL = """
select qid, rank, path, title, heading, snippet, score, field, error, query, explain from (
  select _row, qid, r.rank::integer as rank, r.path as path, r.title as title, r.heading as heading,
         r.snippet as snippet, r.score::double as score, null::varchar as field, null::varchar as error,
         query, r._explain as explain
  from (select _row, qid, query, unnest(results) as r from parts where error is null)
  union all
  select _row, qid, null, null, null, null, null, null, field, error, query, null from parts
  where error is not null
  union all  -- a query no page came back for (every page under --min-score): one row, no page
  select _row, qid, null, null, null, null, null, null, null, null, query, null from parts
  where error is null and coalesce(len(results), 0) = 0
) order by _row, rank
"""
_QUERY_SQL = "select _row, qid, query, error, field, results from parts order by _row"


def _readable(explain: str | None) -> tuple[str | None, str | None]:
    """(probe, lists) text of one result's `_explain` JSON."""
    if not explain:
        return None, None
    ex = json.loads(explain)
    return probe_text(ex.get("probe")) or None, lists_compact(ex.get("lists", []))


def write_explained(parts: pads.Dataset, out: str | Path, storage_cfg: StorageConfig | None = None, index: str | None = None) -> dict[str, int]:
    """Like `fanout.io.batch_output.write_results`, with the explain columns; returns {queries, errors}."""
    import duckdb
    import pyarrow.csv as pcsv

    ext = PurePosixPath(str(out)).suffix.lower()
    fs, path = filesystem(out, storage_cfg)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    tmp = path + ".tmp"
    con = duckdb.connect()
    con.register("parts", parts)
    counts = dict(zip(("queries", "errors"), con.execute("select count(*), count(error) from parts").fetchall()[0]))
    with fs.open_output_stream(tmp) as sink:
        if ext == ".jsonl":
            for batch in arrow_reader(con, _QUERY_SQL, 8192):
                lines = []
                for r in batch.to_pylist():
                    q: dict[str, Any] = {"id": r["qid"], "query": r["query"], "index": index, "probe": None,
                                         "results": []}
                    for x in r["results"] or []:
                        ex = json.loads(x["_explain"]) if x["_explain"] else {}
                        q["probe"] = q["probe"] or probe_text(ex.get("probe")) or None
                        q["results"].append({**{k: x[k] for k in KEYS}, "lists": lists_compact(ex.get("lists", [])),
                                             "explain": ex})
                    if r["error"] is not None:
                        q.update(error=r["error"], field=r["field"])
                    lines.append(json.dumps(q, ensure_ascii=False) + "\n")
                sink.write("".join(lines).encode("utf-8"))
        else:
            writer = pq.ParquetWriter(sink, EXPLAINED) if ext == ".parquet" else pcsv.CSVWriter(sink, EXPLAINED)
            for batch in arrow_reader(con, _FLAT_SQL, 65536):
                texts = [_readable(e) for e in batch.column("explain").to_pylist()]
                cols = [batch.column(f.name).cast(f.type) for f in FLAT if f.name != "index"]
                cols += [pa.array([index] * batch.num_rows, pa.string()), pa.array([t[0] for t in texts], pa.string()),
                         pa.array([t[1] for t in texts], pa.string()), batch.column("explain").cast(pa.string())]
                out = pa.RecordBatch.from_arrays(cols, schema=EXPLAINED)
                writer.write_batch(out if ext == ".parquet" else csv_safe(out))
            writer.close()
    fs.move(tmp, path)
    con.close()
    return counts
