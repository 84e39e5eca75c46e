"""`fanout eval` on your own judged queries: the format's checks, agent fields keyed by your ids, judged paths
that are not in the index, and a report written with no benchmark anywhere."""

from __future__ import annotations

import json
import shutil

import pytest

from fanout.cli.main import main
from fanout.evaluation.own import load_judged, load_own_fields


def write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_judged_format_defaults_and_paths(tmp_path):
    qs = load_judged(write(tmp_path / "j.jsonl", [
        {"id": 1, "query": "sync", "relevant": "./Sync/Sync your notes.md"},
        {"id": "b", "query": "links", "relevant": ["Linking\\Internal links.md"], "partial": [], "subset": "hard",
         "category": "kw", "lang": "en"}]))
    assert qs[0] == {"id": "1", "query": "sync", "relevant": ["Sync/Sync your notes.md"], "partial": [],
                     "lang": "", "subset": "", "category": "", "set": "all"}
    assert qs[1]["relevant"] == ["Linking/Internal links.md"] and qs[1]["set"] == "hard"


def test_judged_format_problems_are_listed_with_their_lines(tmp_path):
    path = write(tmp_path / "j.jsonl", [
        {"id": "a", "query": "x", "relevant": ["A.md"]}, "{not json", {"query": "no id", "relevant": ["A.md"]},
        {"id": "a", "query": "dup", "relevant": ["A.md"]}, {"id": "c", "query": "", "relevant": []},
        {"id": "d", "query": "q", "relevant": [3]}])
    with pytest.raises(ValueError) as e:
        load_judged(path)
    msg = str(e.value)
    for part in ("line 2: not valid JSON", "line 3: `id` is missing", "line 4: id 'a' appears twice",
                 "line 5 (c): `query` is missing or empty", "line 5 (c): `relevant` is empty",
                 "line 6 (d): `relevant` must be a list of note paths", "format: one JSON object a line"):
        assert part in msg


def test_agent_fields_keyed_by_your_ids(tmp_path):
    f = tmp_path / "fields.json"
    f.write_text(json.dumps({"q1": {"short_query": " Sync ", "rephrased_query": 5}}), encoding="utf-8")
    assert load_own_fields([str(f)], {"q1", "q2"}) == {"q1": {"short_query": "Sync"}}
    f.write_text(json.dumps([{"id": "en:q1", "short_query": "Sync"}]), encoding="utf-8")
    with pytest.raises(ValueError, match="none of which is a query id"):
        load_own_fields([str(f)], {"q1"})


def test_eval_on_an_indexed_collection_without_the_benchmark(tmp_path, tiny_db, monkeypatch, capsys):
    monkeypatch.setenv("FANOUT_BENCH", str(tmp_path / "no-bench-here"))
    db = tmp_path / "db"
    shutil.copytree(tiny_db, db)
    cfg = tmp_path / "noexpand.yaml"
    cfg.write_text("extends: local\nexpand:\n  enabled: false\n", encoding="utf-8")
    judged = write(tmp_path / "judged.jsonl", [
        {"id": "s1", "query": "restore an old version of a file", "relevant": ["Sync/Sync your notes.md"],
         "subset": "en", "category": "paraphrase"},
        {"id": "s2", "query": "colour the code", "relevant": ["Editing/Code blocks.md"], "subset": "en"},
        {"id": "r1", "query": "рецепт блинов", "relevant": ["Рецепты/Блины.md"], "subset": "ru"}])
    fields = tmp_path / "fields.json"
    fields.write_text(json.dumps([{"id": "s2", "short_query": "Syntax highlighting"}]), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["eval", "--queries", str(judged), "-c", "t", "--db", str(db), "--out", str(out), "--config", str(cfg),
            "--n-boot", "50"]
    assert main([*argv, "--fields", str(fields), "--modes", "bm25,hybrid,short"]) == 0
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| run | system | en | ru |" in report and "fanout-short" in report
    assert "| hybrid - bm25 | en |" in report and "paraphrase" in report
    assert (out / "ndcg5.png").stat().st_size > 0 and (out / "runs" / "fanout-hybrid.json").exists()
    assert json.loads((out / "runs" / "fanout-hybrid.json").read_text())["results"]["r1"][0] == "Рецепты/Блины.md"
    capsys.readouterr()
    # a field mode without fields, and judged paths the index does not hold: clear errors, exit 2
    assert main([*argv, "--modes", "short"]) == 2
    assert "uses agent fields: give --fields FILE" in capsys.readouterr().err
    write(judged, [{"id": "x", "query": "q", "relevant": ["Sync your notes.md", "Nope.md"]}])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "2 judged path(s) are not notes of collection 't'" in err
    assert "x: 'Sync your notes.md' (did you mean 'Sync/Sync your notes.md'?)" in err
    assert "Obsidian Help benchmark not found" not in err
