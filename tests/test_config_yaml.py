"""Hostile YAML in notes' front matter and in `--config` files: alias bombs and deep nesting are skipped (a
note) or refused (a config) by name in bounded time and memory, never a recursion error; benign anchors still
load; one bad note never stops the rest. Moved from tests/test_hostile_round3.py.
"""

from __future__ import annotations

import pytest
from fanout.pipelines.scan_notes import scan_notes

from fanout.config.sections import IndexConfig
from tests.support.hostile_notes import GOOD, bounded
from tests.support.vault import write_vault


def _bomb(levels: int = 9, width: int = 9, key: str = "aliases") -> str:
    """A billion-laughs front matter of a few hundred bytes: `key` repeats width**levels strings."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    lines.append(f"{key}: *l{levels - 1}")
    return "---\n" + "\n".join(lines) + "\n---\n# Bomb\nA note whose front matter is an alias bomb.\n"


def _deep_flow(depth: int) -> str:
    return "---\nx: " + "[" * depth + "]" * depth + "\n---\nA note with deep front matter.\n"


def _deep_block(depth: int) -> str:
    return "---\n" + "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v\n---\nDeep block.\n"


def _medium_bomb(key: str) -> str:
    """Under front_matter_max_chars once expanded (10,000 values), over max_field_chars under `key`."""
    return ("---\na: &a [xy, xy, xy, xy, xy, xy, xy, xy, xy, xy]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
            f"{key}: *d\n---\nMedium bomb.\n")


# -- 1. front matter: alias bombs and deep nesting --------------------------------------------------------
def test_a_466_byte_alias_bomb_is_skipped_in_bounded_memory_and_the_rest_is_indexed(tmp_path):
    bomb = _bomb()
    assert len(bomb.encode()) < 600  # 9**9 = 387 million strings once expanded
    vault = write_vault(tmp_path / "v", {**GOOD, "bomb.md": bomb, "tags.md": _bomb(key="tags"),
                                   "desc.md": _bomb(key="description"), "lang.md": _bomb(key="lang"),
                                   "medium tags.md": _medium_bomb("tags"),
                                   "medium aliases.md": _medium_bomb("aliases"),
                                   "recursive.md": "---\na: &a [1, *a]\n---\nRecursive alias.\n"})
    notes, skipped = bounded(lambda: scan_notes(vault), 60, 100)
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    reasons = {s["path"]: (s["reason"], s["detail"]) for s in skipped.to_pylist()}
    for name in ("bomb.md", "tags.md", "desc.md", "lang.md"):
        assert reasons[name][0] == "bad_yaml" and "alias" in reasons[name][1] \
            and "index.front_matter_max_chars" in reasons[name][1]
    for name, field in (("medium tags.md", "tags"), ("medium aliases.md", "aliases")):
        assert reasons[name][0] == "bad_front_matter" and f"`{field}`" in reasons[name][1] \
            and "index.max_field_chars" in reasons[name][1]
    assert reasons["recursive.md"][0] == "bad_yaml" and "recursive" in reasons["recursive.md"][1]
    assert all(len(d) < 400 for _, d in reasons.values())


def test_benign_anchors_still_load(tmp_path):
    vault = write_vault(tmp_path / "v", {"a.md": "---\nbase: &b {status: done}\nmeta:\n  <<: *b\n  k: 1\n"
                                           "aliases: &al [One]\ntags: *al\n---\nBody.\n"})
    notes, skipped = scan_notes(vault)
    assert skipped.num_rows == 0 and notes["aliases"].to_pylist() == [["One"]]
    assert notes["tags"].to_pylist() == [["One"]]


def test_deep_front_matter_is_skipped_by_name_never_a_recursion_error(tmp_path):
    vault = write_vault(tmp_path / "v", {**GOOD, "flow.md": _deep_flow(500), "block.md": _deep_block(300)})
    assert len((vault / "flow.md").read_bytes()) < 1100
    notes, skipped = bounded(lambda: scan_notes(vault), 60)
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    reasons = {s["path"]: s for s in skipped.to_pylist()}
    for name in ("flow.md", "block.md"):
        assert reasons[name]["reason"] == "bad_yaml"
        assert "nested deeper than 32 levels" in reasons[name]["detail"]
    # a depth limit above what the interpreter can recurse: still one skipped note, never an abort
    deeper = IndexConfig(front_matter_max_depth=100_000)
    notes, skipped = bounded(lambda: scan_notes(write_vault(tmp_path / "v2", {**GOOD, "x.md": _deep_flow(5000)}),
                                                limits=deeper), 60)
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    assert skipped.to_pylist()[0]["path"] == "x.md" and skipped.to_pylist()[0]["reason"] == "bad_yaml"


def test_any_error_parsing_one_note_skips_only_that_note(tmp_path, monkeypatch):
    import fanout.pipelines.scan_notes as sn

    real = sn.prop_values

    def fragile(meta):  # a parser bug that only one note's front matter trips
        if "trip" in meta:
            raise TypeError("unexpected value")
        return real(meta)

    monkeypatch.setattr(sn, "prop_values", fragile)
    notes, skipped = scan_notes(write_vault(tmp_path / "v", {**GOOD, "trip.md": "---\ntrip: 1\n---\nx\n"}))
    assert sorted(notes["path"].to_pylist()) == sorted(GOOD)
    assert skipped.to_pylist() == [{"path": "trip.md", "reason": "bad_file", "detail": "cannot be parsed "
                                    "(TypeError: unexpected value); check its front matter"}]


def test_bad_lang_values_fall_back_to_the_detected_language(tmp_path, caplog):
    vault = write_vault(tmp_path / "v", {
        "a.md": "---\nlang: English\n---\nText.\n", "b.md": "---\nlang: ru-RU\n---\nText.\n",
        "c.md": "---\nlang: [" + ", ".join(["xx"] * 3000) + "]\n---\nPlain English text here.\n",
        "d.md": "---\nlang: klingon\n---\nPlain English text.\n", "e.md": "---\nlang: 5\n---\nText.\n"})
    notes, skipped = scan_notes(vault)
    assert skipped.num_rows == 0
    assert dict(zip(notes["path"].to_pylist(), notes["lang"].to_pylist())) == \
        {"a.md": "en", "b.md": "ru", "c.md": "en", "d.md": "en", "e.md": "en"}
    bad = [r.getMessage() for r in caplog.records if "`lang`" in r.getMessage()]
    assert len(bad) == 3 and all(len(m) < 300 for m in bad)


def test_an_index_with_hostile_notes_keeps_updating(tmp_path, fake_cfg, fake_runner, capsys):
    from fanout.pipelines.index import index_vault

    from fanout.cli.main import main
    from fanout.store.db import Collection

    cfg = fake_cfg.replace(chunk={"check_context": False})  # its tokenizer alone peaks at ~550 MB
    vault = write_vault(tmp_path / "v", GOOD)
    db = tmp_path / "db"
    index_vault(vault, db, "t", cfg, fake_runner)
    write_vault(vault, {"bomb.md": _bomb(), "deep.md": _deep_flow(500), "lang.md": _medium_bomb("lang"),
                  "new.md": "# New\nA new note after the bad ones.\n"})
    s = bounded(lambda: index_vault(vault, db, "t", cfg, fake_runner), 120, 100)
    assert {x["path"]: x["reason"] for x in s.skipped} == {"bomb.md": "bad_yaml", "deep.md": "bad_yaml"}
    col = Collection(db, "t")
    paths = set(col.table(col.documents_name).to_arrow()["path"].to_pylist())
    assert paths == set(GOOD) | {"new.md", "lang.md"}
    capsys.readouterr()
    assert main(["status", "--db", str(db), "-c", "t", "--config", "fake"]) == 0
    out = capsys.readouterr().out
    assert "lang.md" not in out and len(out) < 2000  # a `lang` bomb never reaches the output


def test_a_config_bomb_or_deep_config_is_one_short_line_naming_the_file(tmp_path, capsys):
    from fanout.cli.main import main
    from fanout.config import ConfigError, load_config

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb(key="index").split("---\n")[1].replace("index: *l8", "chunk:\n  max_tokens: *l8"))
    deep = tmp_path / "deep.yaml"
    deep.write_text("chunk:\n  max_tokens: " + "[" * 400 + "]" * 400 + "\n")
    mid = tmp_path / "mid.yaml"  # small enough to load: the error quotes the value, cut short
    mid.write_text("chunk:\n  max_tokens: [" + ", ".join(["abcdefgh"] * 2000) + "]\n")
    for path, match in ((bomb, "aliases"), (deep, "nested deeper"), (mid, "must be a number")):
        with pytest.raises(ConfigError, match=match) as e:
            bounded(lambda p=path: load_config(str(p)), 30, 100)
        assert str(path) in str(e.value) and len(str(e.value)) <= 1100
        assert main(["status", "--db", str(tmp_path / "db"), "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err
