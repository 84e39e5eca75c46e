"""fanout/store/rows_key.py: a key of a table version's rows that a process brings from the version it keyed
last by the rows changed, equal to the key a process computes from every row, and equal exactly for equal
multisets of values."""

from __future__ import annotations

import random

import lance
import pyarrow as pa

from fanout.store import rows_key as rk

COLS = ["path", "title", "aliases"]


def _rows(names: list[tuple[str, str, list[str]]]) -> pa.Table:
    return pa.table({"path": [n[0] for n in names], "title": [n[1] for n in names],
                     "aliases": pa.array([n[2] for n in names], pa.list_(pa.string())), "body": ["x"] * len(names)})


def _fresh_key(ds) -> str:
    saved = dict(rk._HELD)
    rk._HELD.clear()
    try:
        return rk.rows_key(ds, COLS, [["en", 3]])
    finally:
        rk._HELD.clear()
        rk._HELD.update(saved)


def test_a_key_brought_from_the_last_version_equals_one_from_every_row(tmp_path):
    rnd = random.Random(5)
    uri = str(tmp_path / "docs.lance")
    live = {f"n{i}.md": (f"N{i}", [f"a{i}"] if i % 3 == 0 else []) for i in range(60)}
    ds = lance.write_dataset(_rows([(p, *v) for p, v in live.items()]), uri)
    keys = {rk.rows_key(ds, COLS, [["en", 3]])}
    for step in range(25):
        what = rnd.choice(["edit body", "retitle", "add", "delete", "rewrite same"])
        path = rnd.choice(sorted(live))
        if what in ("edit body", "rewrite same", "retitle"):  # a round deletes a note's row and writes it again
            if what == "retitle":
                live[path] = (f"T{step}", live[path][1])
            ds.delete(f"path = '{path}'")
            ds = lance.write_dataset(_rows([(path, *live[path])]), uri, mode="append")
        elif what == "add":
            live[f"new{step}.md"] = (f"New {step}", [])
            ds = lance.write_dataset(_rows([(f"new{step}.md", f"New {step}", [])]), uri, mode="append")
        else:
            del live[path]
            ds.delete(f"path = '{path}'")
        ds = lance.dataset(uri)
        key = rk.rows_key(ds, COLS, [["en", 3]])
        assert key == _fresh_key(ds), (step, what)
        if what in ("edit body", "rewrite same"):
            assert key in keys, (step, what)  # the same values in other rows: the same key
        keys.add(key)


def test_the_key_follows_the_values_and_extra(tmp_path):
    a = lance.write_dataset(_rows([("a.md", "A", []), ("b.md", "B", ["bee"])]), str(tmp_path / "a.lance"))
    b = lance.write_dataset(_rows([("b.md", "B", ["bee"]), ("a.md", "A", [])]), str(tmp_path / "b.lance"))
    c = lance.write_dataset(_rows([("b.md", "B", ["wasp"]), ("a.md", "A", [])]), str(tmp_path / "c.lance"))
    ka, kb, kc = (rk.rows_key(d, COLS, [["en", 2]]) for d in (a, b, c))
    assert ka == kb != kc
    assert rk.rows_key(a, COLS, [["ru", 2]]) != ka


def test_tables_of_no_row_or_one(tmp_path):
    empty = lance.write_dataset(_rows([]), str(tmp_path / "e.lance"))
    one = lance.write_dataset(_rows([("a.md", "A", [])]), str(tmp_path / "o.lance"))
    assert rk.rows_key(empty, COLS, [["en", 3]]) == _fresh_key(empty) != _fresh_key(one)
    assert rk.rows_key(one, COLS, [["en", 3]]) == _fresh_key(one)
