"""Plain BM25-only and vector-only searches on the benchmark indexes, 3 queries per language.

    .venv/bin/python -m bench.plain_search     # needs .fanout/bench-db (fanout eval builds it)
"""



from fanout.pipelines.search import Searcher, SearchOptions

from fanout.config import load_config
from fanout.exec.runner import Runner

cfg = load_config()
qs = {"en": ["how to create internal links", "sync notes between phone and computer", "change the app font size"],
      "ru": ["как создать внутреннюю ссылку", "синхронизация заметок между устройствами", "изменить размер шрифта"]}
with Runner(cfg) as r:
    for lang, queries in qs.items():
        for lane in ("fts", "vec"):
            s = Searcher(".fanout/bench-db", f"bench-{lang}", cfg.replace(retrieve={"lanes": [lane]}), r)
            res = s.search([{"id": str(i), "query": q} for i, q in enumerate(queries)], SearchOptions(n=3, expand=False, rerank=False))
            for i, q in enumerate(queries):
                top = [x["path"] for x in res.results.to_pylist() if x["qid"] == str(i)]
                print(f"{lang} {lane:3} {q!r}: {top}")
