"""The README's "your own vault" walk-through, run command by command on a small vault written here (the real
embedder): index, query, search, get, batch, eval on its own judged queries, analyze."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from fanout.cli.main import main

pytestmark = pytest.mark.model
README = Path(__file__).resolve().parents[1] / "README.md"
VAULT = {
    "Backups.md": "---\naliases: [Snapshots]\ntags: [care]\n---\nKeep copies of your notes outside the vault.\n\n"
                  "## Restore\nTo restore a deleted note, open the backup folder and copy the file back into the "
                  "vault; file recovery also keeps snapshots for seven days.\n",
    "Travel/Packing list.md": "# Packing list\n\nPassport, charger, a warm jacket and walking shoes.\n",
    "Cooking/Bread.md": "Mix flour, water, salt and yeast; let the dough rise overnight and bake at 230 degrees.\n",
    "Work/Meetings.md": "## Weekly review\nEvery Friday we go through open tasks and plan the next week.\n",
    "Garden/Tomatoes.md": "Water tomatoes every morning in summer and tie the stems to a stake.\n",
}


def walkthrough() -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- walkthrough.*?```bash\n(.*?)```", text, re.DOTALL)
    assert block, "README lost its walk-through block"
    return [ln for ln in block.group(1).splitlines() if ln.startswith("fanout ")]


def test_readme_walkthrough(tmp_path, monkeypatch, capsys):
    vault, db = tmp_path / "notes", tmp_path / "db"
    for rel, body in VAULT.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FANOUT_NO_SERVER", "1")
    monkeypatch.setenv("FANOUT_BENCH", str(tmp_path / "no-benchmark"))
    (tmp_path / "questions.jsonl").write_text(
        '{"id": "q1", "query": "what do I pack for a trip"}\n{"id": "q2", "query": "how long does dough rise"}\n',
        encoding="utf-8")
    (tmp_path / "judged.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"id": "j1", "query": "how do I restore a deleted note", "relevant": ["Backups.md"], "subset": "recovery"},
        {"id": "j2", "query": "bread recipe", "relevant": ["Cooking/Bread.md"], "subset": "food"},
        {"id": "j3", "query": "when is the weekly review", "relevant": ["Work/Meetings.md"], "subset": "food"},
    ]) + "\n", encoding="utf-8")
    outputs = {}
    cmds = walkthrough()
    assert [c.split()[1] for c in cmds] == ["index", "query", "search", "get", "batch", "eval", "analyze",
                                            "analyze", "analyze"]
    for line in cmds:
        argv = [a.replace("~/notes", str(vault)).replace("~/.fanout/db", str(db))
                for a in shlex.split(line, comments=True)][1:]
        code = main(argv)
        out = capsys.readouterr()
        assert code == 0, f"{line}\n{out.err}"
        outputs[argv[0]] = outputs.get(argv[0], []) + [out.out]
    assert "notes 5" in outputs["index"][0]
    assert "Backups.md" in outputs["query"][0].splitlines()[0]
    assert "Backups.md" in outputs["search"][0].splitlines()
    assert outputs["get"][0].startswith("7  ## Restore\n8  To restore a deleted note")
    assert (tmp_path / "answers.parquet").exists() and "2 queries" in outputs["batch"][0]
    report = (tmp_path / "eval-out" / "report.md").read_text(encoding="utf-8")
    assert "| run | system | food | recovery |" in report and "fanout-hybrid" in report
    assert "notes" in outputs["analyze"][0] and "fanout-hybrid" in outputs["analyze"][1]
    assert "Packing list.md" in outputs["analyze"][2]
