"""Tests for fanout.evaluation.bench_data: loading the Obsidian Help benchmark (real folder and a synthetic one)."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from fanout.evaluation import bench_data as bd

BENCH = bd.default_bench_dir()
needs_bench = pytest.mark.skipif(
    not (BENCH / "queries" / "obsidian-help.jsonl").is_file(),
    reason=f"Obsidian Help benchmark not found at {BENCH} "
    "(set FANOUT_BENCH or add ../shared/eval/obsidian-help)",
)


@pytest.fixture()
def fake_bench(tmp_path: Path) -> Path:
    """A two-query benchmark with a weak agent's fields file and one run."""
    (tmp_path / "queries").mkdir()
    queries = [
        {
            "orig_id": "q001",
            "lang": "en",
            "subset": "base",
            "query": "links",
            "category": "keyword",
            "relevant": ["A.md"],
            "partial": None,
        },
        {
            "orig_id": "q001",
            "lang": "ru",
            "subset": "base",
            "query": "ссылки",
            "category": "keyword",
            "relevant": [unicodedata.normalize("NFD", "Случайная.md")],
            "partial": [],
        },
    ]
    text = "\n".join(json.dumps(q, ensure_ascii=False) for q in queries) + "\n\n"
    (tmp_path / "queries" / "obsidian-help.jsonl").write_text(text, encoding="utf-8")
    (tmp_path / "agent-fields").mkdir()
    weak = [{"id": "q001", "short_query": " links ", "rephrased_query": None}, {"short_query": "no id"}]
    (tmp_path / "agent-fields" / "agent-fields-en.json").write_text(json.dumps(weak), encoding="utf-8")
    (tmp_path / "runs").mkdir()
    run = {"system": "toy", "results": {"q001": ["A.md"]}}
    (tmp_path / "runs" / "toy-ru.json").write_text(json.dumps(run), encoding="utf-8")
    (tmp_path / "runs" / "nolang.json").write_text(json.dumps(run), encoding="utf-8")
    return tmp_path


def test_default_dir_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(bd.BENCH_ENV, str(tmp_path))
    assert bd.default_bench_dir() == tmp_path
    monkeypatch.delenv(bd.BENCH_ENV)
    assert bd.default_bench_dir().parts[-3:] == ("shared", "eval", "obsidian-help")


def test_missing_bench_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(bd.BenchNotFoundError, match="FANOUT_BENCH"):
        bd.load_queries(tmp_path / "nowhere")


def test_fake_bench_loads_tolerantly(fake_bench: Path) -> None:
    queries = bd.load_queries(fake_bench)
    assert [q["id"] for q in queries] == ["en:q001", "ru:q001"]
    assert queries[0]["partial"] == [] and queries[0]["set"] == "en-base"
    assert queries[1]["relevant"] == [unicodedata.normalize("NFC", "Случайная.md")]
    fields = bd.load_agent_fields(fake_bench)  # ru file missing, en entries partial
    assert fields == {"en:q001": {"short_query": "links", "rephrased_query": "", "expected_answer": ""}}
    assert bd.load_published_runs(fake_bench) == {"toy": {"ru:q001": ["A.md"]}}


def test_agent_fields_dict_form(tmp_path: Path) -> None:
    path = tmp_path / "weak.json"
    path.write_text(json.dumps({"t-ru-001": {"expected_answer": 3, "short_query": "x"}}), encoding="utf-8")
    assert bd.read_agent_fields(path, "ru") == {
        "ru:t-ru-001": {"short_query": "x", "rephrased_query": "", "expected_answer": ""}
    }


def test_run_name_parts() -> None:
    assert bd.run_name_parts("runs/qmd-qwen-ru.json") == ("qmd-qwen", "ru")
    assert bd.run_name_parts("mine.json") == ("mine", None)


@needs_bench
def test_real_queries() -> None:
    queries = bd.load_queries()
    assert len(queries) == 236
    counts = {s: sum(q["set"] == s for q in queries) for s in bd.SETS}
    assert counts == {"en-base": 58, "en-tricky": 57, "ru-base": 58, "ru-tricky": 63}
    assert len({q["id"] for q in queries}) == 236
    assert all(q["relevant"] or q["partial"] for q in queries)


@needs_bench
def test_real_agent_fields_cover_every_query() -> None:
    fields = bd.load_agent_fields()
    assert set(fields) == {q["id"] for q in bd.load_queries()}
    assert all(isinstance(v, str) for f in fields.values() for v in f.values())
    assert fields["ru:q001"]["short_query"]


@needs_bench
def test_real_published_runs_and_table() -> None:
    runs = bd.load_published_runs()
    table = bd.load_published_table()
    assert (
        set(runs)
        == set(table)
        == {"ohs", "qmd", "qmd-qwen", "trip2g", "trip2g-alias", "fields-short", "fields-w1"}
    )
    assert all(len(run) == 236 for run in runs.values())
    assert table["ohs"]["en-base"] == (0.726, 0.931)
    assert table["fields-w1"]["ru-tricky"] == (0.866, 1.0)
    assert table["trip2g"]["system"].startswith("trip2g (bge-m3")


@needs_bench
def test_corpus_dir() -> None:
    for lang in bd.LANGS:
        assert len(list(bd.corpus_dir(None, lang).rglob("*.md"))) >= 170
    with pytest.raises(ValueError):
        bd.corpus_dir(None, "de")
