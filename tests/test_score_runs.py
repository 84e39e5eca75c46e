"""Tests for fanout.evaluation.score_runs, bootstrap_ci and report_eval on the Obsidian Help benchmark."""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from fanout.evaluation import bench_data as bd
from fanout.evaluation import bootstrap_ci as bc
from fanout.evaluation import report as rep
from fanout.evaluation import score_runs as sr

BENCH = bd.default_bench_dir()
needs_bench = pytest.mark.skipif(
    not (BENCH / "queries" / "obsidian-help.jsonl").is_file(),
    reason=f"Obsidian Help benchmark not found at {BENCH} "
    "(set FANOUT_BENCH or add ../shared/eval/obsidian-help)",
)

# Published nDCG@5 (Recall@10) from the benchmark README, sets en-base, en-tricky, ru-base, ru-tricky.
PUBLISHED: dict[str, list[tuple[float, float]]] = {
    "ohs": [(0.726, 0.931), (0.722, 0.912), (0.671, 0.879), (0.684, 0.873)],
    "qmd": [(0.717, 0.983), (0.733, 0.947), (0.608, 0.897), (0.670, 0.873)],
    "qmd-qwen": [(0.731, 0.931), (0.764, 0.947), (0.668, 0.914), (0.771, 0.968)],
    "trip2g": [(0.742, 0.983), (0.767, 0.930), (0.603, 0.879), (0.815, 0.968)],
    "trip2g-alias": [(0.742, 0.983), (0.785, 0.930), (0.603, 0.879), (0.815, 0.968)],
    "fields-short": [(0.794, 1.00), (0.820, 0.965), (0.653, 0.966), (0.824, 1.00)],
    "fields-w1": [(0.798, 1.00), (0.815, 0.965), (0.702, 0.983), (0.866, 1.00)],
}
L2, L3 = math.log2(3), 2.0  # discounts at ranks 2 and 3


def _q(qid: str, relevant: list[str], partial: list[str], lang: str = "en") -> dict:
    return {
        "id": f"{lang}:{qid}",
        "lang": lang,
        "subset": "base",
        "category": "c",
        "relevant": relevant,
        "partial": partial,
    }


def test_two_relevant_pages() -> None:
    m = sr.query_metrics(["X", "A", "B"], ["A", "B"], [])
    assert m["ndcg_5"] == pytest.approx((1 / L2 + 1 / L3) / (1 + 1 / L2))
    assert (m["recall_10"], m["mrr"], m["hit_1"], m["hit_5"]) == (1.0, 0.5, 0.0, 1.0)


def test_partial_only_judgments() -> None:
    m = sr.query_metrics(["X", "P"], [], ["P"])
    assert m["ndcg_5"] == pytest.approx((0.5 / L2) / 0.5)
    assert (m["recall_10"], m["mrr"], m["hit_1"], m["hit_5"]) == (0.0, 0.0, 0.0, 0.0)


def test_partial_gain_and_ideal_cut_to_k() -> None:
    rel = [f"R{i}" for i in range(6)]
    m = sr.query_metrics(["P", *rel], rel, ["P"])
    ideal5 = sum(1 / math.log2(i + 2) for i in range(5))
    dcg5 = 0.5 + sum(1 / math.log2(i + 2) for i in range(1, 5))
    assert m["ndcg_5"] == pytest.approx(dcg5 / ideal5)
    assert m["recall_10"] == 1.0 and m["mrr"] == 0.5


@pytest.mark.parametrize("paths", [None, []])
def test_empty_or_missing_results_score_zero(paths: list[str] | None) -> None:
    assert set(sr.query_metrics(paths, ["A"], ["B"]).values()) == {0.0}


def test_nfd_paths_and_duplicates() -> None:
    page = "Плагины/Случайная заметка.md"
    nfd = unicodedata.normalize("NFD", page)
    assert nfd != page
    m = sr.query_metrics([nfd, "X", page, "X", "B"], [page], [])
    assert m["ndcg_5"] == 1.0 and m["hit_1"] == 1.0
    dup = sr.query_metrics(["X", "X", "X", "A"], ["A"], [])
    assert dup["mrr"] == 0.5 and dup["ndcg_5"] == pytest.approx(1 / L2)
    assert sr.ranked_pages([nfd, page, "X", "X"]) == [page, "X"]


def test_per_query_and_summarize() -> None:
    queries = [_q("q1", ["A"], []), _q("q2", ["B"], []), _q("q1", ["A"], [], lang="ru")]
    table = sr.per_query_metrics({"en:q1": ["A"], "ru:q1": ["Z", "A"]}, queries, system="toy")
    assert table.column("id").to_pylist() == ["en:q1", "en:q2", "ru:q1"]
    assert table.column("n_results").to_pylist() == [1, 0, 2]
    summary = sr.summarize(table).to_pylist()
    assert [(r["set"], r["n"]) for r in summary] == [("en-base", 2), ("ru-base", 1)]
    assert summary[0]["mrr"] == 0.5 and summary[1]["mrr"] == 0.5


def test_run_file_roundtrip(tmp_path: Path) -> None:
    run = {"ru:q001": ["Б.md"], "en:q001": ["A.md"]}
    path = sr.write_run(tmp_path / "mine-ru.json", "mine", run, lang="ru")
    assert json.loads(path.read_text(encoding="utf-8"))["results"] == {"q001": ["Б.md"]}
    assert sr.read_run(path) == ("mine", {"ru:q001": ["Б.md"]})
    other = tmp_path / "anything.json"
    other.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    assert sr.read_run(other, lang="en") == ("mine", {"en:q001": ["Б.md"]})
    with pytest.raises(ValueError, match="language"):
        sr.read_run(other)


@needs_bench
@pytest.mark.parametrize("system", sorted(PUBLISHED))
def test_published_runs_reproduce_readme(system: str) -> None:
    queries = bd.load_queries()
    paths = [BENCH / "runs" / f"{system}-{lang}.json" for lang in bd.LANGS]
    summary = {r["set"]: r for r in sr.summarize(sr.score_files(paths, queries)).to_pylist()}
    got = [(round(summary[s]["ndcg_5"], 3), round(summary[s]["recall_10"], 3)) for s in bd.SETS]
    assert got == PUBLISHED[system]
    readme = bd.load_published_table()[system]
    assert [readme[s] for s in bd.SETS] == PUBLISHED[system]


@needs_bench
def test_matches_pytrec_eval_on_integer_gains() -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval", reason="pytrec-eval-terrier not installed")
    queries = bd.load_queries()
    qrels = {q["id"]: {**{p: 1 for p in q["partial"]}, **{p: 2 for p in q["relevant"]}} for q in queries}
    graded = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5,10"}, relevance_level=1)
    binary_measures = {"recall.10", "recip_rank", "success.1,5"}
    binary = pytrec_eval.RelevanceEvaluator(qrels, binary_measures, relevance_level=2)
    for system, run in bd.load_published_runs().items():
        ours = {r["id"]: r for r in sr.per_query_metrics(run, queries, system).to_pylist()}
        trec_run = {
            qid: {p: float(100 - i) for i, p in enumerate(sr.ranked_pages(paths))}
            for qid, paths in run.items()
            if paths
        }
        g, b = graded.evaluate(trec_run), binary.evaluate(trec_run)
        for qid in trec_run:
            expected = {
                "ndcg_5": g[qid]["ndcg_cut_5"],
                "ndcg_10": g[qid]["ndcg_cut_10"],
                "recall_10": b[qid]["recall_10"],
                "mrr": b[qid]["recip_rank"],
                "hit_1": b[qid]["success_1"],
                "hit_5": b[qid]["success_5"],
            }
            assert {m: ours[qid][m] for m in sr.METRICS} == pytest.approx(expected, abs=1e-9), (system, qid)


def test_bootstrap_mean_seeded() -> None:
    values = np.linspace(0, 1, 50)
    first = bc.bootstrap_mean(values, n_boot=2000, seed=7)
    assert first == bc.bootstrap_mean(values, n_boot=2000, seed=7)
    mean, low, high = first
    assert low < mean < high and mean == pytest.approx(0.5)
    assert bc.bootstrap_mean([0.3] * 10, n_boot=100) == pytest.approx((0.3, 0.3, 0.3))
    assert all(math.isnan(v) for v in bc.bootstrap_mean([], n_boot=10))
    mean, low, high = bc.bootstrap_mean([0.2, 0.4], n_boot=0)  # --n-boot 0: no intervals, the mean stays
    assert mean == pytest.approx(0.3) and math.isnan(low) and math.isnan(high)


def test_set_intervals_and_paired_diff() -> None:
    queries = [_q(f"q{i}", ["A"], []) for i in range(40)]
    good = sr.per_query_metrics({q["id"]: ["A"] for q in queries}, queries, "good")
    half_run = {q["id"]: ["A"] if i % 2 else ["X"] for i, q in enumerate(queries)}
    half = sr.per_query_metrics(half_run, queries, "half")
    ci = bc.set_intervals(pa.concat_tables([good, half]), n_boot=500).to_pylist()
    assert [(r["system"], r["n"]) for r in ci] == [("good", 40), ("half", 40)]
    assert ci[0]["low"] == ci[0]["high"] == 1.0 and ci[1]["low"] < 0.5 < ci[1]["high"]
    diff = bc.paired_diff(good, half, n_boot=500)["en-base"]
    assert diff["mean_diff"] == pytest.approx(0.5) and 0 < diff["low"] < 0.5 < diff["high"]
    assert diff["interval"].startswith("+") and diff["p_le_zero"] == 0.0
    assert bc.format_interval(0.04, 0.16) == "+0.04 to +0.16"


def test_render_markdown_and_plot(tmp_path: Path) -> None:
    rows = [
        {
            "system": "ohs",
            "set": "en-base",
            "ndcg_5": 0.726,
            "recall_10": 0.931,
            "published": True,
            "description": "obsidian-hybrid-search",
        },
        {"system": "fanout", "set": "en-base", "ndcg_5": 0.8123, "recall_10": 1.0, "low": 0.75, "high": 0.87},
        {"system": "fanout", "set": "ru-tricky", "ndcg_5": 0.5, "recall_10": 0.0625},
    ]
    text = rep.render_markdown(rows)
    lines = text.splitlines()
    assert lines[0] == "| run | system | English base | English tricky | Russian base | Russian tricky |"
    assert lines[2] == "| ohs | obsidian-hybrid-search | 0.726 (.931) | – | – | – |"
    assert lines[3] == "| fanout | fanout | 0.812 [.750–.870] (1.00) | – | – | 0.500 (.062) |"
    png = rep.plot_sets(rows, tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@needs_bench
def test_score_runs_cli(tmp_path: Path) -> None:
    mine = json.loads((BENCH / "runs" / "qmd-en.json").read_text(encoding="utf-8"))
    mine["system"] = "mine"
    path = tmp_path / "mine-en.json"
    path.write_text(json.dumps(mine), encoding="utf-8")
    text = rep.score_runs_cli([str(BENCH / "runs" / "ohs-ru.json"), str(path)], BENCH, n_boot=200)
    lines = text.splitlines()
    assert lines[2].startswith("| ohs | obsidian-hybrid-search")
    assert lines[2].endswith("| 0.671 (.879) | 0.684 (.873) |")
    assert lines[3].startswith("| mine | mine | 0.717 [") and lines[3].endswith("| – | – |")
    full = rep.score_runs_cli([str(path)], BENCH, n_boot=0, include_published=True)
    assert len(full.splitlines()) == 2 + len(PUBLISHED) + 1
