"""The query pipeline, batch and expand jobs with the fake model profile (configs/fake.yaml): milliseconds.

Checked: one source of defaults; a fake index is searchable with the fake profile only; the stage list runs
in-process with per-stage counters; cached expansions are used whatever `expand.enabled` says; batch input
and output abuse (issue 13 items 5, 10, 11) gives error rows or clear errors before any work; the cache
writer leaves no duplicate keys and readers survive duplicates an older version left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.vault import write_vault

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def fake_db(tmp_path, fake_cfg, fake_runner) -> Path:
    """The tiny vault indexed with the fake embedder, a fresh db per test (caches start empty)."""
    from fanout.pipelines.index import index_vault

    vault = write_vault(tmp_path / "vault")
    db = tmp_path / "db"
    index_vault(vault, db, "t", fake_cfg, fake_runner)
    return db


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n"
                            for r in rows), encoding="utf-8")
    return path


def _cli(*args: str) -> int:
    from fanout.cli.main import main

    return main(list(args))


def test_config_defaults_are_the_local_profile():
    from fanout.config import Config, load_config

    assert Config().validate() == load_config("local")  # tests build the configuration people run


@pytest.mark.model
def test_fake_index_is_searchable_with_the_fake_profile_only(fake_db, fake_cfg, fake_runner):
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.config import load_config
    from fanout.exec.runner import Runner
    from fanout.store.db import Collection

    assert Collection(fake_db, "t").read_manifest()["embedder"]["file"] == "fake-embedder"
    s = Searcher(fake_db, "t", fake_cfg, fake_runner)
    res = s.search([{"id": "a", "query": "version history of a file"}, {"id": "w", "query": "Wikilinks"}],
                   SearchOptions(n=3, explain=True))
    top = {q: [r["path"] for r in res.results.to_pylist() if r["qid"] == q] for q in ("a", "w")}
    assert top["a"][0] == "Sync/Sync your notes.md" and top["w"][0] == "Linking/Internal links.md"
    assert set(res.timings) >= {"ParseQueries", "ProbeBM25", "LookupVectors", "EmbedVariants", "Retrieve", "WriteCaches"}
    assert res.stats["stages"]["EmbedVariants"]["embedded"] == 2
    with pytest.raises(ValueError, match="was embedded with fake-embedder"):
        Searcher(fake_db, "t", load_config("local"), Runner(load_config("local")))


def test_repeat_is_answered_from_the_cache_written_by_the_one_writer(fake_db, fake_cfg, fake_runner):
    from fanout.pipelines.search import Searcher, SearchOptions

    s = Searcher(fake_db, "t", fake_cfg, fake_runner)
    rows = [{"id": "c", "query": "restore old versions", "rephrased_query": "file version history"}]
    first = s.search(rows, SearchOptions(n=3))
    calls = fake_runner.calls.get("embedder", 0)
    again = s.search(rows, SearchOptions(n=3))
    assert fake_runner.calls.get("embedder", 0) == calls  # no embedder call: vectors came from the cache
    assert again.results.to_pylist() == first.results.to_pylist()
    assert again.stats["cache"]["hits"]["qvec"] >= 2
    assert first.stats["stages"]["WriteCaches"]["qvec_inserted"] == 2


def test_cached_expansions_are_used_even_when_expansion_is_off(fake_db, fake_cfg, fake_runner):
    from fanout.pipelines.search import Searcher, SearchOptions

    cfg = fake_cfg.replace(probe={"enabled": False})
    rows = [{"id": "e", "query": "sync settings on devices"}]
    gen = Searcher(fake_db, "t", cfg.replace(expand={"enabled": True}), fake_runner).search(rows, SearchOptions())
    assert gen.stats["expansion"]["model"] == 1 and gen.variants.num_rows == 4
    off = Searcher(fake_db, "t", cfg.replace(expand={"enabled": False}), fake_runner)
    res = off.search(rows, SearchOptions())
    assert res.stats["expansion"]["cache"] == 1 and res.stats["cached_expansions"] == 1
    assert res.variants.select(["kind", "text"]).to_pylist() == gen.variants.select(["kind", "text"]).to_pylist()
    assert res.results["path"].to_pylist() == gen.results["path"].to_pylist()
    other = off.search([{"id": "n", "query": "a query nobody expanded"}], SearchOptions())
    assert other.stats["expansion"]["none"] == 1  # missing and not generated
    # expand.use_kinds picks which cached lines are searched, without generating again
    lex = Searcher(fake_db, "t", cfg.replace(expand={"enabled": False, "use_kinds": ["lex"]}), fake_runner)
    kinds = [v["kind"] for v in lex.search(rows, SearchOptions()).variants.to_pylist()]
    assert kinds and set(kinds) == {"orig", "lex"}


def test_expansions_precomputed_by_fanout_expand_are_used_with_expansion_off(tmp_path, fake_db, fake_cfg,
                                                                           fake_runner):
    from fanout.pipelines.search import Searcher, SearchOptions

    q = "sync settings on devices"
    log = _jsonl(tmp_path / "log.jsonl", [{"id": "p1", "query": q}])
    assert _cli("expand", str(log), "--db", str(fake_db), "--collection", "t", "--config", "fake",
                "--runner", "inproc") == 0
    cfg = fake_cfg.replace(probe={"enabled": False}, expand={"enabled": False})
    calls = fake_runner.calls.get("expander", 0), fake_runner.calls.get("embedder", 0)
    res = Searcher(fake_db, "t", cfg, fake_runner).search([{"id": "a", "query": q}], SearchOptions())
    # no model call: the precomputed lines were read, and their vectors too (expand.precompute_vectors)
    assert (fake_runner.calls.get("expander", 0), fake_runner.calls.get("embedder", 0)) == calls
    assert res.stats["stages"]["EmbedVariants"]["embedded"] == 0 < res.stats["stages"]["LookupVectors"]["cached"]
    assert res.stats["expansion"]["cache"] == 1 and res.stats["stages"]["LookupExpansions"]["cache"] == 1
    assert {v["source"] for v in res.variants.to_pylist() if v["kind"] != "orig"} == {"cache"}
    from fanout.api.service import SearchService  # `fanout query -v` says so: "expansion: t cache"

    resp = SearchService(fake_db, cfg, fake_runner).run({"mode": "query", "collections": ["t"], "query": q})
    assert resp["expansion"] == {"t": "cache"} and resp["results"]
    # another prompt format is another cache key: the qmd-format lines are not served to a fields config
    fields = cfg.replace(expand={"format": "fields"})
    other = Searcher(fake_db, "t", fields, fake_runner).search([{"id": "a", "query": q}], SearchOptions())
    assert other.stats["expansion"]["none"] == 1


def test_batch_duplicate_ids_across_slices_are_error_rows(tmp_path, fake_db):
    rows = [{"id": "q1", "query": "sync notes"}] + [{"id": f"x{i}", "query": f"code block {i}"} for i in range(6)]
    rows += [{"id": "q1", "query": "pancakes"}, {"query": "no id here"}]
    q = _jsonl(tmp_path / "q.jsonl", rows)
    out = tmp_path / "out.jsonl"
    rc = _cli("batch", str(q), "--out", str(out), "--db", str(fake_db), "--collection", "t", "--config", "fake",
              "--runner", "inproc", "--slice", "2", "-n", "2")
    assert rc == 3  # some rows failed
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["q1"] + [f"x{i}" for i in range(6)] + ["q1", "row-9"]
    assert "error" not in lines[0] and len(lines[0]["results"]) == 2
    assert lines[7]["field"] == "id" and "first on row 1" in lines[7]["error"] and lines[7]["results"] == []
    assert not Path(str(out) + ".parts").exists()


def test_batch_all_good_exits_0_and_parquet_is_in_input_order(tmp_path, fake_db):
    rows = [{"id": f"q{i}", "query": w} for i, w in enumerate(["sync", "code", "links", "daily", "блины"] * 3)]
    q = _jsonl(tmp_path / "q.jsonl", rows)
    out = tmp_path / "out.parquet"
    assert _cli("batch", str(q), "--out", str(out), "--db", str(fake_db), "--collection", "t", "--config",
                "fake", "--runner", "inproc", "--slice", "4", "-n", "3") == 0
    t = pq.read_table(out)
    qids = list(dict.fromkeys(t["qid"].to_pylist()))
    assert qids == [r["id"] for r in rows]
    assert t.column_names == ["qid", "rank", "path", "title", "heading", "snippet", "score", "field", "error",
                              "query", "index"]
    assert t["query"].to_pylist()[0] == "sync" and len(set(t["index"].to_pylist())) == 1  # one index answered


def test_csv_text_is_text_parquet_numbers_are_typed_and_a_ragged_csv_row_is_an_error_row(tmp_path, fake_db):
    csv = tmp_path / "q.csv"
    csv.write_text('id,query\n1,2024\n2,"sync, devices"\n3,too,many,fields\n007,code blocks\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    rc = _cli("batch", str(csv), "--out", str(out), "--db", str(fake_db), "--collection", "t", "--config",
              "fake", "--runner", "inproc")
    assert rc == 3
    by = {x["id"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert set(by) == {"1", "2", "line-4", "007"}  # ids stay text too ("007")
    assert "error" not in by["1"] and "error" not in by["2"]
    assert "line 4 has 4 fields, the header has 2" in by["line-4"]["error"]
    pqf = tmp_path / "q.parquet"
    pq.write_table(pa.table({"id": [1, 2], "query": [2024, 1999]}), pqf)
    out2 = tmp_path / "out2.jsonl"
    # parquet is typed like JSONL: a number is an id's text, but in `query` an error row naming the field, as
    # JSONL's {"query": 2024} is (issue 42: one rule for typed formats; CSV has no types, so 2024 is text)
    assert _cli("batch", str(pqf), "--out", str(out2), "--db", str(fake_db), "--collection", "t", "--config",
                "fake", "--runner", "inproc") == 3
    rows = [json.loads(x) for x in out2.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["1", "2"] and {r["field"] for r in rows} == {"query"}
    assert "`query` must be a string, got int '2024'" in rows[0]["error"]


@pytest.mark.parametrize("case", ["txt", "folder", "same", "unwritable"])
def test_bad_out_fails_before_any_work(tmp_path, fake_db, case, capsys):
    q = _jsonl(tmp_path / "q.jsonl", [{"id": "a", "query": "sync"}])
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    out = {"txt": tmp_path / "x.txt", "folder": tmp_path, "same": q, "unwritable": ro / "sub" / "o.jsonl"}[case]
    if case == "folder":
        out = tmp_path / "dir.jsonl"
        out.mkdir()
    why = {"txt": "unknown output file type '.txt'", "folder": "is a folder", "same": "is the input file",
           "unwritable": "is not writable"}[case]
    if case == "unwritable" and os.geteuid() == 0:
        pytest.skip("root writes everywhere: the permission check cannot fail")
    rc = _cli("batch", str(q), "--out", str(out), "--db", str(fake_db), "--collection", "t", "--config", "fake",
              "--runner", "inproc")
    assert rc == 2 and why in capsys.readouterr().err
    assert not list(tmp_path.glob("*.parts")) and json.loads(q.read_text())["id"] == "a"


@pytest.mark.slow
def test_expand_job_streams_skips_cached_and_resumes(tmp_path, fake_db, fake_cfg):
    from fanout.pipelines.precompute import run_expand

    from fanout.exec.runner import Runner
    from fanout.store.caches import Caches
    from fanout.store.db import Collection

    log = _jsonl(tmp_path / "log.jsonl", [{"id": f"q{i}", "query": f"query number {i % 700}"} for i in range(1000)]
                 + ["{broken"])
    with Runner(fake_cfg) as r:
        first = run_expand(log, fake_db, "t", fake_cfg, r, progress=False)
        again = run_expand(log, fake_db, "t", fake_cfg, r, progress=False)
    assert first["expanded"] + first["cached"] == 1000 and first["errors"] == 1
    assert first["expanded"] == 700  # a repeat comes batches after its first: read from the writer's commit
    assert again["expanded"] == 0 and again["cached"] == 1000
    keys = Caches(Collection(fake_db, "t"), "", "x").table("expansions")["key"].to_pylist()
    assert len(keys) == len(set(keys)) == 700
    assert not any((fake_db / ".jobs").iterdir())  # the job's staging folder is gone


def test_reader_dedupes_duplicates_an_old_version_left(fake_db):
    from fanout.store.caches import Caches, qvec_table
    from fanout.store.db import Collection

    c = Caches(Collection(fake_db, "t"), "m", "p")
    vecs = {("query", f"text {i}"): [float(i), 1.0] for i in range(50)}
    rows = qvec_table(c.vector_rows(vecs))
    c.col.db.create_table("t_cache_qvec", data=rows)
    c.col.table("t_cache_qvec").add(rows)  # every key twice, as an unlocked old writer could leave it
    assert len(c.get_vectors(list(vecs))) == 50  # none read as a miss
    assert c.commit("qvec", rows) == 0  # nothing new is inserted again


def test_two_concurrent_batch_jobs_leave_no_duplicate_cache_keys(tmp_path, fake_db):
    shared = [{"id": f"s{i}", "query": f"shared question {i}", "rephrased_query": f"shared rephrasing {i}"}
              for i in range(30)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for j in range(2):
        own = [{"id": f"o{j}-{i}", "query": f"own question {j} {i}"} for i in range(20)]
        q = _jsonl(tmp_path / f"q{j}.jsonl", shared + own)
        cmd = [sys.executable, "-m", "fanout.cli.main", "batch", str(q), "--out", str(tmp_path / f"o{j}.jsonl"),
               "--db", str(fake_db), "--collection", "t", "--config", "fake", "--runner", "inproc",
               "--slice", "5"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    import lancedb

    keys = lancedb.connect(str(fake_db)).open_table("t_cache_qvec").to_arrow()["key"].to_pylist()
    assert len(keys) == len(set(keys)) == 30 * 2 + 2 * 20  # shared texts once, each job's own once


def test_the_query_path_never_imports_lancedb(fake_db):
    """Searching (full text, vectors, titles, filters, the caches read and written) goes through Lance itself:
    a process that only answers queries (the CLI's search, a Ray Data retrieval actor, the batch driver) does
    not pay lancedb's import (fanout/store/db.py `Collection.db`). Run twice: the second pass reads what the first
    one's cache writer committed."""
    code = ("import sys, json; from fanout.config import load_config; from fanout.exec.runner import Runner; "
            "from fanout.pipelines.search import Searcher, SearchOptions; cfg = load_config('fake'); "
            "rows = [{'id': 'a', 'query': 'version history of a file', 'short_query': 'version history', "
            "'rephrased_query': 'restore an older copy of a note', 'expected_answer': 'File recovery keeps snapshots.'}, "
            "{'id': 'b', 'query': 'Wikilinks', 'filter': {'path': ['Linking/']}}]\n"
            "with Runner(cfg) as r:\n"
            "    s = Searcher(sys.argv[1], 't', cfg, r)\n"
            "    outs = [s.search(rows, SearchOptions(n=3)) for _ in range(2)]\n"
            "print(json.dumps(['lancedb' in sys.modules, [o.results.num_rows for o in outs], "
            "[o.errors.num_rows for o in outs], outs[1].stats.get('caches', {})]))")
    out = subprocess.run([sys.executable, "-c", code, str(fake_db)], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    imported, results, errors, _ = json.loads(out.stdout.strip().splitlines()[-1])
    assert imported is False, out.stderr
    assert results[0] == results[1] > 0 and errors == [0, 0], out.stdout + out.stderr
    import lance

    keys = lance.dataset(str(fake_db / "t_cache_qvec.lance")).to_table(columns=["key"])["key"].to_pylist()
    assert len(keys) == len(set(keys)) == 4  # a's query and two fields, b's query: written once, read back


def test_the_writer_appends_after_its_own_commit_and_merges_after_another_writers(fake_db):
    """`Caches.commit` appends (no per-key check in Lance) only while the table's latest version is its own
    last commit, leaving out keys it committed itself; after another writer's commit it merges again."""
    from fanout.store.caches import Caches, qvec_table
    from fanout.store.db import Collection

    def rows(c, lo, hi):
        return qvec_table(c.vector_rows({("query", f"text {i}"): [float(i), 1.0] for i in range(lo, hi)}))

    a, b = (Caches(Collection(fake_db, "t"), "m", "p") for _ in range(2))
    assert a.commit("qvec", rows(a, 0, 10), missed=True) == 10  # creates the table
    assert a.commit("qvec", rows(a, 5, 15), missed=True) == 5  # appended: 5..9 are its own keys
    assert b.commit("qvec", rows(b, 12, 20), missed=True) == 5  # another writer: merged (12..14 are there)
    assert a.commit("qvec", rows(a, 18, 25), missed=True) == 5  # after b's commit: merged (18, 19 are b's)
    # appended: 0..14 and 18..24 are a's own (15..17, b's, would have been hits of the workers' lookups)
    both = pa.concat_tables([rows(a, 0, 15), rows(a, 18, 30)])
    assert a.commit("qvec", both, missed=True) == 5
    assert a.commit("qvec", rows(a, 0, 30)) == 0  # not vouched for: merged, nothing new
    keys = a.table("qvec")["key"].to_pylist()
    assert len(keys) == len(set(keys)) == 30
    assert len(a.get_vectors([("query", f"text {i}") for i in range(30)])) == 30
