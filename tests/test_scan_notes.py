import os
from pathlib import Path

import pytest
from fanout.pipelines.scan_notes import parse_note, scan_notes


def note(text: str) -> dict:
    return parse_note("x/My note.md", text.encode(), 0.0)


def test_front_matter_aliases_as_list_string_empty():
    assert note("---\naliases: [A, B]\n---\nbody")["aliases"] == ["A", "B"]
    assert note("---\naliases: Single\n---\nbody")["aliases"] == ["Single"]
    assert note("---\naliases:\n---\nbody")["aliases"] == []
    assert note("---\naliases: []\ntags: a, b\n---\nbody")["tags"] == ["a", "b"]
    assert note("no front matter")["aliases"] == []


def test_title_is_h1_outside_fence_else_file_name():
    assert note("```\n# not title\n```\ntext")["title"] == "My note"
    assert note("---\na: 1\n---\n# Real Title\ntext")["title"] == "Real Title"


def test_language_detected():
    assert note("Синхронизация хранит заметки на всех устройствах.")["lang"] == "ru"
    assert note("Sync keeps notes on every device.")["lang"] == "en"


def test_body_offset_skips_front_matter():
    text = "---\ndescription: d\n---\nBody here"
    n = note(text)
    assert text[n["body_offset"]:] == "Body here" and n["description"] == "d"


@pytest.mark.parametrize("raw,reason", [
    (b"", "empty"), (b"# x\x00\x00", "binary"), (b"# caf\xe9", "not_utf8"),
    (b"---\nkey: [unclosed\n---\nbody", "bad_yaml"), (b"---\n- a list\n---\nbody", "bad_yaml"),
])
def test_bad_files_raise_with_reason(raw, reason):
    with pytest.raises(ValueError) as e:
        parse_note("b.md", raw, 0.0)
    assert e.value.args[0] == reason


def test_scan_skips_bad_and_hidden_and_survives_symlink_loop(tmp_path: Path, monkeypatch):
    (tmp_path / "good.md").write_text("hello", encoding="utf-8")
    (tmp_path / ".obsidian").mkdir()
    (tmp_path / ".obsidian" / "hidden.md").write_text("hidden", encoding="utf-8")
    bad = Path(__file__).resolve().parent.parent / "samples" / "bad"
    for f in bad.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path, tmp_path / "sub" / "loop")
    (tmp_path / "locked.md").write_text("x")
    import fanout.pipelines.scan_notes as sn

    real = sn.read_regular

    def read_regular(path, *a, **k):  # root ignores chmod 0, so make one file unreadable here
        if str(path).endswith("locked.md"):
            raise PermissionError(13, "Permission denied")
        return real(path, *a, **k)

    monkeypatch.setattr(sn, "read_regular", read_regular)
    notes, skipped = scan_notes(tmp_path)
    assert notes["path"].to_pylist() == ["good.md"]
    reasons = {s["path"]: s["reason"] for s in skipped.to_pylist()}
    assert reasons["empty.md"] == "empty" and reasons["binary.md"] == "binary"
    assert reasons["not_utf8.md"] == "not_utf8" and reasons["broken_yaml.md"] == "bad_yaml"
    assert reasons["locked.md"] == "unreadable"
    assert all(s["detail"] for s in skipped.to_pylist())
