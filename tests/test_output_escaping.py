"""Output other programs read, from notes whose titles, headings, text and file names carry spreadsheet
formulas, terminal escape sequences (OSC 0/52, CSI, C1) and newlines: CSV cells neutralised and read back
exactly, terminal text escaped, JSON exact, null-separated paths exact, markdown and the gap report literal
text. Moved from tests/test_hostile_round4.py.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fanout.safe_text import CSV_FORMULA_START, csv_cell, csv_uncell, for_terminal, md_code
from tests.support import hostile_output
from tests.support.hostile_output import ESC_TITLE, LIVE, NOTES, run

hostile_db = hostile_output.hostile_db  # a fixture (tests/support/hostile_output.py)


def search_args(db: Path, *extra: str) -> list[str]:
    return ["search", "sync", "--db", str(db), "-c", "t", "--config", "fake", "--no-server", "-n", "20", *extra]


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


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


# -- 1. output that reaches a spreadsheet or a terminal ------------------------------------------------------
def test_safe_text_rules():
    for v in ("=1+1", "+1", "-1", "@x", "\tx", "\rx", "'=x", "''", "'''"):
        assert csv_cell(v)[0] == "'" and csv_uncell(csv_cell(v)) == v
    for v in ("ok", "'plain", "'", "", None, 3, -1.5):
        assert csv_cell(v) == v and csv_uncell(csv_cell(v)) == v
    assert for_terminal("a\x1b[2Jb\nc\x9b\u202e") == "a\\x1b[2Jb\\x0ac\\x9b\\u202e"
    assert for_terminal("l1\r\nl2\t\x07", keep_lines=True) == "l1\nl2\t\\x07"
    assert md_code("a`b``c") == "```a`b``c```" and md_code("`x") == "`` `x ``"


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
