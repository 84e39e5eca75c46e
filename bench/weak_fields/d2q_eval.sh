#!/bin/bash
# Doc2query through full text, one language: the benchmark index rebuilt from the corpus as it is (off) and
# from a copy whose pages carry their generated questions as aliases (on), both by `--rebuild` on a copy of
# the index (every vector reused); then `fanout eval` with no fields, the strong agent's, the weak rule set's
# and the 1.5B's, and the paired difference on per-query nDCG@5 with a 95% bootstrap interval.
#
#   [SET='section.key=value'] bash bench/weak_fields/d2q_eval.sh BENCH DB QUESTIONS.jsonl WORK [LANG]
#   (BENCH: ../shared/eval/obsidian-help; DB: the benchmark index folder; QUESTIONS: doc2query.py's output
#    for LANG's corpus; WORK: a scratch folder outside the project; needs out/weak/weak-LANG.json from
#    weak_fields.py and out/exp15/exp15all-LANG.json from export_expansions.py)
set -euo pipefail
BENCH=$1; DB=$2; Q=$3; WORK=$4; LANG_=${5:-ru}
cd "$(dirname "$0")/../.."
mkdir -p "$WORK"
rm -rf "$WORK/corpus" && mkdir -p "$WORK/corpus"
for l in en ru; do [ "$l" = "$LANG_" ] || ln -sfn "$BENCH/corpus/$l" "$WORK/corpus/$l"; done
.venv/bin/python bench/weak_fields/d2q_aliases.py "$BENCH/corpus/$LANG_" "$Q" "$WORK/corpus/$LANG_"
for side in off on; do
  rm -rf "$WORK/db-$side" && mkdir -p "$WORK/db-$side"
  cp -r "$DB"/bench-"$LANG_"_* "$DB/bench-$LANG_.manifest.json" "$WORK/db-$side/"
  corpus=$BENCH/corpus; [ $side = on ] && corpus=$WORK/corpus
  .venv/bin/fanout index "$corpus/$LANG_" --db "$WORK/db-$side" -c "bench-$LANG_" --rebuild | tail -1
  ev=(.venv/bin/fanout eval --bench "$BENCH" --corpus "$corpus" --db "$WORK/db-$side" --langs "$LANG_")
  [ -n "${SET:-}" ] && ev+=(--set "$SET")  # e.g. SET='retrieve.lanes=["fts","vec","alias","title_vec"]'
  "${ev[@]}" --modes hybrid,fields --out "$WORK/ev-$side-strong" >/dev/null
  "${ev[@]}" --modes fields --fields "out/weak/weak-$LANG_.json" --out "$WORK/ev-$side-weak" >/dev/null
  "${ev[@]}" --modes fields --fields "out/exp15/exp15all-$LANG_.json" --out "$WORK/ev-$side-exp15" >/dev/null
done
WORK=$WORK LANG_=$LANG_ .venv/bin/python - <<'PY'
import os
import numpy as np
import pyarrow.parquet as pq
work, lang = os.environ["WORK"], os.environ["LANG_"]
rng = np.random.default_rng(0)
print("| fields | set | off | on | on - off [95%] |\n|---|---|---|---|---|")
for label, run, system in (("none (hybrid)", "strong", "fanout-hybrid"), ("strong agent", "strong", "fanout-fields"),
                           ("weak (mixed)", "weak", "fanout-fields"), ("1.5B", "exp15", "fanout-fields")):
    a, b = (pq.read_table(f"{work}/ev-{s}-{run}/per_query.parquet").to_pandas() for s in ("off", "on"))
    a, b = a[a.system == system], b[b.system == system]
    for s in (f"{lang}-base", f"{lang}-tricky"):
        x = a[a.set == s].set_index("id").ndcg_5
        y = b[b.set == s].set_index("id").ndcg_5.reindex(x.index)
        d = (y - x).to_numpy()
        boots = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(2000)]
        print(f"| {label} | {s} | {x.mean():.3f} | {y.mean():.3f} | {d.mean():+.3f} "
              f"[{np.percentile(boots, 2.5):+.3f}, {np.percentile(boots, 97.5):+.3f}] |")
PY
