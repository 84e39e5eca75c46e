"""`fanout gaps --previous`: a question whose best page in an earlier answers file is no longer in the index is
flagged `lost`, whatever it scores now (the night-over-night comparison that finds removed pages; scores alone
do not, README "Gaps"). Fake profile, the small vault of tests/test_gaps.py."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.gaps import LOG, index_vault_and_log


def test_questions_whose_page_was_removed_are_lost_the_rest_are_not(tmp_path, capsys):
    from fanout.cli.main import main

    vault, db, log, common = index_vault_and_log(tmp_path)
    assert main(["batch", str(log), "--out", str(tmp_path / "before.parquet"), *common, "-n", "3"]) == 3
    before = pq.read_table(tmp_path / "before.parquet").to_pylist()
    top = {}
    for r in before:
        if r["path"] is not None and (r["qid"] not in top or r["score"] > top[r["qid"]][0]):
            top[r["qid"]] = (r["score"], r["path"])
    removed = "Editing/Hotkeys.md"
    assert top["a4"][1] == removed  # "assign hotkeys to commands" was answered by it
    (vault / removed).unlink()
    assert main(["index", str(vault), *common]) == 0
    assert main(["batch", str(log), "--out", str(tmp_path / "after.parquet"), *common, "-n", "3"]) == 3
    capsys.readouterr()

    out = tmp_path / "report"
    assert main(["gaps", str(tmp_path / "after.parquet"), "--previous", str(tmp_path / "before.parquet"),
                 "--db", str(db), "-c", "kb", "--config", "fake", "--out", str(out)]) == 0
    rows = {r["qid"]: r for r in pq.read_table(out / "flagged.parquet").to_pylist()}
    expected = {q for q, (score, path) in top.items() if path == removed and score >= 0.83}
    assert {q for q, r in rows.items() if r["band"] == "lost"} == expected and "a4" in expected
    assert not [q for q in rows if q.startswith("a") and q not in expected]  # the other answers stay answered
    assert {q for q in rows if q.startswith("u")} == {r["id"] for r in LOG if r["id"].startswith("u")}
    groups = pq.read_table(out / "groups.parquet").to_pylist()
    assert sum(g["lost"] for g in groups) == len(expected)
    assert any(g["band"] == "lost" for g in groups)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert f"lost its page (its best page in the previous answers is no longer in the index: {removed})" in md
    assert f"{len(expected)} lost their page" in capsys.readouterr().out
    assert "lost" in (out / "report.html").read_text(encoding="utf-8")

    # a previous file of another collection is refused, naming the file and the fix
    other = tmp_path / "other.parquet"
    t = pq.read_table(tmp_path / "before.parquet")
    stamp = t["index"][0].as_py()
    pq.write_table(t.set_column(t.column_names.index("index"), "index",
                                pa.array([stamp.replace("kb@", "notes@")] * t.num_rows)), other)
    assert main(["gaps", str(tmp_path / "after.parquet"), "--previous", str(other),
                 "--db", str(db), "-c", "kb", "--config", "fake", "--out", str(tmp_path / "r2")]) == 2
    assert "--previous" in (err := capsys.readouterr().err) and "answered from collection 'notes', not 'kb'" in err
