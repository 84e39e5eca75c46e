"""The served embedder against the in-actor one on the same GGUF: a batch job's queries per second and the CPU a
query costs on each side; prints one table.

    .venv/bin/python -m bench.served_models [--queries 60] [--threads 2] [--rounds 2]

Both jobs run in-process (`--runner inproc`) over the same small vault (tests/support/vault.py's notes) with caches off,
so every query's texts are embedded: the bundled sample queries with their agent fields, repeated with a number
to make `--queries` distinct rows. In-actor: the job's Embedder runs embeddinggemma on `--threads` threads in the
job's process. Served: llama-cpp-python's server (scripts/llama_server.py) runs the same GGUF with the same
threads, n_batch and n_ctx in its own process, and the job's process holds only the HTTP client: the two share
the box's cores, the job waiting while the server computes (no pinning). The jobs are built first (indexes,
warm-up) and then take turns, round by round, so the box's drift falls on each alike. CPU is each process's own
(user + system, /proc/<pid>/stat for the server). A third job with the fake embedder (no model, same vault)
gives the CPU a query costs without any model, so "client adds" = served client CPU - that.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.child_process import proc_cpu_s

ROOT = Path(__file__).resolve().parent.parent


def _server(path: str, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, str(ROOT / "scripts" / "llama_server.py"), "--model", path, "--model_alias",
           "embeddinggemma", "--embedding", "true", "--n_ctx", "512", "--n_batch", "512", "--n_ubatch", "512",
           "--n_threads", str(threads), "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2).read()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"the server did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.5)


def _queries(n: int, out: Path, tag: str = "") -> Path:
    rows = [json.loads(x) for x in (ROOT / "samples" / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    lines = []
    for i in range(n):
        r = dict(rows[i % len(rows)])
        r["id"] = f"{tag}q{i}"
        r["query"] = f"{r['query']} {tag}{i}"  # distinct texts: nothing is embedded once for two rows
        r.pop("relevant", None)
        lines.append(json.dumps(r, ensure_ascii=False))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _searcher(cfg, vault: Path, tmp: Path, name: str, stack: contextlib.ExitStack):
    """An index of `vault` built with `cfg` and a warm Searcher over it (the model loaded, the connection open)."""
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.exec.runner import Runner

    runner = stack.enter_context(Runner(cfg))
    index_vault(vault, tmp / name, "b", cfg, runner)
    searcher = Searcher(tmp / name, "b", cfg, runner)
    warm = _queries(4, tmp / f"{name}-warm-q.jsonl", "warm-up")
    run_batch(warm, tmp / f"{name}-warm.jsonl", searcher, SearchOptions(n=5))
    return searcher


def _round(searcher, queries: Path, out: Path, server_pid: int | None) -> tuple[float, float, float]:
    """(queries/s, the job's CPU ms a query, the server's CPU ms a query) of one batch job."""
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import SearchOptions

    n = len(queries.read_text().splitlines())
    t, c = time.perf_counter(), time.process_time()
    s = proc_cpu_s(f"/proc/{server_pid}/stat") if server_pid else 0.0
    run_batch(queries, out, searcher, SearchOptions(n=5))
    wall = time.perf_counter() - t
    return n / wall, 1000 * (time.process_time() - c) / n, 1000 * (proc_cpu_s(f"/proc/{server_pid}/stat") - s) / n if server_pid else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--local-batches", default="8,32",
                    help="embedder.batch_size values of the in-actor runs (texts per embed() call; the profile's is 8, "
                         "the served client's request holds remote.batch_size=32)")
    args = ap.parse_args(argv)
    from fanout.actors._llama import model_path

    from fanout.config import load_config
    from tests.support.vault import write_vault

    tmp = Path(tempfile.mkdtemp(prefix="served-bench-"))
    vault = write_vault(tmp / "vault")
    queries = _queries(args.queries, tmp / "q.jsonl")
    common = {"cache": {"enabled": False}, "chunk": {"check_context": False},
              "embedder": {"n_threads": args.threads}}
    local = load_config("local").replace(**common)
    names = [f"in-actor, {b} texts a call" for b in args.local_batches.split(",")]
    proc, url = _server(str(model_path(local, "embedder")), args.threads, tmp / "server.log")
    got: dict[str, list[tuple[float, float, float]]] = {}
    outs: dict[str, Path] = {}
    try:
        with contextlib.ExitStack() as stack:
            jobs = {name: (_searcher(local.replace(embedder={"batch_size": int(b)}), vault, tmp, f"local{b}", stack), None)
                    for name, b in zip(names, args.local_batches.split(","))}
            served = local.replace(models={"embedder": f"openai:embeddinggemma@{url}"})
            jobs["served"] = (_searcher(served, vault, tmp, "served", stack), proc.pid)
            fake = load_config("fake").replace(cache={"enabled": False})
            jobs["no model (fake)"] = (_searcher(fake, vault, tmp, "fake", stack), None)
            for r in range(args.rounds):  # the jobs take turns, so the box's drift falls on each alike
                for j, (name, (searcher, pid)) in enumerate(jobs.items()):
                    outs[name] = tmp / f"job{j}-{r}.jsonl"
                    got.setdefault(name, []).append(_round(searcher, queries, outs[name], pid))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    rows = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in got.items()}
    outs.pop("no model (fake)")
    pages = {k: [[r["path"] for r in json.loads(x)["results"]] for x in p.read_text().splitlines()]
             for k, p in outs.items()}
    first = next(iter(rows))
    print(f"\n{args.queries} queries (the sample queries, with their agent fields where they have them), in-process "
          f"batch jobs taking turns, embeddinggemma Q8_0 on {args.threads} threads, {os.cpu_count()} cores, median "
          f"of {args.rounds}\n")
    print("| embedder | queries/s | job CPU ms a query | server CPU ms a query | top-5 pages as served |")
    print("|---|---|---|---|---|")
    for name, (qps, cpu, scpu) in rows.items():
        same = (f"{sum(a == b for a, b in zip(pages[name], pages['served']))}/{len(pages['served'])}"
                if name in pages else "")
        print(f"| {name} | {qps:.1f} | {cpu:.1f} | {scpu:.1f} | {same} |")
    ratio = rows["served"][0] / rows[first][0]
    print(f"\nserved / {first}: {ratio:.2f} of its queries per second; client CPU a query beyond a job without a "
          f"model: {rows['served'][1] - rows['no model (fake)'][1]:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
