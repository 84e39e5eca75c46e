"""Readable --explain in every output format (text, --md, --csv, --json) and as batch output columns, with the
fake profile: each page's lists (lane, variant text, rank, score), per query the query text and the probe
decision; the usual batch columns stay as they are without --explain."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.vault import write_vault


@pytest.fixture(scope="module")
def edb(tmp_path_factory) -> Path:
    from fanout.pipelines.index import index_vault

    from fanout.config import load_config
    from fanout.exec.runner import Runner

    root = tmp_path_factory.mktemp("explain")
    cfg = load_config("fake")
    with Runner(cfg) as r:
        index_vault(write_vault(root / "vault"), root / "db", "t", cfg, r)
    return root / "db"


def cli(capsys, edb: Path, *argv: str) -> str:
    from fanout.cli.main import main

    assert main([*argv, "--db", str(edb), "-c", "t", "--config", "fake", "--no-server"]) == 0
    return capsys.readouterr().out


QUERY = ["query", "keep devices in step", "--short-query", "Version history", "-n", "3", "--explain"]


def test_explain_in_text_md_csv_and_json(capsys, edb):
    text = cli(capsys, edb, *QUERY)
    first = text.splitlines()[0]
    assert first.startswith('query "keep devices in step" | BM25 probe: top ') and "variants from the caller" in first
    assert 'fts   lex   "Version history"' in text and "fused rank 1" in text
    md = cli(capsys, edb, *QUERY, "--md").splitlines()
    assert md[0] == first and md[2] == "| # | score | page | heading | snippet | why |"
    assert 'fts/lex "Version history" #1' in md[4]
    rows = list(csv.DictReader(io.StringIO(cli(capsys, edb, *QUERY, "--csv"))))
    assert list(rows[0])[-3:] == ["query", "probe", "explain"]
    assert rows[0]["query"] == "keep devices in step" and rows[0]["probe"].startswith("BM25 probe: top ")
    assert 'fts/lex "Version history"' in rows[0]["explain"]
    res = json.loads(cli(capsys, edb, *QUERY, "--json"))
    ex = res[0]["explain"]
    assert ex["query"] == "keep devices in step" and ex["probe"]["expansion"] == "agent"
    assert {"lane": "fts", "kind": "lex", "text": "Version history"}.items() <= next(
        li for li in ex["lists"] if li["kind"] == "lex").items()


def test_batch_explain_columns_in_parquet_csv_and_jsonl(tmp_path, edb):
    from fanout.cli.main import main

    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "query": "keep devices in step", "short_query": "Version history"}) + "\n"
                 + json.dumps({"id": "b", "query": ""}) + "\n", encoding="utf-8")
    base = ["--db", str(edb), "-c", "t", "--config", "fake", "--runner", "inproc", "-n", "3"]
    assert main(["batch", str(q), "--out", str(tmp_path / "plain.parquet"), *base]) == 3
    plain = pq.read_table(tmp_path / "plain.parquet")
    assert plain.column_names == ["qid", "rank", "path", "title", "heading", "snippet", "score", "field", "error",
                                  "query", "index"]
    assert main(["batch", str(q), "--out", str(tmp_path / "x.parquet"), *base, "--explain"]) == 3
    t = pq.read_table(tmp_path / "x.parquet")
    assert t.column_names == [*plain.column_names, "probe", "lists", "explain"]
    assert set(t["index"].to_pylist()) == set(plain["index"].to_pylist()) and t["index"][0].as_py().startswith("t@")
    top = t.to_pylist()[0]
    assert top["qid"] == "a" and top["query"] == "keep devices in step"
    assert top["probe"].startswith("BM25 probe: top ") and top["probe"].endswith("-> variants from the caller")
    assert 'fts/lex "Version history" #1' in top["lists"]
    assert json.loads(top["explain"])["lists"] and t.to_pylist()[-1]["error"]  # the bad row is still there
    assert [r["path"] for r in t.to_pylist() if r["path"]] == [r["path"] for r in plain.to_pylist() if r["path"]]
    assert main(["batch", str(q), "--out", str(tmp_path / "x.csv"), *base, "--explain"]) == 3
    rows = list(csv.DictReader(io.StringIO((tmp_path / "x.csv").read_text(encoding="utf-8"))))
    assert rows[0]["lists"] == top["lists"] and rows[0]["probe"] == top["probe"]
    assert main(["batch", str(q), "--out", str(tmp_path / "x.jsonl"), *base, "--explain"]) == 3
    a, b = [json.loads(x) for x in (tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()]
    assert a["query"] == "keep devices in step" and a["probe"] == top["probe"]
    assert a["results"][0]["lists"] == top["lists"] and a["results"][0]["explain"]["lists"]
    assert b["error"] and b["results"] == []
