"""One bad input row among good ones: query rows nested thousands of levels deep, holding lone surrogates or
numbers; answers files with scores that are not numbers, ranks past int32 and bytes that are not UTF-8. Each
is one counted error row; the others are answered. Moved from tests/test_hostile_round4.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support import hostile_output
from tests.support.hostile_output import run, write

hostile_db = hostile_output.hostile_db  # a fixture (tests/support/hostile_output.py)


# -- 3. one bad row ---------------------------------------------------------------------------------------------
def _bad_rows_file(path: Path) -> None:
    lines = [json.dumps({"id": "ok1", "query": "sync your devices"}),
             '{"id": "deep", "query": "x", "filter": ' + "[" * 50_000 + "]" * 50_000 + "}",
             '{"id": "sur", "query": "lone \\ud800 surrogate"}',
             '{"id": "\\udfff", "query": "a lone surrogate in the id"}',
             "[" * 5000 + "]" * 5000,
             json.dumps({"id": "ok2", "query": "spreadsheet function"})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_deep_or_surrogate_row_is_one_error_row_in_batch_and_expand(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    q = tmp_path / "bad.jsonl"
    _bad_rows_file(q)
    out = tmp_path / "out.jsonl"
    rc, stdout, err = run(capsys, "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t", "--config",
                          "fake", "--runner", "inproc")
    assert rc == 3, err
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["ok1", "line-2", "sur", "line-4", "line-5", "ok2"]
    by = {r["id"]: r for r in rows}
    assert by["ok1"]["results"] and by["ok2"]["results"] and "error" not in by["ok1"]
    assert "line 2 is nested deeper" in by["line-2"]["error"] and "line 5 is nested" in by["line-5"]["error"]
    assert "line 3 holds a lone surrogate escape (\\ud800" in by["sur"]["error"]
    assert "line 4 holds a lone surrogate escape (\\udfff" in by["line-4"]["error"]
    rc, stdout, err = run(capsys, "expand", str(q), "--db", str(db), "-c", "t", "--config", "fake",
                          "--runner", "inproc")
    assert rc == 3 and "6 queries" in stdout and "4 bad rows" in stdout, (stdout, err)


def test_a_json_array_with_a_surrogate_row_answers_the_others(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    q = tmp_path / "q.json"
    q.write_text('[{"id": "a", "query": "sync"}, {"id": "b", "query": "\\udc00"}, {"id": "c", "query": "tab"}]')
    out = tmp_path / "out.jsonl"
    assert run(capsys, "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t", "--config", "fake",
               "--runner", "inproc")[0] == 3
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [bool(r.get("error")) for r in rows] == [False, True, False] and "row 2 of the array" in rows[1]["error"]


def test_a_number_in_a_query_field_is_an_error_row_in_jsonl_and_parquet_alike(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    got = {}
    for ext in ("jsonl", "parquet"):
        q = tmp_path / f"q.{ext}"
        if ext == "jsonl":
            q.write_text(json.dumps({"id": 1, "query": 2024}) + "\n" + json.dumps({"id": 2, "query": "sync"}) + "\n")
        else:
            pq.write_table(pa.table({"id": [1, 2], "query": ["2024", "sync"]}).set_column(
                1, "query", pa.array([2024, None], pa.int64())), q)
        out = tmp_path / f"out-{ext}.jsonl"
        run(capsys, "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t", "--config", "fake",
            "--runner", "inproc")
        got[ext] = [json.loads(x) for x in out.read_text().splitlines()]
    assert got["jsonl"][0]["id"] == got["parquet"][0]["id"] == "1"
    assert got["jsonl"][0]["field"] == got["parquet"][0]["field"] == "query"
    assert got["jsonl"][0]["error"] == got["parquet"][0]["error"] == "row 1: `query` must be a string, got int '2024'"


def test_answers_with_bad_scores_ranks_or_utf8_are_counted_per_row(hostile_db, capsys, tmp_path, caplog):
    from fanout.store.db import Collection, index_stamp

    _, db = hostile_db
    stamp = index_stamp("t", Collection(str(db), "t").require())
    good = {"qid": "g", "rank": 1, "path": "a.md", "title": "a", "score": 0.95, "query": "sync", "index": stamp}
    t = pa.table({"qid": ["g", "b1", "b2"], "rank": pa.array([1, 2**40, 1], pa.int64()), "path": ["a.md"] * 3,
                  "title": ["a"] * 3, "score": ["0.95", "0.5", "high"], "query": ["sync", "x y", "z w"],
                  "index": [stamp] * 3})
    pq.write_table(t, tmp_path / "bad.parquet")
    csv_bytes = (",".join(good) + "\n" + ",".join(str(v) for v in good.values()) + "\n").encode() + \
        b"b3,1,a.md,a,0.1,\xff\xfe not UTF-8," + stamp.encode() + b"\n" + \
        f"b4,1,a.md,a,0.2,fine query,{stamp}\n".encode()
    (tmp_path / "bad.csv").write_bytes(csv_bytes)
    for name, bad in (("bad.parquet", 2), ("bad.csv", 1)):
        caplog.clear()
        rc, stdout, err = run(capsys, "gaps", str(tmp_path / name), "--db", str(db), "-c", "t", "--config", "fake",
                              "--out", str(tmp_path / f"rep-{name}"))
        assert rc == 0, err
        assert f"{bad} unreadable lines" in stdout, stdout
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert name in logged and "column `" in logged, logged


def test_gaps_out_naming_a_file_is_one_line(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    f = tmp_path / "exists.txt"
    f.write_text("keep me")
    rc, _, err = run(capsys, "gaps", str(tmp_path / "whatever.jsonl"), "--db", str(db), "-c", "t", "--config",
                     "fake", "--out", str(f))
    assert rc == 2 and "is a file" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f.read_text() == "keep me"


def test_optimize_between_batch_and_gaps_keeps_the_answers_current(tmp_path, capsys, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    vault = write(tmp_path / "v", {"a.md": "# A\nsync devices\n", "b.md": "# B\nthemes and colors\n"})
    db = tmp_path / "db"
    index_vault(vault, db, "t", fake_cfg, fake_runner)
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "1", "query": "billing invoice"}) + "\n")
    answers = tmp_path / "answers.jsonl"
    common = ["--db", str(db), "-c", "t", "--config", "fake"]
    assert run(capsys, "batch", str(q), "--out", str(answers), *common, "--runner", "inproc")[0] == 0
    assert run(capsys, "optimize", *common, "--keep-days", "0")[0] == 0
    rc, _, err = run(capsys, "gaps", str(answers), *common, "--out", str(tmp_path / "g1"))
    assert rc == 0, err
    index_vault(vault, db, "t", fake_cfg, fake_runner)  # nothing changed: still current
    assert run(capsys, "gaps", str(answers), *common, "--out", str(tmp_path / "g2"))[0] == 0
    (vault / "c.md").write_text("# C\nbilling\n")
    index_vault(vault, db, "t", fake_cfg, fake_runner)  # a note changed: the answers are stale
    rc, _, err = run(capsys, "gaps", str(answers), *common, "--out", str(tmp_path / "g3"))
    assert rc == 2 and "re-indexed or rebuilt since" in err
