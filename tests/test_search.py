"""Query pipeline end to end on the tiny vault with the real embedder (no expander / reranker calls)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fanout.pipelines.search import Searcher, SearchOptions

NOEXP = SearchOptions(n=5, expand=False, rerank=False, explain=True)


@pytest.fixture(scope="module")
def searcher(tiny_db, cfg, runner):
    return Searcher(tiny_db, "t", cfg, runner)


def top(res, qid):
    return [r["path"] for r in res.results.to_pylist() if r["qid"] == qid]


def test_routing_lex_to_fts_vec_hyde_to_vectors_original_to_both(searcher):
    res = searcher.search([{"id": "a", "query": "keep devices in step", "short_query": "version history",
                            "rephrased_query": "restore an old version of a file",
                            "expected_answer": "Every file keeps its versions for 12 months."}], NOEXP)
    lanes = {}
    for r in res.results.to_pylist():
        for lst in json.loads(r["_explain"])["lists"]:
            lanes.setdefault(lst["kind"], set()).add(lst["lane"])
    assert lanes["lex"] <= {"fts", "alias"} and lanes["vec"] == {"vec"} and lanes["hyde"] == {"vec"}
    assert lanes["orig"] >= {"vec"}
    assert top(res, "a")[0] == "Sync/Sync your notes.md"


def test_alias_lane_matches_title_alias_and_last_path_segment(searcher):
    res = searcher.search([{"id": "w", "query": "Wikilinks"}, {"id": "o", "query": "old links"},
                           {"id": "p", "query": "pancakes"}], NOEXP)
    assert top(res, "w")[0] == "Linking/Internal links.md"
    assert top(res, "o")[0] == "Linking/Internal links.md"
    assert top(res, "p")[0] == "Рецепты/Блины.md"  # a Russian page's English alias


def test_russian_and_cross_lingual_queries(searcher):
    res = searcher.search([{"id": "ru", "query": "как настроить синхронизацию"},
                           {"id": "x", "query": "рецепт блинов с молоком"},
                           {"id": "en", "query": "how do I highlight code syntax"}], NOEXP)
    assert top(res, "ru")[0] == "Синхронизация/Синхронизация заметок.md"
    assert top(res, "x")[0] == "Рецепты/Блины.md"
    assert top(res, "en")[0] == "Editing/Code blocks.md"


def test_scores_are_meaningful_and_min_score_filters(searcher):
    res = searcher.search([{"id": "a", "query": "daily notes date format template"}],
                          SearchOptions(n=5, expand=False, rerank=False))
    scores = res.results["score"].to_pylist()
    assert scores == sorted(scores, reverse=True) and 0 < scores[-1] < scores[0] <= 1.0
    cut = searcher.search([{"id": "a", "query": "daily notes date format template"}],
                          SearchOptions(n=5, expand=False, rerank=False, min_score=scores[0] - 1e-6))
    assert cut.results.num_rows == 1


def test_repeat_batch_is_answered_from_caches(searcher, runner):
    rows = [{"id": "c1", "query": "version history of a file", "rephrased_query": "restore old versions"}]
    first = searcher.search(rows, NOEXP)
    calls = runner.calls.get("embedder", 0)
    again = searcher.search(rows, NOEXP)
    assert runner.calls.get("embedder", 0) == calls  # no embedder call: query vectors came from the cache
    assert again.results["path"].to_pylist() == first.results["path"].to_pylist()
    assert again.stats["cache"]["hits"]["qvec"] >= 2


def test_bad_rows_do_not_lose_the_batch(searcher):
    res = searcher.search([{"id": "ok", "query": "sync"}, {"id": "bad", "query": ""},
                           {"id": "t", "query": "x", "searches": [{"type": "nope", "query": "x"}]}], NOEXP)
    assert set(res.results["qid"].to_pylist()) == {"ok"}
    assert {e["qid"]: e["field"] for e in res.errors.to_pylist()} == {"bad": "query", "t": "searches[0].type"}


def test_batch_killed_with_sigkill_resumes_without_duplicates(tmp_path, tiny_db):
    qfile = tmp_path / "q.jsonl"
    words = ["sync", "code", "links", "daily", "блины", "синхронизация", "heading", "template", "history"]
    rows = [{"id": f"q{i}", "query": f"{w} notes", "rephrased_query": f"how does {w} work"}
            for i, w in enumerate(words * 3)]
    rows.append({"id": "broken", "query": ""})
    qfile.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n{not json\n")
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "fanout.cli.main", "batch", str(qfile), "--out", str(out), "--db", str(tiny_db),
           "--collection", "t", "--slice", "2", "--no-expand", "--runner", "inproc", "-n", "3"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    parts = Path(str(out) + ".parts") / "results"
    deadline = time.time() + 240
    while time.time() < deadline and len(list(parts.glob("part-*.parquet"))) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(list(parts.glob("part-*.parquet"))) >= 2 and not out.exists()
    done = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr  # the broken rows are error rows: exit status 3
    assert "resumed" in done.stdout and "(0 resumed)" not in done.stdout
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    ids = [x["id"] for x in lines]
    assert len(ids) == len(set(ids)) == len(rows) + 1
    by = {x["id"]: x for x in lines}
    assert by["broken"]["field"] == "query" and "line-" in ids[-1] and "not valid JSON" in by[ids[-1]]["error"]
    assert all(len(by[f"q{i}"]["results"]) == 3 for i in range(len(words) * 3))


def test_rerank_blends_scores_and_caches_them_per_query_intent_and_passage(tiny_db, cfg, runner):
    rcfg = cfg.replace(rerank={"top_n": 3, "passage_tokens": 48})
    s = Searcher(tiny_db, "t", rcfg, runner)
    rows = [{"id": "r", "query": "how long are file versions kept", "intent": "restore a file"}]
    first = s.search(rows, SearchOptions(n=3, expand=False, rerank=True))
    top = first.results.to_pylist()
    assert all(0.0 <= r["_rerank"] <= 1.0 for r in top)
    assert top[0]["path"] == "Sync/Sync your notes.md"
    calls = runner.calls.get("reranker", 0)
    again = s.search(rows, SearchOptions(n=3, expand=False, rerank=True))
    assert runner.calls.get("reranker", 0) == calls  # every pair came from the rerank cache
    assert again.results["score"].to_pylist() == first.results["score"].to_pylist()
    other = s.search([{**rows[0], "intent": "something else"}], SearchOptions(n=3, expand=False, rerank=True))
    assert runner.calls.get("reranker", 0) == calls + 1 and other.results.num_rows == 3  # intent is in the key
