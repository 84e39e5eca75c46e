"""faces/eval_matrix.py: every rows file of bench/issue11 names valid configurations, and finished rows merge."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from faces.eval_matrix import row_config, save

SPECS = sorted((Path(__file__).resolve().parent.parent / "bench" / "issue11").glob("*.yaml"))


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
