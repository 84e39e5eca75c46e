"""The public API (fanout.open -> KnowledgeBase): every call, its answers against the CLI's, and bad input as
a typed FanoutError naming the field (never a traceback from inside). Fake models, the bundled sample vault."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fanout
from fanout.config import data_dir

SAMPLES = data_dir("samples")
VAULT = SAMPLES / "vault"
QUERIES = SAMPLES / "queries.jsonl"


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    db = tmp_path_factory.mktemp("api") / "db"
    with fanout.open(db, collection="samples", config="fake") as kb:
        report = kb.index(VAULT)
        assert isinstance(report, fanout.IndexReport) and report.notes > 20 and report.chunks > report.notes
        yield kb


def test_public_names_are_the_contract():
    import importlib

    for name in fanout.__all__:
        assert getattr(fanout, name) is not None
    assert callable(importlib.import_module("fanout.ray").search) and callable(fanout.open)
    for err in ("ConfigError", "IndexStateError", "ModelError", "NoteError", "RequestError", "FilterError",
                "StorageError", "UserError"):
        assert issubclass(getattr(fanout, err), fanout.FanoutError), err


def test_index_again_reports_nothing_new(kb):
    rep = kb.index(VAULT)
    assert rep.embedded_notes == 0 and rep.notes > 20 and rep.skipped == []


def test_search_gives_the_cli_answers(kb, capsys):
    from fanout.cli.main import main

    hits = kb.search("how long are backup snapshots kept", n=5)
    assert isinstance(hits, fanout.Hits) and 1 <= len(hits) <= 5
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(isinstance(h, fanout.Hit) and 0 <= h.score <= 1 for h in hits)
    rc = main(["query", "how long are backup snapshots kept", "--db", kb.db, "-c", "samples", "--config", "fake",
               "-n", "5", "--json", "--no-server"])
    assert rc == 0
    cli = json.loads(capsys.readouterr().out)
    assert [(r["path"], r["rank"], r["score"]) for r in cli] == [(h.path, h.rank, h.score) for h in hits]
    t = hits.to_arrow()
    assert t.num_rows == len(hits) and t.column("path").to_pylist() == [h.path for h in hits]
    assert list(hits.to_pandas()["rank"]) == [h.rank for h in hits]


def test_search_with_agent_fields_filter_explain_and_lines(kb):
    hits = kb.search("backups", short_query="backup snapshot retention", rephrased_query="how long backups stay",
                     expected_answer="Snapshots are kept for 30 days.", intent="ops", n=3, explain=True,
                     line_numbers=True)
    assert hits and hits.expansion == {"samples": "agent"}
    assert all(h.explain and h.explain["lists"] for h in hits)
    assert all(isinstance(h.line, int) and h.line >= 1 for h in hits)
    lang = kb.search("backups", filter={"lang": "en"}, n=10)
    assert lang and all(not h.path.startswith("ru/") for h in lang)
    plain = kb.search("naming", mode="search", n=3)
    assert plain and plain.expansion == {"samples": "none"}


@pytest.mark.parametrize("call, field", [
    (lambda kb: kb.search(42), "query"),
    (lambda kb: kb.search("x", short_query=["a"]), "short_query"),
    (lambda kb: kb.search("x", n=0), "n"),
    (lambda kb: kb.search("x", n="5"), "n"),
    (lambda kb: kb.search("x", mode="fuzzy"), "mode"),
    (lambda kb: kb.search("x", min_score=2), "min_score"),
    (lambda kb: kb.search(""), "query"),
])
def test_bad_search_input_is_a_typed_error_naming_the_field(kb, call, field):
    with pytest.raises(fanout.RequestError) as e:
        call(kb)
    assert e.value.field == field, str(e.value)


def test_bad_filter_and_bad_values_are_typed_errors(kb):
    with pytest.raises(fanout.FilterError, match="folder|kind|filter"):
        kb.search("x", filter={"colour": "red"})
    with pytest.raises(fanout.FilterError, match="JSON"):
        kb.search("x", filter="{not json")
    with pytest.raises(fanout.UserError, match="`rows` must be"):
        kb.batch(42)
    with pytest.raises(fanout.UserError, match="`runner` must be one of"):
        kb.batch([{"query": "x"}], runner="cluster")
    with pytest.raises(fanout.UserError, match="`n` must be"):
        kb.batch([{"query": "x"}], n=-1)
    with pytest.raises(fanout.UserError, match="`ref` must be"):
        kb.get(None)


def test_open_refuses_bad_arguments(tmp_path):
    with pytest.raises(fanout.ConfigError, match="not found.*fake"):
        fanout.open(tmp_path, config="no-such-profile")
    with pytest.raises(fanout.ConfigError, match="`config` must be"):
        fanout.open(tmp_path, config=3)
    with pytest.raises(fanout.UserError, match="`db` must be a path"):
        fanout.open(None)
    with pytest.raises(fanout.RequestError, match="not a collection name") as e:
        fanout.open(tmp_path, collection="../etc")
    assert e.value.field == "collection"
    with pytest.raises(fanout.UserError, match="`runner` must be one of"):
        fanout.open(tmp_path, runner="gpu")


def test_a_missing_db_says_so_and_how_to_fix_it(tmp_path):
    with fanout.open(tmp_path / "nothing-here", config="fake") as kb:
        with pytest.raises(fanout.IndexStateError, match="fanout index"):
            kb.search("anything")
        with pytest.raises(fanout.FanoutError):
            kb.status()


def test_batch_equals_the_cli_batch(kb, tmp_path):
    from fanout.cli.main import main

    out = tmp_path / "cli.parquet"
    assert main(["batch", str(QUERIES), "--db", kb.db, "-c", "samples", "--config", "fake", "--out", str(out),
                 "--runner", "inproc"]) in (0, 3)
    cli = pq.read_table(out)
    res = kb.batch(QUERIES, runner="inproc")
    assert isinstance(res, fanout.BatchResult) and res.out is None
    assert res.to_arrow().drop_columns(["index"]).equals(cli.drop_columns(["index"]))  # the same job, the same rows
    rows = [json.loads(line) for line in QUERIES.read_text().splitlines() if line.strip()]
    # the same rows as a list of dicts, a pa.Table and a DataFrame give the same answers
    for given in (rows, pa.Table.from_pylist([{"id": r.get("id"), "query": r.get("query")} for r in rows])):
        other = kb.batch(given, runner="inproc").to_arrow()
        keep = ["qid", "rank", "path", "score"]
        if isinstance(given, pa.Table):
            ref = kb.batch([{"id": r.get("id"), "query": r.get("query")} for r in rows], runner="inproc").to_arrow()
            assert other.select(keep).equals(ref.select(keep))
        else:
            assert other.select(keep).equals(cli.select(keep))
    assert kb.batch(pa.Table.from_pylist(rows[:3]).to_pandas(), runner="inproc").queries == 3


def test_batch_writes_out_and_keeps_every_good_row_next_to_a_bad_one(kb, tmp_path):
    out = tmp_path / "answers.jsonl"
    rows = [{"id": "a", "query": "backup snapshots"}, {"id": "b", "query": 7}, 42,  # neither a row nor a query
            {"id": "d", "query": "naming conventions"}]
    res = kb.batch(rows, out=out, n=3)
    assert res.out == str(out) and out.exists() and res.errors == 2 and res.queries == 4
    by_id = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert by_id["a"]["results"] and by_id["d"]["results"]
    assert by_id["b"]["field"] == "query" and "row 2" in by_id["b"]["error"]
    assert len(res.to_arrow()) == 4


def test_expand_get_status_and_gaps(kb, tmp_path):
    st = kb.expand([{"query": "where are travel receipts"}, {"query": "team naming"}])
    assert st["queries"] == 2 and st["errors"] == 0
    note = kb.get("en/Setup/Backups.md") if (VAULT / "en/Setup/Backups.md").exists() else None
    first = kb.batch([{"query": "backups"}], n=1).to_arrow().column("path")[0].as_py()
    note = kb.get(first)
    assert isinstance(note, fanout.Note) and note.path == first and note.text and note.first_line >= 1
    with pytest.raises(fanout.NoteError, match="outside|vault|not"):
        kb.get("../../etc/passwd")
    status = kb.status()
    assert status["collection"] == "samples" and status["notes"] > 20
    answers = tmp_path / "answers.parquet"
    kb.batch(QUERIES, out=answers)
    res = kb.gaps(answers, tmp_path / "report")
    assert (tmp_path / "report" / "report.md").exists() and res.stats.queries > 0


def test_one_knowledge_base_shared_by_threads_answers_each_call_alone(kb):
    want = {q: [h.path for h in kb.search(q, n=3)] for q in ("backups", "naming", "travel")}
    got: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def ask(q: str) -> None:
        try:
            for _ in range(3):
                got[q] = [h.path for h in kb.search(q, n=3)]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=ask, args=(q,)) for q in want]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == want


def test_a_closed_knowledge_base_says_so(tmp_path):
    kb = fanout.open(tmp_path, config="fake")
    kb.close()
    with pytest.raises(fanout.UserError, match="closed"):
        kb.search("x")


def test_profiles_load_by_name_from_the_package():
    from fanout.config import CONFIG_DIR, load_config

    assert {p.stem for p in CONFIG_DIR.glob("*.yaml")} >= {"local", "fake", "production"}
    assert load_config("fake").models.backend == "fake"
    assert Path(fanout.__file__).parent.parent / "configs" == CONFIG_DIR or (
        Path(fanout.__file__).parent / "configs" == CONFIG_DIR)
