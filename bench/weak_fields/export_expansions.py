"""The local expander's cached fields (expand.format: fields) as an agent-fields file, for eval rows.

`fanout expand QUERIES --db DB -c NAME --config local-1.5b` caches each query's three fields as lex / vec /
hyde lines; this writes them as `{id, short_query, rephrased_query, expected_answer}` (golden ids, the
benchmark's agent-fields format) so `fanout.evaluation.matrix` can search them with `fields_from` like any agent's,
with the field hygiene on or off. Queries not in the cache are left out (a row without fields).

python -m bench.weak_fields.export_expansions QUERIES.jsonl --db DB -c NAME --model SUBSTR --out PREFIX-LANG.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import lancedb

KIND_FIELD = {"lex": "short_query", "vec": "rephrased_query", "hyde": "expected_answer"}


def export(queries: Path, db: str, collection: str, model: str) -> list[dict]:
    rows = [json.loads(x) for x in queries.read_text(encoding="utf-8").splitlines() if x.strip()]
    t = lancedb.connect(db).open_table(f"{collection}_cache_expansions").to_arrow()
    by_query = {}
    for r in t.select(["query", "intent", "model", "variants"]).to_pylist():
        if model in r["model"] and r["intent"] is None:
            by_query[r["query"]] = json.loads(r["variants"])
    out = []
    for q in rows:
        vs = by_query.get(q["query"])
        if vs is None:
            continue
        f = {name: "" for name in KIND_FIELD.values()}
        for v in vs:
            if v["kind"] in KIND_FIELD and not f[KIND_FIELD[v["kind"]]]:
                f[KIND_FIELD[v["kind"]]] = v["text"]
        out.append({"id": q["id"].split(":", 1)[-1], **f})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("queries")
    ap.add_argument("--db", required=True)
    ap.add_argument("-c", "--collection", required=True)
    ap.add_argument("--model", default="1.5b", help="part of the expander model id the rows must have")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rows = export(Path(args.queries), args.db, args.collection, args.model)
    Path(args.out).write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    sys.stdout.write(f"{len(rows)} queries with cached fields -> {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
