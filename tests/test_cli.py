"""The everyday CLI on the tiny index: parser checks, search/vsearch/query outputs, get/multi-get, status, ls,
collections, several collections at once. In-process (main(argv)), the real embedder, no expansion."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from fanout.cli.main import build_parser, main


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_db) -> Path:
    """A private copy of the tiny index (queries write caches) plus a no-expansion config."""
    root = tmp_path_factory.mktemp("cli")
    shutil.copytree(tiny_db, root / "db")
    (root / "noexpand.yaml").write_text("extends: local\nexpand:\n  enabled: false\n", encoding="utf-8")
    return root / "db"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def q(db: Path, *argv: str) -> list[str]:
    return [*argv, "--db", str(db), "-c", "t", "--config", str(db.parent / "noexpand.yaml"), "--no-server"]


# -- the parser ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "match"), [
    (["query", "x", "-n", "0"], "argument -n: must be >= 1, got 0"),
    (["query", "x", "-n", "-1"], "argument -n: must be >= 1, got -1"),
    (["search", "x", "-n", "many"], "must be a whole number"),
    (["query", "x", "--min-score", "2"], "must be from 0 to 1"),
    (["query", "x", "--json", "--csv"], "not allowed with argument --json"),
    (["vsearch", "x", "--files", "--md"], "not allowed with argument --files"),
])
def test_nonsense_flags_are_rejected_with_what_is_allowed(capsys, argv, match):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and match in capsys.readouterr().err


def _walk(p: argparse.ArgumentParser, name: str = "fanout"):
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub_name, sub in a.choices.items():
                yield from _walk(sub, f"{name} {sub_name}")
        else:
            yield name, a


def test_every_flag_has_help_and_models_has_real_subcommands(capsys):
    missing = [f"{cmd} {a.option_strings or a.dest}" for cmd, a in _walk(build_parser())
               if a.help is None and not isinstance(a, argparse._HelpAction)]
    assert not missing, missing
    with pytest.raises(SystemExit):
        main(["models", "--help"])
    out = capsys.readouterr().out
    assert all(w in out for w in ("install", "list", "path")) and "rest" not in out
    with pytest.raises(SystemExit):
        main(["query", "--help"])
    assert "(default: 10)" in capsys.readouterr().out


def test_no_face_imports_the_cli():
    """cli.py dispatches to the other faces (lazily); none of them imports cli.py back (shared bits live in
    fanout/cli/startup.py), so there is no cycle."""
    import ast

    faces = Path(__file__).resolve().parents[1] / "faces"
    for me, other in [(f.stem, "cli") for f in faces.glob("*.py") if f.stem != "cli"]:
        tree = ast.parse((faces / f"{me}.py").read_text(encoding="utf-8"))
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert f"faces.{other}" not in mods, f"faces/{me}.py imports faces.{other}"


# -- search, vsearch, query -----------------------------------------------------------------------------------


def test_search_is_full_text_only_and_vsearch_vectors_only(capsys, db):
    code, out, _ = run(capsys, *q(db, "search", "syntax highlighting", "--json", "--explain"))
    res = json.loads(out)
    assert code == 0 and res[0]["path"] == "Editing/Code blocks.md"
    assert {li["lane"] for r in res for li in r["explain"]["lists"]} == {"fts"}
    code, out, _ = run(capsys, *q(db, "vsearch", "make pancakes with milk and eggs", "--json", "--explain"))
    res = json.loads(out)
    assert res[0]["path"] == "Рецепты/Блины.md"
    assert {li["lane"] for r in res for li in r["explain"]["lists"]} == {"vec"}


def test_query_outputs(capsys, db):
    argv = q(db, "query", "keep devices in step", "--short-query", "Version history", "-n", "3")
    code, out, _ = run(capsys, *argv, "--files")
    assert code == 0 and out.splitlines()[0] == "Sync/Sync your notes.md" and len(out.splitlines()) <= 3
    # readable explain in text output: one line per list, with lane, variant kind and text, rank, score
    _, out, _ = run(capsys, *argv, "--explain")
    assert 'fts   lex   "Version history"' in out and "rank 1" in out and "fused rank 1" in out
    _, out, _ = run(capsys, *argv, "--md", "--explain")
    query, blank, head, _, first = out.splitlines()[:5]  # the query line (query, probe) above the table
    assert query.startswith('query "keep devices in step" | BM25 probe: top ') and blank == ""
    assert head == "| # | score | page | heading | snippet | why |" and "Sync/Sync your notes.md" in first
    assert 'fts/lex "Version history"' in first
    _, out, _ = run(capsys, *argv, "--csv", "--explain")
    assert out.splitlines()[0] == "rank,path,title,heading,snippet,score,query,probe,explain"
    _, out, _ = run(capsys, *argv, "--line-numbers", "--files")
    path, _, line = out.splitlines()[0].rpartition(":")
    assert path == "Sync/Sync your notes.md" and int(line) > 5  # after the front matter
    _, out, _ = run(capsys, *argv, "--full", "--json")
    top = json.loads(out)[0]
    assert top["section"]["text"].strip() and top["section"]["text"] in Path(
        json.loads((db / "t.manifest.json").read_text())["vault"], top["path"]).read_text(encoding="utf-8")
    _, out, _ = run(capsys, *q(db, "query", "keep devices in step", "--min-score", "0.5", "--json"))
    assert all(r["score"] >= 0.5 for r in json.loads(out))
    code, out, _ = run(capsys, *q(db, "search", "zzzqqq", "--min-score", "0.2"))
    assert code == 0 and "no page matched with score >= 0.2" in out


def test_a_bad_query_exits_2_with_the_reason(capsys, db):
    code, _, err = run(capsys, *q(db, "query", "   "))
    assert code == 2 and "query" in err
    code, _, err = run(capsys, "search", "x", "--db", str(db), "-c", "nope", "--no-server")
    assert code == 2 and "no index 'nope'" in err and "Traceback" not in err


# -- get / multi-get ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["Sync/Sync your notes.md", "Sync/Sync your notes", "sync your notes",
                                 "Obsidian Sync", "Sync/Settings"])
def test_get_by_path_title_or_alias(capsys, db, ref):
    code, out, _ = run(capsys, "get", ref, "--db", str(db), "-c", "t")
    assert code == 0 and out.startswith("Sync keeps your vault") and "aliases:" not in out


def test_get_a_section_and_line_ranges(capsys, db):
    _, out, _ = run(capsys, "get", "Sync your notes#version history", "--db", str(db), "-c", "t")
    assert out.startswith("## Version history") and "Set up sync" not in out
    _, out, _ = run(capsys, "get", "Sync/Sync your notes.md:1", "-l", "2", "--db", str(db), "-c", "t")
    assert out.splitlines() == ["---", "aliases: [Obsidian Sync, Sync/Settings]"]
    _, out, _ = run(capsys, "get", "Sync/Sync your notes.md:6-7", "--line-numbers", "--db", str(db), "-c", "t")
    assert out.splitlines() == ["6  Sync keeps your vault the same on every device.", "7  "]
    code, _, err = run(capsys, "get", "Sync/Sync your notes.md#Pricing", "--db", str(db), "-c", "t")
    assert code == 2 and "headings: ['Set up sync', 'Version history']" in err
    code, _, err = run(capsys, "get", "Sync/Sync your notes.md:900", "--db", str(db), "-c", "t")
    assert code == 2 and "past the end" in err


@pytest.mark.parametrize(("ref", "match"), [
    ("../../etc/passwd", "leads outside the vault"),
    ("/etc/passwd", "must be relative to the vault"),
    ("~/.ssh/id_rsa", "must be relative to the vault"),
    ("Sync/Sync notes.md", "did you mean ['Sync/Sync your notes.md'"),
])
def test_get_refuses_outside_the_vault_and_suggests(capsys, db, ref, match):
    code, _, err = run(capsys, "get", ref, "--db", str(db), "-c", "t")
    assert code == 2 and match in err and "root:" not in err


def test_multi_get_by_glob_and_list(capsys, db):
    code, out, _ = run(capsys, "multi-get", "Sync/*,Linking/*", "--db", str(db), "-c", "t", "-l", "1")
    assert code == 0
    assert [ln for ln in out.splitlines() if ln.startswith("==>")] == [
        "==> Linking/Internal links.md <==", "==> Sync/Sync your notes.md <=="]
    code, out, _ = run(capsys, "multi-get", "Pancakes, Code blocks", "--db", str(db), "-c", "t", "--json")
    assert [o["path"] for o in json.loads(out)] == ["Рецепты/Блины.md", "Editing/Code blocks.md"]
    code, _, err = run(capsys, "multi-get", "Nope/*", "--db", str(db), "-c", "t")
    assert code == 2 and "fanout ls" in err


# -- status, ls, collections -----------------------------------------------------------------------------------


def test_status_and_ls(capsys, db):
    code, out, _ = run(capsys, "status", "--db", str(db), "-c", "t", "--json")
    st = json.loads(out)
    assert code == 0 and st["notes"] == 6 and st["languages"] == {"en": 4, "ru": 2}
    assert st["tables"]["t_chunks"]["rows"] == st["chunks"] and st["tables"]["t_chunks"]["version"] >= 1
    assert st["tables"]["t_chunks"]["bytes"] > 0 and "t_cache_qvec" in st["tables"]
    _, out, _ = run(capsys, "status", "--db", str(db), "-c", "t")
    assert "languages   en 4, ru 2" in out and "t_documents" in out
    _, out, _ = run(capsys, "ls", "Sync", "--db", str(db), "-c", "t")
    assert [ln.split("\t")[0] for ln in out.splitlines()] == ["Sync/Sync your notes.md"]
    _, out, _ = run(capsys, "ls", "--db", str(db), "-c", "t")
    assert len(out.splitlines()) == 6


def test_collections_add_list_search_across_remove(capsys, db, tmp_path, tiny_vault):
    db2 = tmp_path / "db"
    shutil.copytree(db, db2)
    other = tmp_path / "other"
    other.mkdir()
    (other / "Garden.md").write_text("# Garden\n\nWater the tomatoes every morning in summer.\n", encoding="utf-8")
    code, out, _ = run(capsys, "collection", "add", "garden", str(other), "--db", str(db2))
    assert code == 0 and "notes 1" in out
    _, out, _ = run(capsys, "collection", "list", "--db", str(db2), "--json")
    assert {r["collection"]: r["notes"] for r in json.loads(out)} == {"garden": 1, "t": 6}
    argv = ["query", "watering tomatoes", "--db", str(db2), "-c", "t,garden", "--json", "--no-server",
            "--config", str(db.parent / "noexpand.yaml")]
    _, out, _ = run(capsys, *argv)
    res = json.loads(out)
    assert res[0]["collection"] == "garden" and res[0]["path"] == "Garden.md"
    assert {r["collection"] for r in res} == {"t", "garden"}
    assert [r["score"] for r in res] == sorted((r["score"] for r in res), reverse=True)
    code, out, _ = run(capsys, "collection", "remove", "garden", "--db", str(db2))
    assert code == 0 and "removed garden_chunks" in out
    _, out, _ = run(capsys, "collection", "list", "--db", str(db2), "--json")
    assert [r["collection"] for r in json.loads(out)] == ["t"]
    code, _, err = run(capsys, "collection", "remove", "garden", "--db", str(db2))
    assert code == 2 and "no collection 'garden'" in err


def test_the_one_parser_builds_each_command_alone_the_same_way():
    """main builds only the named command's subparser (the warm client's start-up); COMMANDS must list every
    command of the full parser, and each alone parses like the full one."""
    from fanout.cli.main import COMMANDS

    full = build_parser()
    sub = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(sub.choices) == COMMANDS
    argv = ["search", "x", "--tag", "a", "--tag", "b", "--folder", "Plugins", "--lang", "en", "--json"]
    assert vars(build_parser("search").parse_args(argv)) == vars(full.parse_args(argv))
