"""fanout/evaluation/matrix.py: every rows file of bench/no_agent names valid configurations, and finished rows merge."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from fanout.evaluation.matrix import fields_from, row_config, save

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "bench" / "no_agent").glob("*.yaml")) + sorted((ROOT / "bench" / "weak_fields").glob("*.yaml"))


@pytest.mark.parametrize("path", [p for p in SPECS if "rows" in yaml.safe_load(p.read_text(encoding="utf-8"))],
                         ids=lambda p: p.name)
def test_rows_files_build_valid_configs(path: Path) -> None:
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    names = [r["name"] for r in spec["rows"]]
    assert len(names) == len(set(names))
    for row in spec["rows"]:
        cfg = row_config(row, spec.get("set") or {})  # validates (lanes, formats, fields)
        for key, value in (row.get("set") or {}).items():
            section, field = key.split(".")
            got = getattr(getattr(cfg, section), field)
            assert (list(got) if isinstance(got, tuple) else got) == value
    for a, _ in spec.get("pairs") or []:
        assert a in names


def test_save_replaces_a_rerun_row_and_keeps_the_others(tmp_path: Path) -> None:
    def pq_rows(system: str, lang: str, v: float) -> pa.Table:
        return pa.table({"system": [system], "lang": [lang], "id": [f"{lang}:1"], "ndcg_5": [v]})

    save(tmp_path, pq_rows("a", "en", 0.1), [{"row": "a", "lang": "en", "seconds": 1.0}])
    save(tmp_path, pq_rows("b", "en", 0.2), [{"row": "b", "lang": "en", "seconds": 2.0}])
    save(tmp_path, pq_rows("a", "en", 0.3), [{"row": "a", "lang": "en", "seconds": 3.0}])
    got = sorted(pq.read_table(tmp_path / "per_query.parquet").to_pylist(), key=lambda r: r["system"])
    assert [(r["system"], r["ndcg_5"]) for r in got] == [("a", 0.3), ("b", 0.2)]
    assert sorted(t["seconds"] for t in pq.read_table(tmp_path / "timings.parquet").to_pylist()) == [2.0, 3.0]


def test_a_row_reads_its_own_fields_files(tmp_path: Path) -> None:
    (tmp_path / "weak-en.json").write_text(json.dumps([{"id": "q001", "short_query": "a, b",
                                                         "rephrased_query": None, "expected_answer": ""}]))
    got = fields_from(str(tmp_path / "weak"), ["en"])
    assert got == {"en:q001": {"short_query": "a, b", "rephrased_query": "", "expected_answer": ""}}
    with pytest.raises(FileNotFoundError, match="weak-ru.json not found; write it first"):
        fields_from(str(tmp_path / "weak"), ["en", "ru"])


def _weak_fields():
    spec = importlib.util.spec_from_file_location("weak_fields", ROOT / "bench" / "weak_fields" / "weak_fields.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_weak_field_rules_reproduce_the_weak_agent() -> None:
    wf = _weak_fields()
    strong = {"short_query": "internal links", "rephrased_query": "How do I link notes?",
              "expected_answer": "Type [[ to link a note."}
    twin = {"short_query": "внутренние ссылки", "rephrased_query": "Как?", "expected_answer": "Введите [[."}
    fields = {"en:q001": strong, "ru:q001": twin}
    q = {"id": "en:q001", "query": "how to create internal links between notes"}
    assert wf.degrade("copy", q, strong, fields)["short_query"] == "create internal links"
    assert wf.degrade("comma", q, strong, fields)["short_query"] == "create, internal, links"
    assert wf.degrade("long", q, strong, fields)["short_query"] == "create internal links between notes"
    assert wf.degrade("docs", q, strong, fields)["expected_answer"] == (
        "The documentation should explain how to create internal links between notes.")
    assert wf.degrade("question", q, strong, fields)["expected_answer"] == "How do I link notes?"
    assert wf.degrade("empty", q, strong, fields)["expected_answer"] == ""
    lang = wf.degrade("lang", q, strong, fields)
    assert (lang["short_query"], lang["expected_answer"]) == ("внутренние ссылки", "Введите [[.")
    assert wf.degrade("lang", {"id": "en:t-en-001", "query": "x"}, strong, fields) == strong  # no twin
    assert wf.degrade("weak", q, strong, fields)["rephrased_query"] == strong["rephrased_query"]
    with pytest.raises(ValueError, match="unknown variant 'sloppy'; choose from"):
        wf.degrade("sloppy", q, strong, fields)
