"""Weak-agent fields for the benchmark queries, written by rules that reproduce what a weaker agent does.

The published study behind the benchmark found a weaker agent fills the three fields almost every time, but
with the wrong content. Each variant below degrades one field of the strong agent's fields
(agent-fields/agent-fields-{en,ru}.json) the way the study saw it; `weak` mixes them per query. Only the
queries and the agent's fields are read (never the docs), and the output goes under out/ (not committed).

  copy      short_query = 2-3 content words copied from the question ("internal links notes")
  comma     short_query = a comma list of the question's content words ("create, internal, links")
  long      short_query = the question minus its opening question words, up to 8 words (qmd-style rules)
  docs      expected_answer = "The documentation should explain <the question>." (ru: "В документации ...")
  question  expected_answer = a question (the rephrased_query)
  lang      short_query and expected_answer in the other language (the same base query's fields in the
            other language; tricky queries have no twin and keep theirs)
  empty     expected_answer = ""
  weak      per query (by a hash of its id): one short_query behaviour (copy/comma/long/kept), one
            expected_answer behaviour (docs/question/empty/kept), and every fifth query the wrong language

python -m bench.weak_fields.weak_fields [--bench DIR] [--out out/weak]   -> out/weak/<variant>-{en,ru}.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zlib
from pathlib import Path

from fanout.evaluation.bench_data import load_agent_fields, load_queries
from fanout.text import STOPWORDS, detect_lang

VARIANTS = ("copy", "comma", "long", "docs", "question", "lang", "empty", "weak")
_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*", re.UNICODE)
OPENERS = {"how", "what", "why", "when", "where", "which", "can", "do", "does", "is", "are", "i", "to",
           "как", "что", "почему", "где", "когда", "можно", "ли", "какой", "какие"}


def content_words(q: str) -> list[str]:
    return [w for w in _WORD.findall(q.casefold()) if w not in STOPWORDS and w not in OPENERS]


def copy_sq(q: str) -> str:
    ws = content_words(q)
    return " ".join(ws[:3] if len(ws) > 3 else ws) or q


def comma_sq(q: str) -> str:
    ws = content_words(q)
    return ", ".join(ws[:3]) or q


def long_sq(q: str) -> str:
    ws = _WORD.findall(q.casefold())
    while ws and ws[0] in OPENERS:
        ws = ws[1:]
    return " ".join(ws[:8]) or q


def docs_ea(q: str) -> str:
    body = q.strip().rstrip("?.! ")
    if detect_lang(q) == "ru":
        return f"В документации должно быть объяснено, {body[:1].lower() + body[1:]}."
    return f"The documentation should explain {body[:1].lower() + body[1:]}."


def twin(qid: str, fields: dict[str, dict]) -> dict | None:
    lang, _, orig = qid.partition(":")
    return fields.get(f"{'ru' if lang == 'en' else 'en'}:{orig}")


def degrade(variant: str, q: dict, f: dict, fields: dict[str, dict]) -> dict:
    out = dict(f)
    text = q["query"]
    if variant == "copy":
        out["short_query"] = copy_sq(text)
    elif variant == "comma":
        out["short_query"] = comma_sq(text)
    elif variant == "long":
        out["short_query"] = long_sq(text)
    elif variant == "docs":
        out["expected_answer"] = docs_ea(text)
    elif variant == "question":
        out["expected_answer"] = f.get("rephrased_query") or text
    elif variant == "empty":
        out["expected_answer"] = ""
    elif variant == "lang":
        t = twin(q["id"], fields)
        if t:
            out["short_query"], out["expected_answer"] = t["short_query"], t["expected_answer"]
    elif variant == "weak":
        h = zlib.crc32(q["id"].encode())
        sq = ("copy", "comma", "long", None)[h % 4]
        ea = ("docs", "question", "empty", None)[(h // 4) % 4]
        if (h // 16) % 5 == 0 and twin(q["id"], fields):
            out = degrade("lang", q, out, fields)
        for v in (sq, ea):
            if v:
                out = degrade(v, q, out, fields)
    else:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    return out


def write(bench: str | None, out_dir: Path, variants: tuple[str, ...] = VARIANTS) -> dict[str, int]:
    """Write <variant>-{en,ru}.json (the agent-fields format: golden ids) and return changed fields per variant."""
    queries = load_queries(bench)
    fields = load_agent_fields(bench)
    out_dir.mkdir(parents=True, exist_ok=True)
    changed: dict[str, int] = {}
    for v in variants:
        for lang in ("en", "ru"):
            rows = []
            for q in queries:
                if q["lang"] != lang or q["id"] not in fields:
                    continue
                f = fields[q["id"]]
                d = degrade(v, q, f, fields)
                changed[v] = changed.get(v, 0) + sum(d[k] != f[k] for k in f)
                rows.append({"id": q["orig_id"], **d})
            (out_dir / f"{v}-{lang}.json").write_text(json.dumps(rows, ensure_ascii=False, indent=1), "utf-8")
    return changed


def first_queries(bench: str | None, out_dir: Path, n: int) -> dict[str, int]:
    """The first n queries of each set as `{id, query}` rows, one file per language."""
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    queries = load_queries(bench)
    for lang in ("en", "ru"):
        rows = [q for sub in ("base", "tricky") for q in [x for x in queries
                                                           if x["lang"] == lang and x["subset"] == sub][:n]]
        (out_dir / f"first{n}-{lang}.jsonl").write_text(
            "".join(json.dumps({"id": q["id"], "query": q["query"]}, ensure_ascii=False) + "\n" for q in rows),
            encoding="utf-8")
        counts[lang] = len(rows)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=None, help="benchmark folder (default: $FANOUT_BENCH or ../shared/...)")
    ap.add_argument("--out", default="out/weak")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--first", type=int, default=0, help="instead: write OUT/first<N>-<lang>.jsonl, the first N "
                    "queries of each set as query rows (the input of `fanout expand`)")
    args = ap.parse_args(argv)
    if args.first:
        for lang, n in first_queries(args.bench, Path(args.out), args.first).items():
            sys.stdout.write(f"{lang}: {n} queries\n")
        return 0
    changed = write(args.bench, Path(args.out), tuple(args.variants.split(",")))
    sys.stdout.write("".join(f"{v}: {n} fields changed\n" for v, n in changed.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
