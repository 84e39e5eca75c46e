"""Snippet quality of top-1 results in an eval output folder (`fanout eval --out OUT`).

    .venv/bin/python -m bench.snippet_quality OUT [--bench DIR] [--queries judged.jsonl --fields F]

Per mode and language (results-<mode>-<lang>.parquet), over each query's rank-1 page:
  heading only   the snippet is nothing but a markdown heading line ("## Brownout": '#'s and then exactly one
                 part of the page's heading path): goal 0
  query term     the snippet holds a term of the query (crude 5-letter stems, stopwords dropped, any script)
  term or short  ... or the agent's short_query (its terms), when the query has one
Queries and agent fields come from the Obsidian Help benchmark unless --queries/--fields name your own.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq

from fanout.text import stem_key, terms

_HEADING = re.compile(r"#{1,6}\s+(.+)")


def heading_only(snippet: str, heading: str | None) -> bool:
    m = _HEADING.fullmatch(" ".join(snippet.split()))
    if not m:
        return False
    parts = [h.strip().casefold() for h in (heading or "").split(" > ") if h.strip()]
    rest = m.group(1).strip().casefold()
    return rest in parts if parts else len(rest.split()) <= 8


def has_terms(snippet: str, text: str | None) -> bool:
    if not text:
        return False
    want = {stem_key(t) for t in terms(text)}
    return bool(want & {stem_key(t) for t in terms(snippet)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="an eval output folder")
    ap.add_argument("--bench", default=None, help="benchmark folder (default: $FANOUT_BENCH or ../shared/...)")
    ap.add_argument("--queries", default=None, help="your own judged queries (fanout eval format)")
    ap.add_argument("--fields", nargs="*", default=None, help="your own agent fields (keyed by your ids)")
    args = ap.parse_args()
    if args.queries:
        from fanout.evaluation.own import load_judged, load_own_fields

        queries = {q["id"]: q for q in load_judged(args.queries)}
        fields = load_own_fields(args.fields, set(queries)) if args.fields else {}
    else:
        from fanout.evaluation.bench_data import load_agent_fields, load_queries

        queries = {q["id"]: q for q in load_queries(args.bench)}
        fields = load_agent_fields(args.bench)
    print("| mode | lang | queries | heading only | query term | term or short_query |\n|---|---|---|---|---|---|")
    summary = {}
    for f in sorted(Path(args.out).glob("results-*.parquet")):
        mode, _, lang = f.stem.removeprefix("results-").rpartition("-")
        top = [r for r in pq.read_table(f).to_pylist() if r["rank"] == 1]
        if not top:
            continue
        n = len(top)
        ho = sum(heading_only(r["snippet"], r["heading"]) for r in top)
        qt = sum(has_terms(r["snippet"], queries.get(r["qid"], {}).get("query")) for r in top)
        qs = sum(has_terms(r["snippet"], queries.get(r["qid"], {}).get("query"))
                 or has_terms(r["snippet"], fields.get(r["qid"], {}).get("short_query")) for r in top)
        summary[f"{mode}-{lang}"] = {"n": n, "heading_only": ho / n, "query_term": qt / n, "term_or_short": qs / n}
        print(f"| {mode} | {lang} | {n} | {ho / n:.1%} ({ho}) | {qt / n:.1%} | {qs / n:.1%} |")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
