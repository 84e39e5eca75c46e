"""`fanout analyze`: the documented example queries run on an index (tables and caches as views), on an eval
output folder and on batch output files; bad SQL is a message listing the views."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fanout.cli.analyze import EXAMPLES, connect
from fanout.cli.main import main
from fanout.io.batch_output import FLAT


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_db):
    d = tmp_path_factory.mktemp("analyze") / "db"
    shutil.copytree(tiny_db, d)
    return d


def test_db_views_and_examples(db):
    con, made = connect(db=db, collection="t")
    assert set(made) == {"documents", "chunks", "expansions", "query_vectors", "rerank_scores"}
    assert "vector" not in [r[0] for r in con.execute("describe chunks").fetchall()]
    assert {r[0]: r[1] for r in con.sql(EXAMPLES["db"][0]).fetchall()} == {"en": 4, "ru": 2}
    assert all(isinstance(n, int) for _, n in con.sql(EXAMPLES["db"][1]).fetchall())  # empty if never expanded
    top = con.sql(EXAMPLES["db"][2]).fetchall()
    assert len(top) == 5 and all(r[1] >= 1 for r in top)


def test_analyze_cli_on_a_db_folder(db, capsys):
    assert main(["analyze", str(db / ".."), "--db", str(db), "-c", "t"]) == 2  # no eval output there
    capsys.readouterr()
    assert main(["analyze", "--db", str(db), "-c", "t"]) == 0
    out = capsys.readouterr().out
    assert "documents" in out and "6 rows" in out and "examples:" in out
    assert main(["analyze", "--db", str(db), "-c", "t", "--sql", "select count(*) n from chunks", "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == '"n"'
    assert main(["analyze", "--db", str(db), "-c", "t", "--sql", "select * from expansion"]) == 2
    err = capsys.readouterr().err
    assert "expansion" in err and "views: ['chunks', 'documents', 'expansions'" in err and "Traceback" not in err


def test_eval_output_examples(tmp_path, capsys):
    pq.write_table(pa.table({"system": ["fanout-bm25", "fanout-hybrid"], "set": ["all", "all"],
                             "ndcg_5": [0.5, 0.75], "recall_10": [1.0, 1.0]}), tmp_path / "per_query.parquet")
    pq.write_table(pa.table({"mode": ["bm25", "hybrid"], "per_query_ms": [3.0, 40.0]}), tmp_path / "timings.parquet")
    con, made = connect(tmp_path)
    assert set(made) == {"per_query", "timings"}
    assert con.sql(EXAMPLES["eval"][0]).fetchall()[0][:3] == ("all", "fanout-hybrid", 0.75)
    assert [r[0] for r in con.sql(EXAMPLES["eval"][1]).fetchall()] == ["bm25", "hybrid"]


@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".csv"])
def test_batch_output_examples(tmp_path, ext):
    flat = pa.Table.from_pylist([
        {"qid": "q1", "rank": 1, "path": "A.md", "title": "A", "heading": "", "snippet": "a", "score": 0.9},
        {"qid": "q1", "rank": 2, "path": "B.md", "title": "B", "heading": "", "snippet": "b", "score": 0.5},
        {"qid": "q2", "field": "query", "error": "`query` is empty"}], schema=FLAT)
    out = tmp_path / f"answers{ext}"
    write_batch_output(flat, out)
    con, _ = connect(out)
    assert con.sql(EXAMPLES["batch"][0]).fetchall() == [("q1", 2, 0.9)]


def write_batch_output(flat: pa.Table, out) -> None:
    """A file in `fanout batch`'s output formats (fanout.io.batch_output.write_results): parquet/CSV one row per
    page plus one per bad query; JSONL one line per query with its results (and error)."""
    import json

    import pyarrow.csv as pcsv

    if out.suffix == ".parquet":
        pq.write_table(flat, out)
    elif out.suffix == ".csv":
        pcsv.write_csv(flat, out)
    else:
        by_q: dict = {}
        for r in flat.to_pylist():
            q = by_q.setdefault(r["qid"], {"id": r["qid"], "results": []})
            if r["error"]:
                q.update(error=r["error"], field=r["field"])
            else:
                q["results"].append({k: r[k] for k in ("rank", "path", "title", "heading", "snippet", "score")})
        out.write_text("".join(json.dumps(q) + "\n" for q in by_q.values()), encoding="utf-8")
