"""An emptied collection (issue 52, round 5, item 1): index a vault, delete its every note, index again.

Lance writes a full-text index of no rows without tokenizer parameters; reading them raised `KeyError:
'params'` in every search (and a warning in the index run) until a note came back. Every face must answer
"no pages" instead, and the index must take notes again. Fake profile, no models.
"""

from __future__ import annotations

import json
import logging

import pytest

import fanout


@pytest.fixture()
def emptied(tmp_path, fake_cfg, caplog):
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "a.md").write_text("# Sync\nsync your devices\n", encoding="utf-8")
    (vault / "b.md").write_text("# Themes\nthemes and colours\n", encoding="utf-8")
    db = tmp_path / "db"
    with fanout.open(db, "t", fake_cfg) as kb:
        kb.index(vault)
        for f in vault.glob("*.md"):
            f.unlink()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            rep = kb.index(vault)
        assert rep.notes == 0 and rep.chunks == 0
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text  # no 'params' warning
    return vault, db


def test_every_search_of_an_emptied_collection_answers_no_pages(emptied, fake_cfg):
    vault, db = emptied
    with fanout.open(db, "t", fake_cfg) as kb:
        for mode in ("query", "search", "vsearch"):
            assert list(kb.search("sync devices", mode=mode)) == [], mode
        resp = kb.answer({"mode": "query", "collections": ["t"], "query": "sync", "sections": 2})  # serve's path
        assert resp["results"] == [] and resp["errors"] == []
        got = kb.batch([{"id": "1", "query": "sync"}, {"id": "2", "query": "themes"}])
        assert got.queries == 2 and got.errors == 0
        assert kb.status()["notes"] == 0
        (vault / "c.md").write_text("# Sync again\nsync your devices again\n", encoding="utf-8")
        kb.index(vault)
        assert [h.path for h in kb.search("sync devices")] == ["c.md"]


def test_the_cli_searches_an_emptied_collection_without_a_traceback(emptied, capsys):
    from fanout.cli.main import main

    _, db = emptied
    for cmd in ("query", "search", "vsearch"):
        capsys.readouterr()
        rc = main([cmd, "sync", "--db", str(db), "-c", "t", "--config", "fake", "--no-server", "--json"])
        out = capsys.readouterr()
        assert rc == 0 and json.loads(out.out) == [] and "Traceback" not in out.err, (cmd, out.err)
