"""The commands that read notes: `fanout get` (a note or one section), `multi-get` (several, by glob or list)
and `ls` (the indexed paths), printed as the terminal may show them (fanout/safe_text.py). fanout/cli/main.py's
`cmd_get`, `cmd_multi_get` and `cmd_ls` import it when one of them runs.
"""

from __future__ import annotations

import json
import sys

TYPE_CHECKING = False  # typing costs the CLI's start
if TYPE_CHECKING:
    import argparse
    from typing import Any

from fanout.cli.startup import open_collection, open_kb
from fanout.errors import UserError


def get_note(args: argparse.Namespace) -> int:
    """`fanout get REF`: a note, one section or a line range, as text or JSON."""
    from fanout.api.notes import render_lines

    with open_kb(args) as kb:
        note = kb.get(args.ref, max_lines=args.lines)
    if args.json:
        print(json.dumps({"path": note.path, "title": note.title, "heading": note.heading, "lang": note.lang,
                          "first_line": note.first_line, "text": note.text}, ensure_ascii=False, indent=2))
    else:
        from fanout.safe_text import for_terminal

        print(for_terminal(render_lines(note.first_line, note.text.split("\n"), args.line_numbers), keep_lines=True))
    return 0


def get_notes(args: argparse.Namespace) -> int:
    """`fanout multi-get PATTERN`: each matching note (2 when one cannot be read; the others are printed)."""
    from fanout.api.notes import (
        NoteError,
        indexed_docs,
        locate,
        match_many,
        note_lines,
        read_note,
        render_lines,
        vault_of,
    )

    col = open_collection(args)
    vault, docs = vault_of(col), indexed_docs(col)
    refs = match_many(args.pattern, [d["path"] for d in docs()])
    if not refs:
        raise UserError(f"no indexed note matches {args.pattern!r}; see `fanout ls` for the paths")
    out: list[dict[str, Any]] = []
    bad = 0
    for ref in refs:
        try:
            target = locate(vault, ref, docs)
            size = target.stat().st_size
            if size > args.max_bytes:
                out.append({"path": ref, "skipped": f"{size} bytes > --max-bytes {args.max_bytes}"})
                continue
            note = read_note(vault, target, "note", col.cfg.index)
            _, first, lines = note_lines(note, max_lines=args.lines)
            out.append({"path": note["path"], "title": note["title"], "first_line": first, "text": lines})
        except NoteError as e:
            bad += 1
            out.append({"path": ref, "error": str(e)})
    if args.json:
        print(json.dumps([{**o, "text": "\n".join(o["text"])} if "text" in o else o for o in out],
                         ensure_ascii=False, indent=2))
    else:
        from fanout.safe_text import for_terminal

        for o in out:
            print(f"==> {for_terminal(o['path'])} <==")
            if "text" in o:
                print(for_terminal(render_lines(o["first_line"], o["text"], args.line_numbers), keep_lines=True) + "\n")
            else:
                print(for_terminal(f"({o.get('skipped') or o.get('error')})") + "\n",
                      file=sys.stderr if "error" in o else sys.stdout)
    return 2 if bad else 0


def list_notes(args: argparse.Namespace) -> int:
    """`fanout ls [PREFIX]`: the indexed notes, one line each (or JSON, or NUL-ended paths)."""
    import time

    from fanout.api.catalog import list_files
    from fanout.safe_text import for_terminal

    rows = list_files(open_collection(args), args.prefix or "")
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    elif args.null:  # exact paths, each ended by NUL (find -print0)
        sys.stdout.write("".join(r["path"] + "\0" for r in rows))
    else:  # a tab or newline in a name is shown as \x09 / \x0a: one line per note, four fields
        for r in rows:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["mtime"])) if r["mtime"] else "-"
            print(f"{for_terminal(r['path'])}\t{for_terminal(r['lang'])}\t{r['n_chunks']} chunks\t{when}")
    return 0
