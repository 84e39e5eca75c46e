"""Doc2query through the full-text side: copy one language folder of a corpus, adding each page's generated
questions (bench/weak_fields/doc2query.py) to its front matter `aliases`, so they land in the title column of
every chunk of the page (boost `retrieve.fts_boost_title`) and in the exact alias lane. Chunk embed texts
carry no aliases, so `fanout index COPY --db DBCOPY -c NAME --rebuild` on a copy of an index reuses every
vector (seconds, not a re-embedding). bench/weak_fields/d2q_eval.sh runs the whole comparison.

    python bench/weak_fields/d2q_aliases.py CORPUS/ru QUESTIONS.jsonl OUT/ru
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import yaml


def add_aliases(src: Path, questions: Path, dst: Path) -> int:
    qs = {}
    for line in questions.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            qs[row["path"]] = row["questions"]
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    n = 0
    for rel, qlist in qs.items():
        p = dst / rel
        if not p.exists() or not qlist:
            continue
        text = p.read_text(encoding="utf-8")
        fm, body = {}, text
        if text.startswith("---\n"):
            end = text.find("\n---", 4)
            if end > 0:
                fm = yaml.safe_load(text[4:end]) or {}
                body = text[end + 4:].lstrip("\n")
        aliases = fm.get("aliases") or []
        fm["aliases"] = ([aliases] if isinstance(aliases, str) else list(aliases)) + qlist
        p.write_text("---\n" + yaml.safe_dump(fm, allow_unicode=True, sort_keys=False) + "---\n" + body,
                     encoding="utf-8")
        n += 1
    return n


if __name__ == "__main__":
    print(add_aliases(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])), "pages with questions as aliases")
