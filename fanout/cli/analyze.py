"""`fanout analyze`: duckdb SQL over an index's tables and caches, or over eval and batch outputs.

duckdb has no lance extension offline, so Lance tables are handed to duckdb from Python: as a lance dataset
when `pylance` is installed (duckdb scans it lazily, pushing projections and filters down), else as an Arrow
table of the non-vector columns. Vector columns are left out of the views (768 floats a row help no query).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fanout.errors import InputMissing, UserError
from fanout.store import manifest

if TYPE_CHECKING:
    import argparse

    import duckdb

log = logging.getLogger(__name__)

# view name -> table name pattern of a collection (caches: fanout/store/caches.py)
DB_VIEWS = {
    "documents": "{c}_documents",
    "chunks": "{c}_chunks",
    "expansions": "{c}_cache_expansions",
    "query_vectors": "{c}_cache_qvec",
    "rerank_scores": "{c}_cache_rerank",
}
EMPTY = {  # the schema of a cache that was never written (so the documented queries still run)
    "expansions": None, "rerank_scores": None,
    "query_vectors": pa.schema([("key", pa.string()), ("text", pa.string()), ("role", pa.string()),
                                ("model", pa.string()), ("created", pa.float64())]),
}
EVAL_VIEWS = {"per_query": "per_query.parquet", "timings": "timings.parquet", "results": "results-*.parquet",
              "variants": "variants-*.parquet",
              "flagged": "flagged.parquet", "groups": "groups.parquet"}  # the last two: a `fanout gaps` folder
# The documented examples (README, --help); tests/test_analyze.py runs each.
EXAMPLES = {
    "db": [
        "select lang, count(*) notes, sum(n_chunks) chunks from documents group by lang order by notes desc",
        "select source, count(*) n from expansions group by source",
        ("select path, count(*) chunks, max(length(text)) longest from chunks group by path order by chunks desc "
         "limit 5"),
    ],
    "eval": [
        ("select set, system, round(avg(ndcg_5), 3) ndcg5, round(avg(recall_10), 3) r10 from per_query "
         "group by all order by set, ndcg5 desc"),
        "select mode, round(avg(per_query_ms)) ms from timings group by mode order by ms",
    ],
    "batch": [
        "select qid, count(*) pages, round(max(score), 3) best from results where error is null group by qid",
    ],
    "gaps": [  # tests/test_gaps.py runs these
        "select group_id, name, asks, band from groups order by asks desc limit 10",
        "select band, count(*) queries, round(avg(score), 3) mean_score from flagged group by band",
    ],
}


def _q(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _lance_view(con: duckdb.DuckDBPyConnection, view: str, tbl: Any) -> None:
    cols = [f.name for f in tbl.schema if not pa.types.is_fixed_size_list(f.type)]
    try:
        ds = tbl.to_lance()  # needs pylance; duckdb scans a pyarrow Dataset lazily
        con.register(f"_{view}_src", ds)
        con.execute(f"create view {view} as select {', '.join(_ident(c) for c in cols)} from _{view}_src")
    except ImportError:
        data = tbl.search().select(cols).limit(None).to_arrow() if cols else tbl.to_arrow()
        con.register(view, data)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def db_views(con: duckdb.DuckDBPyConnection, db: str | Path, collection: str) -> dict[str, str]:
    """Create the views of one collection; returns view -> what it reads."""
    from fanout.store.caches import SCHEMAS
    from fanout.store.db import Collection

    col = Collection(str(db), collection)
    col.require()
    present = set(col.table_names())
    made = {}
    for view, pattern in DB_VIEWS.items():
        name = pattern.format(c=collection)
        if name in present:
            _lance_view(con, view, col.table(name))
            made[view] = name
        elif view in EMPTY:
            schema = EMPTY[view] or SCHEMAS[view.removesuffix("_scores")]
            con.register(view, schema.empty_table())
            made[view] = f"{name} (not written yet: empty)"
    return made


def path_views(con: duckdb.DuckDBPyConnection, path: Path) -> dict[str, str]:
    """Views over an eval output folder, or one batch output file."""
    made = {}
    if path.is_dir():
        for view, pattern in EVAL_VIEWS.items():
            if list(path.glob(pattern)):
                con.execute(f"create view {view} as select * from read_parquet({_q(path / pattern)}, "
                            "union_by_name=true)")
                made[view] = str(path / pattern)
        if not made:
            raise UserError(f"{str(path)!r} holds no eval or gaps output (per_query.parquet, results-*.parquet, "
                            "flagged.parquet...); give an eval or gaps --out folder, a batch output file, or --db "
                            "DB for an index")
        return made
    ext = path.suffix.lower()
    if ext == ".parquet":
        con.execute(f"create view results as select * from read_parquet({_q(path)})")
    elif ext == ".csv":  # fanout's CSV escape of formula-like cells (a leading ', fanout/safe_text.py) undone
        from fanout.safe_text import CSV_UNCELL_RE

        con.execute(f"create view _csv as select * from read_csv({_q(path)}, header=true)")
        text = [r[0] for r in con.execute("describe _csv").fetchall() if r[1] == "VARCHAR"]
        pattern = CSV_UNCELL_RE.replace("'", "''")  # as a SQL string literal
        undo = ", ".join(f"regexp_replace({_ident(c)}, '{pattern}', '\\1') as {_ident(c)}" for c in text)
        con.execute(f"create view results as select * {f'replace ({undo})' if undo else ''} from _csv")
    elif ext in (".jsonl", ".json"):  # one line per query: {id, results: [...], error, field}
        con.execute(f"create view _raw as select * from read_json_auto({_q(path)})")
        cols = {r[0] for r in con.execute("describe _raw").fetchall()}
        err = "error" if "error" in cols else "null::varchar as error"
        con.execute(f"create view results as select id as qid, {err}, unnest(results, recursive := true) "
                    "from _raw")
    else:
        raise UserError(f"{str(path)!r}: unknown file type {ext!r}; give .parquet, .jsonl or .csv (batch "
                        "output) or an eval output folder")
    made["results"] = str(path)
    return made


def connect(path: str | Path | None = None, db: str | Path | None = None, collection: str = "notes"):
    """A duckdb connection with the views; returns (connection, {view: source})."""
    import duckdb

    con = duckdb.connect()
    made: dict[str, str] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise InputMissing(f"{str(p)!r} does not exist; give an eval --out folder or a batch output file")
        if p.is_dir() and manifest.names(str(p)) and db is None:
            db = p  # `fanout analyze DB`: an index folder
        else:
            made.update(path_views(con, p))
    if db is not None:
        made.update(db_views(con, db, collection))
    if not made:
        raise UserError("nothing to analyze: give an eval output folder or batch output file, or --db DB")
    return con, made


def query(con: duckdb.DuckDBPyConnection, sql: str, made: dict[str, str]) -> Any:
    import duckdb

    try:
        return con.sql(sql)
    except duckdb.Error as e:
        raise UserError(f"{str(e).splitlines()[0]}\nviews: {sorted(made)}") from None


def main_analyze(args: argparse.Namespace) -> int:
    con, made = connect(args.path, args.db, args.collection)
    if not args.sql:
        print("views (select from them with --sql \"...\"):")
        for view, src in made.items():
            n = con.execute(f"select count(*) from {view}").fetchone()[0]
            print(f"  {view:<14} {n:>8} rows  <- {src}")
        kind = "db" if args.db or "documents" in made else "eval" if "per_query" in made else \
            "gaps" if "flagged" in made else "batch"
        print("examples:\n" + "\n".join(f'  --sql "{e}"' for e in EXAMPLES[kind]))
        return 0
    rel = query(con, args.sql, made)
    if rel is None:  # a statement without a result (e.g. create view)
        return 0
    if args.csv:
        import sys

        import pyarrow.csv as pcsv

        from fanout.io.batch_output import csv_safe

        t = rel.to_arrow_table()
        with pcsv.CSVWriter(sys.stdout.buffer, t.schema) as w:  # formula-like cells start with ' (OWASP)
            for b in t.to_batches():
                w.write_batch(csv_safe(b))
    else:
        from fanout.safe_text import for_terminal

        print(for_terminal(str(rel), keep_lines=True))  # note text may hold terminal escapes
    return 0
