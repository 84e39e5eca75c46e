"""The README's Python API blocks, run as written from the repo root's point of view (the sample vault), with
the fake profile instead of `local` (the same code path; the real models are covered by the walkthrough and
the model tests) and a private db folder instead of `.fanout/db`. The Ray Data block runs on a local Ray."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]


def blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("<!-- python-api")
    found = re.findall(r"```python\n(.*?)```", text[start:text.index("\n## ", start)], re.DOTALL)
    assert len(found) == 2, "README lost its Python API blocks"
    return found


def _run(code: str, db: Path, capsys) -> str:
    code = code.replace('config="local"', 'config="fake"').replace('".fanout/db"', repr(str(db)))
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - the README's own example
    return capsys.readouterr().out


def test_readme_python_api(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # "samples/vault" as the README says
    out = _run(blocks()[0], tmp_path / "db", capsys)
    assert "Backups.md" in out and "qid" in out


def test_readme_ray_data(tmp_path, monkeypatch, capsys):
    import ray

    monkeypatch.chdir(ROOT)
    _run(blocks()[0], tmp_path / "db", capsys)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", configure_logging=False,
             object_store_memory=256 * 2**20)
    try:
        out = _run(blocks()[1], tmp_path / "db", capsys)
    finally:
        ray.shutdown()
    lines = out.strip().splitlines()
    assert [ln.split()[:2] for ln in lines] == [["q1", "ops"], ["q2", "home"]] and "Backups.md" in lines[0]
