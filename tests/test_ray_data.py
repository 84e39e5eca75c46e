"""The batch and expand jobs as ONE Ray Data Dataset on a quiet private local Ray.

Checked: Ray Data output == in-process output (fake models, and real models on the bundled sample vault);
kill -9 of a Ray batch, then the same command: the output equals an uninterrupted run and the killed
run's Ray processes and temp dir are gone within seconds; an actor pool that cannot be placed fails fast
with the runner's message; the expand job runs as a Dataset.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.vault import write_vault

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def fake_cfg():
    from fanout.config import load_config

    return load_config("fake").replace(runner={"object_store_mb": 128})


@pytest.fixture(scope="module")
def fake_db(tmp_path_factory, fake_cfg) -> Path:
    from fanout.pipelines.index import index_vault

    from fanout.exec.runner import Runner

    base = tmp_path_factory.mktemp("rd")
    db = base / "db"
    with Runner(fake_cfg) as r:
        index_vault(write_vault(base / "vault"), db, "t", fake_cfg, r)
    return db


@pytest.fixture(scope="module")
def ray_runner(fake_cfg):
    from fanout.exec.ray_runner import RayRunner

    with RayRunner(fake_cfg) as r:
        yield r


def _queries(n: int) -> list[dict]:
    words = ["sync", "code", "links", "daily", "блины", "синхронизация", "heading", "template", "history"]
    rows = [{"id": f"q{i}", "query": f"{words[i % 9]} notes {i}", "rephrased_query": f"how does {words[i % 9]} work"}
            for i in range(n)]
    rows[5] = {"id": "q1", "query": "a duplicate id"}
    rows[7] = {"id": "bad", "query": ""}
    rows.append({"query": "no id"})
    return rows


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + "{not json\n",
                    encoding="utf-8")
    return path


def test_ray_data_output_equals_in_process_output(tmp_path, fake_db, fake_cfg, ray_runner):
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.exec.runner import Runner

    q = _write(tmp_path / "q.jsonl", _queries(300))
    opts = SearchOptions(n=5, explain=True)
    with Runner(fake_cfg) as r:
        a = run_batch(q, tmp_path / "inproc.jsonl", Searcher(fake_db, "t", fake_cfg, r), opts)
    seen: list[tuple[int, int]] = []  # progress off a TTY: (answered, total) per written block
    b = run_batch(q, tmp_path / "ray.jsonl", Searcher(fake_db, "t", fake_cfg, ray_runner), opts,
                  on_slice=lambda done, total: seen.append((done, total)))
    assert a["runner"] == "inproc" and b["runner"] == "ray"
    # every CPU stage has its own timing, measured in the actors and carried back with each block (RunStats); the
    # model stages run unwrapped on Ray Data (fanout/exec/ray_data.py chained says why)
    timed = b["timings"]
    assert set(timed) == set(a["timings"]) - {"EmbedVariants"} and timed["Retrieve"] > 0, timed
    assert seen[0] == (0, 302) and seen[-1] == (302, 302) and seen == sorted(seen)
    assert (tmp_path / "ray.jsonl").read_text() == (tmp_path / "inproc.jsonl").read_text()
    assert a["errors"] == b["errors"] == 3 and a["queries"] == b["queries"] == 302
    # the same job with its input read by Ray Data's read tasks (a job over runner.driver_read_rows), and its
    # embedder actor holding two model instances that take its calls side by side (fanout/exec/runner.py Instances)
    ray_runner.cfg = fake_cfg.replace(runner={"driver_read_rows": 0}, embedder={"instances": 2})
    try:
        c = run_batch(q, tmp_path / "ray.parquet", Searcher(fake_db, "t", fake_cfg, ray_runner), opts)
    finally:
        ray_runner.cfg = fake_cfg
    d = run_batch(q, tmp_path / "inproc.parquet", Searcher(fake_db, "t", fake_cfg, Runner(fake_cfg)), opts)
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "ray.parquet").equals(pq.read_table(tmp_path / "inproc.parquet"))
    assert c["errors"] == d["errors"] == 3


def test_every_model_stage_on_ray_data_equals_in_process(tmp_path, fake_db, fake_cfg, ray_runner):
    """Expansion and rerank on: three model pools, each after the CPU stage that reads its cache
    (LookupExpansions, LookupVectors, LookupRerank), fit the private local Ray and answer as the loop does."""
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.exec.runner import Runner

    cfg = fake_cfg.replace(cache={"enabled": False})  # both runs generate and score (no cache between them)
    rows = _queries(40)
    for r in rows[::2]:  # half the queries without agent fields: the expander writes theirs
        r.pop("rephrased_query", None)
    q = _write(tmp_path / "q.jsonl", rows)
    opts = SearchOptions(n=5, expand=True, rerank=True, explain=True)
    with Runner(cfg) as r:
        a = run_batch(q, tmp_path / "inproc.jsonl", Searcher(fake_db, "t", cfg, r), opts)
    b = run_batch(q, tmp_path / "ray.jsonl", Searcher(fake_db, "t", cfg, ray_runner), opts)
    assert b["runner"] == "ray" and a["expansion"].get("model", 0) > 0
    assert {"LookupExpansions", "LookupRerank"} <= set(b["timings"]), b["timings"]
    assert (tmp_path / "ray.jsonl").read_text() == (tmp_path / "inproc.jsonl").read_text()
    assert a["expansion"] == b["expansion"] and a["queries"] == b["queries"] == 42
    # the CPU stages' counters, summed over every Ray Data actor (carried in the parts), are the in-process
    # loop's; the model stages' own are reported in-process only (fanout/exec/ray_data.py chained says why)
    model = {"ExpandQueries", "EmbedVariants", "RerankCandidates"}
    assert b["stages"] == {k: v for k, v in a["stages"].items() if k not in model}, (a["stages"], b["stages"])
    assert a["stages"]["ExpandQueries"]["model"] == a["expansion"]["model"] > 0


def _fanout_ray_dirs() -> set[str]:
    return {str(p) for p in Path("/tmp").glob("fanout-ray-*")}


def _procs_with(text: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if text in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(p))
            except OSError:
                pass
    return out


def test_kill_9_of_a_ray_batch_resumes_to_the_same_output_and_leaves_nothing(tmp_path, fake_db, fake_cfg):
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.exec.runner import Runner

    slow = tmp_path / "slow.yaml"
    slow.write_text("extends: fake\nfake:\n  embed_sleep_s: 0.004\nretriever:\n  batch_size: 16\n"
                    "runner:\n  object_store_mb: 128\n")
    q = _write(tmp_path / "q.jsonl", _queries(600))
    expected = tmp_path / "expected.jsonl"
    with Runner(fake_cfg) as r:
        run_batch(q, expected, Searcher(fake_db, "t", fake_cfg.replace(cache={"enabled": False}), r),
                  SearchOptions(n=3))
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "fanout.cli.main", "batch", str(q), "--out", str(out), "--db", str(fake_db),
           "--collection", "t", "--config", str(slow), "--runner", "ray", "-n", "3"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(ROOT)}
    before = _fanout_ray_dirs()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = Path(str(out) + ".parts") / "results"
    deadline = time.time() + 180
    while time.time() < deadline and not list(results.glob("*.parquet")) and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
    new_dirs = _fanout_ray_dirs() - before
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert new_dirs and not out.exists()
    deadline = time.time() + 15  # the watchdog kills the private Ray and removes its dir within seconds
    while time.time() < deadline and (any(Path(d).exists() for d in new_dirs)
                                      or any(_procs_with(d) for d in new_dirs)):
        time.sleep(0.2)
    assert not any(Path(d).exists() for d in new_dirs)
    assert not any(_procs_with(d) for d in new_dirs)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 3, done.stderr[-2000:]  # 3 bad rows
    assert "(0 resumed)" not in done.stdout, done.stdout
    assert out.read_text() == expected.read_text()


def test_unplaceable_pool_fails_fast_with_the_message(fake_cfg, fake_db, ray_runner):
    from fanout.pipelines.search import search_stages

    from fanout.exec.ray_runner import RayRunner

    for change, why in (({"retriever": {"num_cpus": 64}}, "no node has 64 CPUs: lower retriever.num_cpus"),
                        ({"embedder": {"n_gpu_layers": -1}}, "set embedder.n_gpu_layers: 0"),
                        ({"retriever": {"count": 40}}, "lower retriever.count")):
        bad = fake_cfg.replace(**change, runner={"fit_pools": False})  # pools pinned: refused, not scaled to fit
        t = time.perf_counter()
        with RayRunner(bad) as rr, pytest.raises(RuntimeError, match="could not be placed") as e:
            rr.dataset(search_stages(bad, fake_db, "t"), [])  # the fixture's Ray, another config
        assert time.perf_counter() - t < 10 and why in str(e.value)


def test_expand_job_runs_as_one_dataset(tmp_path, fake_db, fake_cfg, ray_runner):
    from fanout.pipelines.precompute import run_expand

    from fanout.store.caches import Caches
    from fanout.store.db import Collection

    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"query": f"expand me {i}"}) + "\n" for i in range(2000)))
    st = run_expand(log, fake_db, "t", fake_cfg, ray_runner, progress=False)
    assert st["expanded"] + st["cached"] == 2000
    keys = Caches(Collection(fake_db, "t"), "", "x").table("expansions")["key"].to_pylist()
    assert len(keys) == len(set(keys)) >= 2000
    again = run_expand(log, fake_db, "t", fake_cfg, ray_runner, progress=False)
    assert again["expanded"] == 0 and again["cached"] == 2000


def test_ray_data_equals_in_process_with_real_models_on_the_sample_vault(tmp_path, cfg, runner, demo_run):
    """The bundled sample vault and its queries, real embedder: byte-identical results files."""
    import shutil

    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.exec.ray_runner import RayRunner

    assert demo_run.code == 0, demo_run.out[-2000:]
    db = tmp_path / "db"  # the sample vault as `fanout demo` indexed it (index_vault, local profile), a copy
    shutil.copytree(demo_run.index, db)
    q = ROOT / "samples" / "queries.jsonl"
    # a search's texts one an embed() call: its vectors then do not depend on how each engine groups a batch
    nocache = cfg.replace(cache={"enabled": False}, runner={"object_store_mb": 128},
                          embedder={"num_cpus": 0.5, "query_batch_size": 1})
    run_batch(q, tmp_path / "a.jsonl", Searcher(db, "samples", nocache, runner), SearchOptions(n=5))
    with RayRunner(nocache) as rr:
        st = run_batch(q, tmp_path / "b.jsonl", Searcher(db, "samples", nocache, rr), SearchOptions(n=5))
    assert st["runner"] == "ray"
    a, b = (tmp_path / "a.jsonl").read_text(), (tmp_path / "b.jsonl").read_text()
    assert a.count("\n") == b.count("\n") == len(q.read_text().splitlines())
    # the same lines to the last digit (packed, the default, scores differed by up to 1.8e-3 and a near tie
    # of the sample's s10 swapped)
    for la, lb in zip(a.splitlines(), b.splitlines()):
        assert json.loads(la) == json.loads(lb)


def test_the_private_local_ray_refuses_a_connection_without_its_token(ray_runner):
    """Another local process (or user) reaching the private Ray's loopback port without the token is refused:
    it could otherwise run code as the user who started fanout."""
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH", "")
    assert os.environ.get("RAY_AUTH_MODE") == "token" and os.stat(token_path).st_mode & 0o077 == 0
    gcs = ray_runner._ray.get_runtime_context().gcs_address
    code = f"import ray; ray.init(address={gcs!r}, log_to_driver=False); print('CONNECTED')"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    # a refused client tries the GCS once a second, RAY_NUM_REDIS_GET_RETRIES (Ray's 20) times, before it gives
    # up: 2 tries are enough to be refused twice and cut ~20 s a client (the server's check is what is proved)
    env["RAY_NUM_REDIS_GET_RETRIES"] = "2"
    for extra in ({"RAY_AUTH_MODE": "disabled"}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}):
        try:
            res = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True,
                                 text=True, timeout=45, check=False)
        except subprocess.TimeoutExpired as e:
            out, err = (e.stdout or b"").decode(errors="replace"), (e.stderr or b"").decode(errors="replace")
        else:
            out, err = res.stdout, res.stderr
        assert "CONNECTED" not in out, (extra, out, err[-2000:])
        assert "InvalidAuthToken" in err, (extra, err[-2000:])  # refused for its token, not unreachable


def test_indexing_on_ray_data_with_two_models_per_embedder_actor_equals_in_process(tmp_path, fake_db, fake_cfg,
                                                                                    ray_runner):
    """`embedder.instances: 2`: the index job's embedder actor takes two calls at once, each on a model of its
    own (fanout/exec/runner.py Instances); the chunks and their vectors are the in-process index's."""
    from fanout.pipelines.index import index_vault

    from fanout.store.db import Collection

    ray_runner.cfg = fake_cfg.replace(embedder={"instances": 2, "batch_size": 2})
    try:
        index_vault(write_vault(tmp_path / "vault"), tmp_path / "db", "t", fake_cfg, ray_runner)
    finally:
        ray_runner.cfg = fake_cfg

    def chunks(db: Path):
        col = Collection(db, "t", fake_cfg)
        t = col.table(col.chunks_name).to_arrow()
        return t.select(["chunk_id", "vector"]).sort_by("chunk_id")

    a, b = chunks(fake_db), chunks(tmp_path / "db")
    assert a.num_rows > 4 and a.equals(b)
