"""Memory of a watcher's round worker process beside the serving process, with the default (local) models: a
vault (by default 20 short notes written here) watched by `kb.watch` with `watch.rounds_in` thread and process,
one query-mode search run
in the serving process (its embedder loaded), then each process's resident memory from /proc: RSS, its anonymous
part (private to the process) and its file-backed part (the GGUF weights, memory-mapped: one copy in the page
cache, shared), and PSS (each shared page divided among the processes that map it).

    .venv/bin/python -m bench.worker_memory [--vault samples/vault] [--config local]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon, RssFile (status) and Pss (smaps_rollup) of `pid`, in MB."""
    out: dict[str, float] = {}
    for name, keys in (("status", ("VmRSS", "RssAnon", "RssFile")), ("smaps_rollup", ("Pss",))):
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            k = line.split(":")[0]
            if k in keys:
                out[k] = int(line.split()[1]) / 1024
    return out


def measure(vault: Path | None, config: str, rounds_in: str) -> list[tuple[str, dict[str, float]]]:
    import fanout
    from fanout.config import load_config

    cfg = load_config(config).replace(watch={"rounds_in": rounds_in, "tick_ms": 50, "step_ms": 100})
    with tempfile.TemporaryDirectory(prefix="fanout-worker-mem-") as tmp, fanout.open(Path(tmp) / "db", config=cfg) as kb:
        if vault is None:
            vault = Path(tmp) / "vault"
            vault.mkdir()
            for i in range(20):
                (vault / f"Note {i}.md").write_text(f"# Note {i}\n\nSync settings, note {i}, plugins and themes.\n")
        w = kb.watch(vault)
        assert w.wait(1, 1800) and w.last.error is None, w.last
        assert w.warmed.wait(600)
        kb.search("how do I sync my notes?", mode="query", rerank=False, expand=False)  # the serving embedder
        rows = [("serving process", memory_mb(os.getpid()))]
        if w.worker is not None and w.worker.pid is not None:
            rows.append(("its round worker", memory_mb(w.worker.pid)))
        w.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vault", type=Path, default=None)
    ap.add_argument("--config", default="local")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        import json

        print(json.dumps(measure(args.vault, args.config, args.child)))
        return 0
    import json
    import subprocess

    print(f"\n{args.vault or '20 short notes'} with the {args.config!r} models, each way in a fresh process\n")
    print("| watch.rounds_in | process | RSS MB | anonymous MB | file-backed MB | PSS MB |\n|---|---|---|---|---|---|")
    for how in ("thread", "process"):
        vault = ["--vault", str(args.vault)] if args.vault else []
        out = subprocess.run([sys.executable, "-m", "bench.worker_memory", *vault, "--config", args.config,
                              "--child", how], cwd=ROOT, check=True, capture_output=True, text=True)
        for name, m in json.loads(out.stdout.strip().splitlines()[-1]):
            print(f"| {how} | {name} | {m['VmRSS']:.0f} | {m['RssAnon']:.0f} | {m['RssFile']:.0f} | {m['Pss']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
