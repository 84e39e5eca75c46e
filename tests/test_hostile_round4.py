"""Hostile input, round 4 (issue 42): output other programs read, one bad row, the gap report's inputs,
concurrent index runs, smaller edges.

Every test writes its hostile input itself: notes whose titles, headings, text and file names carry
spreadsheet formulas, terminal escape sequences (OSC 0/52, CSI, C1) and newlines; query rows nested
thousands of levels deep or holding lone surrogate escapes; answers files with scores that are not numbers,
ranks past int32 and bytes that are not UTF-8; markdown/HTML in query text and backticks in paths; two index
runs on one collection; symlink loops and hard links. The fake model profile (configs/fake.yaml) stands in
for the models; one test (marked `ray`) starts a private local Ray.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fanout.safe_text import CSV_FORMULA_START, csv_cell, csv_uncell, for_terminal, md_code

REPO = Path(__file__).resolve().parents[1]
ESC_TITLE = "Title \x1b]0;pwned\x07 and \x1b]52;c;ZXZpbA==\x07 clip"  # OSC 0 (window title), OSC 52 (clipboard)
NOTES = {
    "a.md": '# =HYPERLINK("http://evil.example/?x","click")\nsync your devices with the formula note.\n',
    "-2+3.md": "# -2+3\nsync by a note whose name is a formula.\n",
    "@SUM(1+1).md": "# @SUM(1+1)\nsync notes named like a spreadsheet function.\n",
    "+cmd.md": "# +cmd|' /C calc'!A0\nsync with a DDE payload in the heading.\n",
    "esc.md": f"# {ESC_TITLE}\n\x1b[2J\x1b[H sync clears the screen \x9b31m (C1 CSI) \u202eevil\u202c\n",
    "c\nforged.md": "# Forged\nsync from a file whose name holds a newline.\n",
    "tab\there.md": "# Tab\nsync from a file whose name holds a tab.\n",
}
# what may reach a terminal: no C0 control but tab and newline, no DEL, no C1, no bidi override
LIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def write(root: Path, notes: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in notes.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    tmp = tmp_path_factory.mktemp("r4")
    vault = write(tmp / "vault", NOTES)
    db = tmp / "db"
    s = index_vault(vault, db, "t", fake_cfg, fake_runner)
    assert s.notes == len(NOTES) and not s.skipped
    return vault, db


def run(capsys, *argv: str) -> tuple[int, str, str]:
    from fanout.cli.main import main

    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def search_args(db: Path, *extra: str) -> list[str]:
    return ["search", "sync", "--db", str(db), "-c", "t", "--config", "fake", "--no-server", "-n", "20", *extra]


# -- 1. output that reaches a spreadsheet or a terminal ------------------------------------------------------
def test_safe_text_rules():
    for v in ("=1+1", "+1", "-1", "@x", "\tx", "\rx", "'=x", "''", "'''"):
        assert csv_cell(v)[0] == "'" and csv_uncell(csv_cell(v)) == v
    for v in ("ok", "'plain", "'", "", None, 3, -1.5):
        assert csv_cell(v) == v and csv_uncell(csv_cell(v)) == v
    assert for_terminal("a\x1b[2Jb\nc\x9b\u202e") == "a\\x1b[2Jb\\x0ac\\x9b\\u202e"
    assert for_terminal("l1\r\nl2\t\x07", keep_lines=True) == "l1\nl2\t\\x07"
    assert md_code("a`b``c") == "```a`b``c```" and md_code("`x") == "`` `x ``"


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_csv_output_neutralises_formula_cells_and_reads_back_exactly(hostile_db, capsys, tmp_path):
    """`query/search --csv` and `fanout batch --out x.csv`: no cell starts with = + - @ tab or CR (OWASP);
    `fanout gaps` reads the batch CSV back to the same values as the parquet output."""
    from fanout.gaps.read import ReadStats, read_answers

    _, db = hostile_db
    rc, out, _ = run(capsys, *search_args(db, "--csv"))
    assert rc == 0
    rows = _cells(out)
    rc, js, _ = run(capsys, *search_args(db, "--json"))
    exact = json.loads(js)
    assert len(rows) == len(exact) + 1 and len(exact) == len(NOTES)
    for row in rows[1:]:
        assert all(not c or c[0] not in CSV_FORMULA_START for c in row), row
    head = rows[0]
    assert [csv_uncell(r[head.index("path")]) for r in rows[1:]] == [r["path"] for r in exact]
    assert [csv_uncell(r[head.index("title")]) for r in rows[1:]] == [r["title"] for r in exact]

    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"id": i, "query": t}) + "\n" for i, t in
                         (("=1", "=HYPERLINK(\"x\") sync"), ("-2", "-sync devices"), ("@3", "@sync notes"))))
    got = {}
    for ext in ("csv", "parquet"):
        out_file = tmp_path / f"answers.{ext}"
        rc, _, _ = run(capsys, "batch", str(q), "--out", str(out_file), "--db", str(db), "-c", "t", "--config",
                       "fake", "--runner", "inproc")
        assert rc == 0
        if ext == "csv":
            for row in _cells(out_file.read_text(encoding="utf-8"))[1:]:
                assert all(not c or c[0] not in CSV_FORMULA_START for c in row), row
        got[ext] = pa.concat_tables(read_answers(str(out_file), stats=ReadStats())).to_pylist()
    assert got["csv"] == got["parquet"] and {r["qid"] for r in got["csv"]} == {"=1", "-2", "@3"}


def test_terminal_output_escapes_control_characters_and_json_stays_exact(hostile_db, capsys):
    _, db = hostile_db
    for extra in ((), ("--md",), ("--files",), ("--explain",), ("--full",), ("--line-numbers",)):
        rc, out, _ = run(capsys, *search_args(db, *extra))
        assert rc == 0 and not LIVE.search(out), (extra, out)
    rc, out, _ = run(capsys, *search_args(db, "--files"))
    assert len(out.splitlines()) == len(NOTES)  # a newline in a name forges no line
    assert "c\\x0aforged.md" in out.splitlines()
    rc, js, _ = run(capsys, *search_args(db, "--json"))
    by_path = {r["path"]: r for r in json.loads(js)}
    assert by_path["esc.md"]["title"] == ESC_TITLE and "c\nforged.md" in by_path  # JSON exact
    for argv in (["ls"], ["get", "esc.md"], ["multi-get", "*.md"], ["status"]):
        rc, out, err = run(capsys, *argv, "--db", str(db), "-c", "t", "--config", "fake")
        assert rc == 0 and not LIVE.search(out + err), (argv, out)
    rc, out, _ = run(capsys, "ls", "--db", str(db), "-c", "t", "--config", "fake")
    assert len(out.splitlines()) == len(NOTES) and all(len(ln.split("\t")) == 4 for ln in out.splitlines())
    rc, out, _ = run(capsys, "collection", "list", "--db", str(db), "--config", "fake")
    assert rc == 0 and not LIVE.search(out)


def test_null_separated_paths_are_exact(hostile_db, capsys):
    _, db = hostile_db
    rc, out, _ = run(capsys, *search_args(db, "--null"))
    assert rc == 0 and out.endswith("\0")
    assert sorted(out.split("\0")[:-1]) == sorted(NOTES)
    rc, out, _ = run(capsys, *search_args(db, "--files", "--null"))
    assert sorted(out.split("\0")[:-1]) == sorted(NOTES)
    rc, _, err = run(capsys, *search_args(db, "--json", "--null"))
    assert rc == 2 and "does not go with --json" in err
    rc, out, _ = run(capsys, "ls", "-0", "--db", str(db), "-c", "t", "--config", "fake")
    assert rc == 0 and out.split("\0")[:-1] == sorted(NOTES)


def test_md_output_is_literal_text(hostile_db, capsys):
    _, db = hostile_db
    rc, out, _ = run(capsys, *search_args(db, "--md"))
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) == 2 + len(NOTES)
    assert all(_unescaped(ln, "|") == 6 for ln in lines)  # 5 cells: no name or snippet adds one


# -- 3. one bad row ---------------------------------------------------------------------------------------------
def _bad_rows_file(path: Path) -> None:
    lines = [json.dumps({"id": "ok1", "query": "sync your devices"}),
             '{"id": "deep", "query": "x", "filter": ' + "[" * 50_000 + "]" * 50_000 + "}",
             '{"id": "sur", "query": "lone \\ud800 surrogate"}',
             '{"id": "\\udfff", "query": "a lone surrogate in the id"}',
             "[" * 5000 + "]" * 5000,
             json.dumps({"id": "ok2", "query": "spreadsheet function"})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_deep_or_surrogate_row_is_one_error_row_in_batch_and_expand(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    q = tmp_path / "bad.jsonl"
    _bad_rows_file(q)
    out = tmp_path / "out.jsonl"
    rc, stdout, err = run(capsys, "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t", "--config",
                          "fake", "--runner", "inproc")
    assert rc == 3, err
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["ok1", "line-2", "sur", "line-4", "line-5", "ok2"]
    by = {r["id"]: r for r in rows}
    assert by["ok1"]["results"] and by["ok2"]["results"] and "error" not in by["ok1"]
    assert "line 2 is nested deeper" in by["line-2"]["error"] and "line 5 is nested" in by["line-5"]["error"]
    assert "line 3 holds a lone surrogate escape (\\ud800" in by["sur"]["error"]
    assert "line 4 holds a lone surrogate escape (\\udfff" in by["line-4"]["error"]
    rc, stdout, err = run(capsys, "expand", str(q), "--db", str(db), "-c", "t", "--config", "fake",
                          "--runner", "inproc")
    assert rc == 3 and "6 queries" in stdout and "4 bad rows" in stdout, (stdout, err)


def test_a_json_array_with_a_surrogate_row_answers_the_others(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    q = tmp_path / "q.json"
    q.write_text('[{"id": "a", "query": "sync"}, {"id": "b", "query": "\\udc00"}, {"id": "c", "query": "tab"}]')
    out = tmp_path / "out.jsonl"
    assert run(capsys, "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t", "--config", "fake",
               "--runner", "inproc")[0] == 3
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [bool(r.get("error")) for r in rows] == [False, True, False] and "row 2 of the array" in rows[1]["error"]


def test_a_number_in_a_query_field_is_an_error_row_in_jsonl_and_parquet_alike(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    got = {}
    for ext in ("jsonl", "parquet"):
        q = tmp_path / f"q.{ext}"
        if ext == "jsonl":
            q.write_text(json.dumps({"id": 1, "query": 2024}) + "\n" + json.dumps({"id": 2, "query": "sync"}) + "\n")
        else:
            pq.write_table(pa.table({"id": [1, 2], "query": ["2024", "sync"]}).set_column(
                1, "query", pa.array([2024, None], pa.int64())), q)
        out = tmp_path / f"out-{ext}.jsonl"
        run(capsys, "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t", "--config", "fake",
            "--runner", "inproc")
        got[ext] = [json.loads(x) for x in out.read_text().splitlines()]
    assert got["jsonl"][0]["id"] == got["parquet"][0]["id"] == "1"
    assert got["jsonl"][0]["field"] == got["parquet"][0]["field"] == "query"
    assert got["jsonl"][0]["error"] == got["parquet"][0]["error"] == "row 1: `query` must be a string, got int '2024'"


# -- 4. the gap report --------------------------------------------------------------------------------------------
HOSTILE_QUERIES = ["<script>alert(1)</script> billing refund", "![x](http://evil.example/track.png) invoice",
                   "<img src=x onerror=alert(1)> payment", "[click](javascript:alert(1)) refund invoice",
                   "a `code` span | pipe \\[escaped\\] & &lt;b&gt; # heading"]
BAD_PATH = "we`ird`` <b>|path.md"


def _answers(stamp: str, path: Path, fmt: str) -> None:
    rows = []
    for i, q in enumerate(HOSTILE_QUERIES):
        rows.append({"qid": f"h{i}", "rank": 1, "path": BAD_PATH, "title": "<script>t</script>", "heading": None,
                     "snippet": "x", "score": 0.2, "field": None, "error": None, "query": q, "index": stamp})
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps({"id": r["qid"], "query": r["query"], "index": stamp,
                                            "results": [{k: r[k] for k in ("rank", "path", "title", "score")}]})
                                + "\n" for r in rows))


def _outside_code(line: str) -> tuple[str, list[str]]:
    """(the line without its code spans, the code spans' contents), by CommonMark's backtick rule."""
    text, spans, i = [], [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            text.append(line[i:i + 2])
            i += 2
            continue
        if line[i] == "`":
            n = len(re.match(r"`+", line[i:]).group())
            m = re.compile(rf"(?<!`){'`' * n}(?!`)").search(line, i + n)
            if m:
                body = line[i + n:m.start()]
                spans.append(body[1:-1] if body.startswith(" ") and body.endswith(" ") and body.strip() else body)
                i = m.end()
                continue
            text.append(line[i:i + n])
            i += n
            continue
        text.append(line[i])
        i += 1
    return "".join(text), spans


def _unescaped(text: str, ch: str) -> int:
    return len(re.findall(rf"(?<!\\)(?:\\\\)*{re.escape(ch)}", text))


def test_report_md_is_literal_text_and_paths_stay_in_their_code_spans(hostile_db, capsys, tmp_path):
    from fanout.store.db import Collection, index_stamp

    _, db = hostile_db
    stamp = index_stamp("t", Collection(str(db), "t").require())
    answers = tmp_path / "answers.parquet"
    _answers(stamp, answers, "parquet")
    out = tmp_path / "report"
    rc, _, err = run(capsys, "gaps", str(answers), "--db", str(db), "-c", "t", "--config", "fake", "--out", str(out))
    assert rc == 0, err
    md = (out / "report.md").read_text(encoding="utf-8")
    table = [ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert table, md
    spans = []
    for ln in md.splitlines():
        text, sp = _outside_code(ln.replace("<br>", " "))
        spans += sp
        assert not re.search(r"(?<!\\)<[A-Za-z/!?]", text), ln  # no HTML tag or autolink starts
        for ch in ("[", "]", "!", "`"):  # no link, image or stray code span outside code spans
            assert _unescaped(text, ch) == 0, (ch, ln)
    for ln in table:
        assert _unescaped(ln, "|") == 9, ln  # eight cells: no query or path adds one
    assert BAD_PATH.replace("|", "\\|") in spans  # the backtick path is one whole code span
    assert "onerror" in md and "javascript:" in md  # the text is still there, as text
    html_page = (out / "report.html").read_text(encoding="utf-8")
    assert "<script>alert" not in html_page and "<img src=x" not in html_page


def test_answers_with_bad_scores_ranks_or_utf8_are_counted_per_row(hostile_db, capsys, tmp_path, caplog):
    from fanout.store.db import Collection, index_stamp

    _, db = hostile_db
    stamp = index_stamp("t", Collection(str(db), "t").require())
    good = {"qid": "g", "rank": 1, "path": "a.md", "title": "a", "score": 0.95, "query": "sync", "index": stamp}
    t = pa.table({"qid": ["g", "b1", "b2"], "rank": pa.array([1, 2**40, 1], pa.int64()), "path": ["a.md"] * 3,
                  "title": ["a"] * 3, "score": ["0.95", "0.5", "high"], "query": ["sync", "x y", "z w"],
                  "index": [stamp] * 3})
    pq.write_table(t, tmp_path / "bad.parquet")
    csv_bytes = (",".join(good) + "\n" + ",".join(str(v) for v in good.values()) + "\n").encode() + \
        b"b3,1,a.md,a,0.1,\xff\xfe not UTF-8," + stamp.encode() + b"\n" + \
        f"b4,1,a.md,a,0.2,fine query,{stamp}\n".encode()
    (tmp_path / "bad.csv").write_bytes(csv_bytes)
    for name, bad in (("bad.parquet", 2), ("bad.csv", 1)):
        caplog.clear()
        rc, stdout, err = run(capsys, "gaps", str(tmp_path / name), "--db", str(db), "-c", "t", "--config", "fake",
                              "--out", str(tmp_path / f"rep-{name}"))
        assert rc == 0, err
        assert f"{bad} unreadable lines" in stdout, stdout
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert name in logged and "column `" in logged, logged


def test_gaps_out_naming_a_file_is_one_line(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    f = tmp_path / "exists.txt"
    f.write_text("keep me")
    rc, _, err = run(capsys, "gaps", str(tmp_path / "whatever.jsonl"), "--db", str(db), "-c", "t", "--config",
                     "fake", "--out", str(f))
    assert rc == 2 and "is a file" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f.read_text() == "keep me"


def test_optimize_between_batch_and_gaps_keeps_the_answers_current(tmp_path, capsys, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    vault = write(tmp_path / "v", {"a.md": "# A\nsync devices\n", "b.md": "# B\nthemes and colors\n"})
    db = tmp_path / "db"
    index_vault(vault, db, "t", fake_cfg, fake_runner)
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "1", "query": "billing invoice"}) + "\n")
    answers = tmp_path / "answers.jsonl"
    common = ["--db", str(db), "-c", "t", "--config", "fake"]
    assert run(capsys, "batch", str(q), "--out", str(answers), *common, "--runner", "inproc")[0] == 0
    assert run(capsys, "optimize", *common, "--keep-days", "0")[0] == 0
    rc, _, err = run(capsys, "gaps", str(answers), *common, "--out", str(tmp_path / "g1"))
    assert rc == 0, err
    index_vault(vault, db, "t", fake_cfg, fake_runner)  # nothing changed: still current
    assert run(capsys, "gaps", str(answers), *common, "--out", str(tmp_path / "g2"))[0] == 0
    (vault / "c.md").write_text("# C\nbilling\n")
    index_vault(vault, db, "t", fake_cfg, fake_runner)  # a note changed: the answers are stale
    rc, _, err = run(capsys, "gaps", str(answers), *common, "--out", str(tmp_path / "g3"))
    assert rc == 2 and "re-indexed or rebuilt since" in err


# -- 5. two index runs on one collection ------------------------------------------------------------------------
def test_a_second_index_run_says_who_holds_the_collection(tmp_path, capsys, fake_cfg):
    from fanout.store.locks import collection_lock, lock_path

    vault = write(tmp_path / "v", {"a.md": "# A\nsync\n"})
    db = tmp_path / "db"
    with collection_lock(db, "t", "fanout index elsewhere -c t"):
        rc, _, err = run(capsys, "index", str(vault), "--db", str(db), "-c", "t", "--config", "fake")
    lines = [ln for ln in err.splitlines() if ln.startswith("fanout:")]
    assert rc == 2 and len(lines) == 1 and "is being written by `fanout index elsewhere -c t`" in lines[0]
    assert f"pid {os.getpid()}" in lines[0] and "run `fanout index" in lines[0]
    assert not list(db.glob("*.lance"))  # nothing was written
    rc, _, err = run(capsys, "index", str(vault), "--db", str(db), "-c", "t", "--config", "fake")
    assert rc == 0, err  # the lock went with its holder
    assert oct(os.stat(lock_path(db, "t")).st_mode & 0o777) == "0o600"
    assert lock_path("s3://bucket/db", "t") is None  # object stores: no lock (README: one writer)


def test_two_concurrent_index_runs_one_line_and_a_consistent_index(tmp_path):
    from fanout.store.db import Collection

    notes = {f"n{i:03d}.md": f"# Note {i}\n" + f"sync words {i} " * 40 + "\n" for i in range(150)}
    vault = write(tmp_path / "v", notes)
    db = tmp_path / "db"
    cmd = [sys.executable, "-m", "fanout.cli.main", "index", str(vault), "--db", str(db), "-c", "t", "--config", "fake"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for _ in range(2)]
    res = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for rc, err in res:
        assert rc in (0, 2), err
        assert "Traceback" not in err and "conflict" not in err.lower() and ".rs" not in err
        if rc == 2:
            assert len([ln for ln in err.splitlines() if ln.startswith("fanout:")]) == 1
            assert "is being written by" in err
    assert 0 in [rc for rc, _ in res]
    col = Collection(str(db), "t")
    col.refresh()
    paths = col.table(col.documents_name).to_arrow()["path"].to_pylist()
    assert sorted(paths) == sorted(notes)


# -- 6. smaller ---------------------------------------------------------------------------------------------------
def test_a_hard_link_to_a_file_outside_is_a_vault_file(tmp_path):
    """Decision (README "Threat model"): a hard link is a name inside the vault; its file is indexed."""
    from fanout.io.vault import list_notes

    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\nsomething outside\n")
    vault = write(tmp_path / "v", {"a.md": "# A\n"})
    os.link(outside, vault / "hard.md")
    listing = list_notes(vault)
    assert [f[0] for f in listing.files] == ["a.md", "hard.md"] and not listing.skipped


def test_a_symlink_loop_is_reported_as_a_loop(tmp_path):
    from fanout.io.vault import list_notes

    vault = write(tmp_path / "v", {"a.md": "# A\n"})
    os.symlink("self.md", vault / "self.md")
    os.symlink("loop2.md", vault / "loop1.md")
    os.symlink("loop1.md", vault / "loop2.md")
    os.symlink("missing.md", vault / "gone.md")
    reasons = {s["path"]: s["reason"] for s in list_notes(vault).skipped}
    assert reasons == {"self.md": "link_loop", "loop1.md": "link_loop", "loop2.md": "link_loop",
                       "gone.md": "broken_link"}


def test_collection_name_messages_agree_on_the_limit():
    from fanout.api.requests import parse_search_request as check_request
    from fanout.errors import RequestError
    from fanout.store.db import check_collection_name

    check_collection_name("x" * 100)
    check_request({"query": "q", "collections": ["x" * 100]}, 10)
    with pytest.raises(ValueError) as a:
        check_collection_name("x" * 101)
    with pytest.raises(RequestError) as b:
        check_request({"query": "q", "collections": ["x" * 101]}, 10)
    for e in (a.value, b.value):
        assert "at most 100 characters" in str(e) and "128" not in str(e)


def test_ls_get_and_collection_take_config(hostile_db, capsys, tmp_path):
    vault, db = hostile_db
    for argv in (["ls"], ["get", "a.md"], ["multi-get", "a.md"]):
        assert run(capsys, *argv, "--db", str(db), "-c", "t", "--config", "fake")[0] == 0, argv
    assert run(capsys, "collection", "list", "--db", str(db), "--config", "fake")[0] == 0
    other = tmp_path / "db2"
    assert run(capsys, "collection", "add", "x", str(vault), "--db", str(other), "--config", "fake")[0] == 0
    rc, out, _ = run(capsys, "collection", "remove", "x", "--db", str(other), "--config", "fake")
    assert rc == 0 and "removed x_chunks" in out


@pytest.mark.ray
def test_sigterm_on_a_ray_batch_exits_143_without_a_stack_dump(hostile_db, tmp_path):
    _, db = hostile_db
    q = tmp_path / "many.jsonl"
    q.write_text("".join(json.dumps({"id": f"q{i}", "query": f"sync note {i}"}) + "\n" for i in range(30000)))
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "fanout.cli.main", "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t",
           "--config", "fake", "--runner", "ray", "--slice", "50"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    results = Path(str(out) + ".parts") / "results"
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None and not (results.exists() and any(results.iterdir())):
        time.sleep(0.5)
    assert p.poll() is None, p.communicate()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err[-2000:]
    assert "SIGTERM received" not in err and "PC: @" not in err, err[-2000:]
    assert results.exists() and not out.exists()  # finished parts kept: the same command resumes


def test_analyze_reads_fanout_csv_back_exactly_and_writes_safe_csv(hostile_db, capsys, tmp_path):
    _, db = hostile_db
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "=1", "query": "=HYPERLINK(\"x\") sync"}) + "\n")
    out = tmp_path / "a.csv"
    assert run(capsys, "batch", str(q), "--out", str(out), "--db", str(db), "-c", "t", "--config", "fake",
               "--runner", "inproc")[0] == 0
    sql = "select distinct qid, query from results"
    rc, text, _ = run(capsys, "analyze", str(out), "--sql", sql)
    assert rc == 0 and "=HYPERLINK" in text and "'=HYPERLINK" not in text and not LIVE.search(text)
    rc, text, _ = run(capsys, "analyze", str(out), "--sql", sql, "--csv")
    assert _cells(text)[1] == ["'=1", "'=HYPERLINK(\"x\") sync"]


def test_index_skip_lines_escape_control_characters(tmp_path, capsys):
    vault = write(tmp_path / "v", {"ok.md": "# Ok\nfine\n", "bad\x1b]0;x\x07.md": "---\ntitle: \"\x1b[2J\"\n---\n# B\n"})
    rc, out, err = run(capsys, "index", str(vault), "--db", str(tmp_path / "db"), "-c", "t", "--config", "fake")
    assert rc == 3 and "skipped bad\\x1b]0;x\\x07.md: bad_yaml" in err and not LIVE.search(out + err), err
