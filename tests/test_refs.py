"""Section references read back (issue 52, round 5, items 4 and 7): `kb.get`, `fanout get` and MCP `get` take
every `ref` a search with `sections=N` returns, and the references a person writes.

Hostile shapes: a `#` in a file name (`C# Tips.md`) and in a heading, a heading ending in `:NN` (`Time 10:30`),
heading refs (written when a note changed after indexing, so its lines are unknown), a line range that does not
meet the section it names, and `max_lines` that is not a whole number >= 1. Fake profile, no models.
"""

from __future__ import annotations

import pytest

import fanout
from fanout.api.notes import NoteError, parse_ref, ref_readings
from fanout.errors import FanoutError

GUIDE = """# Guide
Intro to syncing.

## Part 3
sync devices in part three.
more part three.

## Time 10:30
sync meeting notes at half past ten.

## C# basics
sync with C sharp code.
"""
TIPS = """# Tips
Tips intro.

## Intro
sync tips intro line.
"""


@pytest.fixture()
def kb(tmp_path, fake_cfg):
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "Guide.md").write_text(GUIDE, encoding="utf-8")
    (vault / "C# Tips.md").write_text(TIPS, encoding="utf-8")
    with fanout.open(tmp_path / "db", "t", fake_cfg) as k:
        k.index(vault)
        k.vault = vault
        yield k


def test_parse_ref_readings_put_the_likeliest_first():
    assert parse_ref("Folder/Note.md#Setup > Sync:40-60") == parse_ref("Folder/Note.md#Setup > Sync:40-60")
    r = parse_ref("C# Tips.md#Intro")
    assert (r.name, r.heading) == ("C# Tips.md", "Intro")
    r = parse_ref("C# Tips.md")
    assert (r.name, r.heading) == ("C# Tips.md", None)
    r = parse_ref("Note.md:40-60")
    assert (r.name, r.heading, r.line_from, r.line_to) == ("Note.md", None, 40, 60)
    first = ref_readings("Guide.md#Time 10:30")  # the literal heading first, then heading "Time 10" line 30
    assert (first[0].heading, first[0].line_from) == ("Time 10:30", None)
    assert (first[1].heading, first[1].line_from) == ("Time 10", 30)
    with pytest.raises(NoteError, match="lines count from 1"):
        parse_ref("Note.md:0")
    assert len(ref_readings("#" * 500)) < 30  # bounded however many `#` a reference holds


def test_refs_with_hash_in_names_and_colons_in_headings_read_back(kb):
    assert kb.get("C# Tips.md").path == "C# Tips.md"
    assert kb.get("C# Tips").path == "C# Tips.md"  # the title (file name) with its `#`
    n = kb.get("C# Tips.md#Intro")
    assert n.heading == "Tips > Intro" and "sync tips intro line." in n.text
    n = kb.get("Guide.md#Time 10:30")
    assert n.heading == "Guide > Time 10:30" and "half past ten" in n.text
    n = kb.get("Guide.md#C# basics")
    assert n.heading == "Guide > C# basics" and "C sharp" in n.text
    n = kb.get("Guide.md#Guide > Part 3")
    assert n.heading == "Guide > Part 3" and n.text.startswith("## Part 3")


def test_section_refs_of_a_changed_note_read_back_in_get_and_mcp(kb, fake_runner):
    from fanout.serve.mcp import FanoutTools

    (kb.vault / "Guide.md").write_text(GUIDE.replace("Intro to syncing.", "Intro to syncing, edited."),
                                       encoding="utf-8")  # changed since indexing: refs name headings
    hits = kb.search("sync", sections=3, n=5)
    refs = [s["ref"] for h in hits for s in h.sections or []]
    assert any("#" in r and ":" not in r.rsplit("#", 1)[-1].split(" ")[0] for r in refs), refs
    tools = FanoutTools(kb.db, "t", kb.cfg, fake_runner)
    for ref in refs:
        note = kb.get(ref)
        got = tools.get({"path": ref})
        assert got["path"] == note.path and got["heading"] == note.heading, ref
    for ref in ("Guide.md#Guide > Part 3", "C# Tips.md#Intro", "Guide.md#Time 10:30", "Guide.md:4-5",
                "C# Tips.md"):
        got = tools.get({"path": ref})
        assert got["path"] in ("Guide.md", "C# Tips.md"), (ref, got)
    assert tools.get({"path": "Guide.md:4-5"})["text"] == "## Part 3\nsync devices in part three."


def test_a_line_range_stays_inside_its_section(kb):
    n = kb.get("Guide.md#Part 3:5-20")  # the section is lines 4-6 (its blank end left out): 5-6
    assert n.first_line == 5 and n.text.split("\n")[0] == "sync devices in part three."
    assert "Time 10:30" not in n.text
    with pytest.raises(NoteError, match=r"lines 1-2 are outside section 'Guide > Part 3'.*lines 4-6"):
        kb.get("Guide.md#Part 3:1-2")  # before the section: nothing of it (was: all but its last lines)
    n = kb.get("Guide.md#Time 10:30:9")
    assert n.first_line == 9 and n.text == "sync meeting notes at half past ten."


@pytest.mark.parametrize("bad", ["x", 1.5, 0, -1, True])
def test_get_max_lines_must_be_a_whole_number(kb, bad):
    with pytest.raises(FanoutError, match="`max_lines` must be a whole number >= 1"):
        kb.get("Guide.md", max_lines=bad)
    assert len(kb.get("Guide.md", max_lines=2).text.split("\n")) == 2
