"""A Python user's first hour with the API (issue 52's list): what a data engineer expects of `kb.batch`, the
errors' types and wording, listing collections, filters that name nothing, notebook ergonomics, the caches'
versions. Fake models, the bundled sample vault."""

from __future__ import annotations

import logging

import pandas as pd
import pyarrow as pa
import pytest

import fanout
from fanout.config import data_dir

VAULT = data_dir("samples") / "vault"


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    db = tmp_path_factory.mktemp("first-hour") / "db"
    with fanout.open(db, collection="samples", config="fake") as kb:
        kb.index(VAULT)
        yield kb


def test_dir_lists_the_public_names():
    names = dir(fanout)
    for name in ("open", "collections", "KnowledgeBase", "GapsResult", "CollectionBusy", "FanoutError", "ray"):
        assert name in names, name
    assert issubclass(fanout.CollectionBusy, fanout.FanoutError) and issubclass(fanout.CollectionBusy, RuntimeError)


def test_collections_are_listed_and_a_wrong_name_names_the_closest(kb, tmp_path):
    assert fanout.collections(kb.db) == ["samples"]
    assert fanout.collections(tmp_path / "no-db-here") == []
    for wrong in ("sampels", "notes"):
        with fanout.open(kb.db, collection=wrong, config="fake") as other, \
                pytest.raises(fanout.IndexStateError, match=r"its collections: \['samples'\]") as e:
            other.search("backups")
        assert ("did you mean 'samples'" in str(e.value)) == (wrong == "sampels")
    with fanout.open(tmp_path / "empty", config="fake") as empty, \
            pytest.raises(fanout.IndexStateError, match="no collection yet"):
        empty.search("backups")


def test_deliberate_errors_are_fanout_errors(kb, tmp_path):
    with pytest.raises(fanout.FanoutError, match="not found") as e:
        kb.batch(tmp_path / "missing.jsonl")
    assert isinstance(e.value, FileNotFoundError)  # still what it was
    with pytest.raises(fanout.UserError, match="unknown output file type"):
        kb.batch([{"query": "backups"}], out=tmp_path / "a.txt")


def test_an_output_folder_is_made_one_level_deep_only(kb, tmp_path):
    with pytest.raises(fanout.UserError, match="does not exist; create it first"):
        kb.batch([{"query": "backups"}], out=tmp_path / "no" / "such" / "a.parquet")
    assert not (tmp_path / "no").exists()
    res = kb.batch([{"query": "backups"}], out=tmp_path / "new" / "a.parquet")
    assert res.to_arrow().num_rows > 0


def test_batch_takes_the_callers_columns_and_gives_them_back(kb):
    df = pd.DataFrame({"question": ["how long are backup snapshots kept", "", "which VLAN are the smart plugs on"],
                       "ticket": ["T-1", "T-2", "T-3"], "team": ["ops", "ops", "home"]})
    res = kb.batch(df, query_column="question", id_column="ticket", n=2)
    t = res.to_arrow()
    assert {"qid", "rank", "path", "ticket", "team"} <= set(t.column_names) and "question" not in t.column_names
    rows = t.to_pylist()
    assert {r["qid"] for r in rows} == {"T-1", "T-2", "T-3"}
    assert all(r["ticket"] == r["qid"] and r["team"] == {"T-1": "ops", "T-2": "ops", "T-3": "home"}[r["qid"]]
               for r in rows)
    bad = [r for r in rows if r["error"]]
    assert [r["qid"] for r in bad] == ["T-2"] and bad[0]["field"] == "query"
    out = res.to_pandas()  # an error row's rank is missing: the column stays integer
    assert str(out["rank"].dtype) == "Int32" and out["rank"].isna().sum() == 1


def test_batch_refuses_a_table_without_the_query_column_up_front(kb):
    with pytest.raises(fanout.UserError, match=r"no column 'query'.*its columns: \['q', 'x'\]"):
        kb.batch(pa.table({"q": ["a"], "x": [1]}))
    with pytest.raises(fanout.UserError, match="no column 'nope'"):
        kb.batch(pa.table({"query": ["a"]}), id_column="nope")
    with pytest.raises(fanout.UserError, match=r"column\(s\) \['score'\]"):
        kb.batch([{"query": "backups", "score": 3}])
    assert kb.batch([{"query": "backups", "score": 3}], keep_columns=False).to_arrow().num_rows > 0


def test_batch_takes_a_list_of_query_strings(kb):
    t = kb.batch(["how long are backup snapshots kept", "which VLAN are the smart plugs on"], n=1).to_arrow()
    assert t.column("qid").to_pylist() == ["row-1", "row-2"] and not any(t.column("error").to_pylist())


def test_a_filter_that_names_nothing_says_so(kb):
    with pytest.raises(fanout.RequestError, match=r"no indexed note is in folder 'Setup'.*did you mean 'en/Setup'"):
        kb.search("backups", filter={"folder": "Setup"})
    with pytest.raises(fanout.RequestError, match="no indexed note has tag"):
        kb.search("backups", filter={"tag": "no-such-tag-anywhere"})
    with pytest.raises(fanout.RequestError, match="no indexed note's path starts with"):
        kb.search("backups", filter={"path": "Nowhere/"})
    # alternatives: one of them naming notes is enough
    assert kb.search("backups", filter={"folder": ["Setup", "en/Setup"]}, n=3)
    rows = kb.batch([{"id": "a", "query": "backups", "filter": {"folder": "Setup"}},
                     {"id": "b", "query": "backups"}]).to_arrow().to_pylist()
    assert [r["field"] for r in rows if r["qid"] == "a"] == ["filter.folder"]
    assert all(r["error"] is None for r in rows if r["qid"] == "b")


def test_messages_are_worded_for_the_call(kb):
    with pytest.raises(fanout.RequestError) as e:
        kb.search("   ")
    assert "row 1" not in str(e.value) and str(e.value).startswith("query: ")


def test_hits_slices_stay_hits(kb):
    hits = kb.search("how long are backup snapshots kept", n=5)
    head = hits[:2]
    assert isinstance(head, fanout.Hits) and head.query == hits.query and len(head) == 2
    assert isinstance(hits[0], fanout.Hit) and head.to_arrow().num_rows == 2


def test_a_closed_knowledge_base_refuses_every_call(tmp_path, kb):
    other = fanout.open(kb.db, collection="samples", config="fake")
    other.status()
    other.close()
    for call in (other.status, lambda: other.get("Backups"), lambda: other.search("x"),
                 lambda: other.batch([{"query": "x"}])):
        with pytest.raises(fanout.UserError, match="is closed"):
            call()


@pytest.mark.slow
def test_the_query_vector_cache_keeps_a_bounded_number_of_versions(tmp_path):
    """Every search with a new text commits a cache version; compaction removes the old ones."""
    from fanout.config import load_config
    from fanout.store.db import Collection

    cfg = load_config("fake").replace(cache={"optimize_every": 5, "cleanup_after_s": 0})
    with fanout.open(tmp_path / "db", collection="c", config=cfg) as kb:
        kb.index(VAULT)
        for i in range(30):
            kb.search(f"backup snapshot question number {i}", mode="vsearch", n=1)
        ds = Collection(str(tmp_path / "db"), "c", cfg).dataset("c_cache_qvec")
        assert len(ds.versions()) <= 8 and ds.count_rows() >= 30


def test_fit_pools_scales_the_pools_to_a_two_cpu_ray(caplog):
    """A plain 2-CPU `ray.init()` and every bundled profile: the search pools plus the caller's one task fit
    after scaling num_cpus (logged); `runner.fit_pools: false` refuses as before."""
    from fanout.config import load_config
    from fanout.exec.ray_data import check_fits
    from fanout.exec.runner import StageSpec

    class FakeRay:  # what check_fits reads of a RayRunner
        def __init__(self, cfg):
            self.cfg = cfg

        def nodes(self):
            return [{"Resources": {"CPU": 2.0}, "NodeID": "n1"}]

        def placement_error(self, pool, model=True):
            return fanout.PlacementError(f"cannot place {pool}")

    specs = [StageSpec(object, pool="retriever"), StageSpec(object, pool="expander", role="expander"),
             StageSpec(object, pool="embedder", role="embedder"), StageSpec(object, pool="reranker", role="reranker"),
             StageSpec(object, pool="writer", single=True)]
    for profile in ("fake", "local", "local-1.5b"):
        r = FakeRay(load_config(profile))
        with caplog.at_level(logging.WARNING, logger="fanout.exec.ray_data"):
            check_fits(r, specs, reserve=1.0)
        want = sum((1 if s.single else getattr(r.cfg, s.pool).count) * getattr(r.cfg, s.pool).num_cpus
                   for s in specs)
        assert want <= 1.0 + 1e-6, profile
    assert "scaled by" in caplog.text
    r = FakeRay(load_config("local").replace(runner={"fit_pools": False}))
    with pytest.raises(fanout.PlacementError, match="Ray Data would wait forever"):
        check_fits(r, specs, reserve=1.0)
    with pytest.raises(fanout.PlacementError):  # production's models ask for GPUs: no scaling places them
        check_fits(FakeRay(load_config("production")), specs, reserve=1.0)


def test_the_fork_warnings_of_lance_and_lancedb_are_silenced_for_ray_s_fork_exec():
    """Ray starts its processes with fork + exec (no Lance code runs in the child): fanout silences both
    libraries' warnings about forking, which a Ray start after a search printed once per process."""
    import subprocess
    import sys

    code = ("import warnings, fanout; print('\\n'.join(f[1].pattern for f in warnings.filters "
            "if f[0] == 'ignore' and f[1] is not None))")
    patterns = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "lance is not fork-safe" in patterns and "lancedb fork support is experimental" in patterns
