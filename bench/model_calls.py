"""Timing and a tiny quality check of the model calls: expansion per query, rerank per (query, 40 passages).

    .venv/bin/python -m bench.model_calls [--part expand|rerank|mrr|split|all]
        [--models SPEC ...] [--threads N] [--out results.json]

Numbers are wall and CPU seconds on whatever machine runs it, with its load average (ours is a shared
2-core VM: there `--threads 1` was 20-40x faster than 2 while other work ran, outputs identical).
The MRR set is hand-made: 6 queries (4 EN, 2 RU), one relevant passage and four same-domain distractors
each, relevant first in the list.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import time
from pathlib import Path

import pyarrow as pa

from fanout.config import Config

log = logging.getLogger("bench.model_calls")
QWEN = "pypi:qwen2.5-coder-0.5b-instruct-q4_k_m"
SMOL = "pypi:smollm2-135m-instruct-q4_1"
EN_QUERIES = ["how do I sync my notes between devices", "how often do backups run",
              "which VLAN are the smart plugs on"]
RU_QUERIES = ["как синхронизировать заметки между устройствами", "как часто делаются резервные копии",
              "сколько жарить сырники"]
MRR_SET: list[tuple[str, list[str]]] = [
    ("how often do backups run", [
        "Restic runs every night at 02:30 and keeps 7 daily, 4 weekly and 12 monthly snapshots.",
        "ZFS snapshots are not backups: they protect you from deleting a file, not from losing the pool.",
        "The UPS keeps the NAS running for about 14 minutes during a power cut, then shuts it down.",
        "To restore a single file, load the repository settings and run restic restore with --include.",
        "The media server transcodes films on the fly; hardware acceleration uses the iGPU."]),
    ("which VLAN are the smart plugs on", [
        "IoT devices such as smart plugs, the thermostat and the TV live on VLAN 30, which has no internet.",
        "The guest Wi-Fi is isolated from the trusted network and limited to 20 Mbit/s.",
        "Smart plugs can be scheduled from the Home Assistant dashboard under Automations.",
        "WireGuard clients get addresses from 10.8.0.0/24 and reach the trusted VLAN only.",
        "The switch in the rack has 24 ports; ports 1-8 are PoE for the cameras and access points."]),
    ("sourdough starter feeding ratio", [
        "Feed the starter at a 1:5:5 ratio of starter, flour and water every 12 hours at room temperature.",
        "Bake the loaf at 250 degrees with the lid on for 20 minutes, then 20 more without it.",
        "A starter that smells of acetone is hungry: discard most of it and feed it twice a day.",
        "Cold brew uses a 1:8 ratio of coarse coffee to water, steeped for 16 hours in the fridge.",
        "Kimchi ferments at room temperature for two days before it goes into the fridge."]),
    ("how do I connect to the VPN from my phone", [
        "Install the WireGuard app, scan the QR code from the admin page and enable the tunnel.",
        "The VPN server runs on the router; its config lives in /etc/wireguard/wg0.conf.",
        "Phones on the guest Wi-Fi cannot reach the NAS or the printers.",
        "To add a new laptop to the VPN, generate a key pair and ask an admin to add the peer.",
        "The phone backup app uploads photos to the NAS every night over Wi-Fi."]),
    ("как часто делаются резервные копии", [
        ("Резервное копирование запускается каждую ночь в 02:30; "
         "хранятся 7 ежедневных и 4 еженедельных копии."),
        "Чтобы восстановить файл, подключитесь к VPN и выполните restic restore с нужным путём.",
        "Умный дом управляется через Home Assistant, который работает на отдельном мини-компьютере.",
        "Снимки ZFS не заменяют резервные копии: они защищают только от случайного удаления.",
        "Дежурства меняются каждый понедельник, график висит в общем календаре."]),
    ("сколько жарить сырники", [
        "Жарьте сырники на среднем огне по три минуты с каждой стороны, пока не станут золотистыми.",
        "Творог нужно отжать: заверните его в марлю и оставьте под грузом на 30 минут.",
        "Борщ варят на говяжьем бульоне около двух часов, свёклу добавляют в конце.",
        "Квас бродит в тёплом месте двое суток, затем его разливают по бутылкам.",
        "Для сырников нужно 400 г творога, одно яйцо и три ложки муки."]),
]


THREADS: list[int] = []  # --threads, when given


def _cfg(role: str, spec: str) -> Config:
    extra = {role: {"n_threads": THREADS[0]}} if THREADS else {}
    return Config().replace(models={role: spec}, **extra)


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def bench_expand(models: list[str]) -> list[dict[str, object]]:
    from fanout.actors.expander import QueryExpander

    out = []
    for spec in models:
        exp = QueryExpander(_cfg("expander", spec))
        for lang, queries in (("en", EN_QUERIES), ("ru", RU_QUERIES)):
            for i, q in enumerate(queries):
                t0, c0 = time.perf_counter(), time.process_time()
                batch = pa.table({"qid": [str(i)], "query": [q], "intent": [None], "lang": [lang]})
                row = exp(batch).to_pylist()[0]
                dt, cpu = time.perf_counter() - t0, time.process_time() - c0
                cyr = sum(bool(re.search(r"[\u0400-\u04FF]", v["text"])) for v in row["variants"])
                out.append({"model": exp.model_id, "lang": lang, "query": q, "s": round(dt, 2),
                            "cpu_s": round(cpu, 2), "load": _load(),
                            "kept": len(row["variants"]), "cyrillic_variants": cyr, "source": row["source"],
                            "raw": row["raw"]})
                log.info("%s", json.dumps(out[-1], ensure_ascii=False))
        log.info("%s stats %s", exp.model_id, exp.stats)
    return out


def vault_passages(n: int, chars: int = 640) -> list[str]:
    """n passages of ~160 tokens (640 characters of English) cut from the sample vault."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(Path("samples/vault/en").rglob("*.md"))]
    cuts = [t[i:i + chars] for t in texts for i in range(0, max(1, len(t) - chars), chars)]
    return cuts[:n]


def bench_rerank(spec: str, n: int = 40) -> list[dict[str, object]]:
    from fanout.actors.reranker import Reranker

    rr = Reranker(_cfg("reranker", spec))
    docs = vault_passages(n)
    toks = [len(rr.passage_tokens(d, 10_000)) for d in docs]
    out = []
    for reuse in (True, False, True):
        rr.prefix_reuse = reuse
        rr.llm.n_tokens = 0
        t0, c0, e0 = time.perf_counter(), time.process_time(), rr.stats["tokens_evaluated"]
        rr.score(EN_QUERIES[1], docs)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        out.append({"model": rr.model_id, "reuse": reuse, "passages": len(docs),
                    "mean_passage_tokens": round(sum(toks) / len(toks)), "s": round(dt, 1),
                    "cpu_s": round(cpu, 1), "load": _load(),
                    "tokens_evaluated": rr.stats["tokens_evaluated"] - e0})
        log.info("%s", json.dumps(out[-1]))
    return out


def mrr(spec: str, think: bool) -> dict[str, object]:
    """MRR of the relevant passage on MRR_SET, with or without the empty think block."""
    from fanout.actors.reranker import THINK, Reranker

    rr = Reranker(_cfg("reranker", spec))
    rr.think = THINK if think else ""
    ranks = []
    for q, docs in MRR_SET:
        s = rr.score(q, docs)
        ranks.append(1 + sum(x > s[0] for x in s[1:]))
    res = {"model": rr.model_id, "think_block": think, "ranks": ranks,
           "mrr": round(sum(1 / r for r in ranks) / len(ranks), 3), "random_mrr": round(sum(1 / k for k in
                                                                                       range(1, 6)) / 5, 3)}
    log.info("%s", json.dumps(res))
    return res


def split_sensitivity(spec: str) -> dict[str, object]:
    """Score one pair from an empty cache with the same tokens split into decode calls differently."""
    import llama_cpp
    from fanout.actors.reranker import Reranker

    rr = Reranker(_cfg("reranker", spec))
    q, docs = MRR_SET[0]
    system, head, tail = rr.split_prompt(q, None)
    toks = system + head + rr.passage_tokens(docs[1], 10_000) + tail
    res: dict[str, object] = {"model": rr.model_id, "tokens": len(toks)}
    for name, cuts in (("one call", []), ("segments", [len(system), len(system) + len(head)]),
                       ("cut at 30", [30]), ("last token alone", [len(toks) - 1])):
        rr.llm.n_tokens = 0
        for a, b in zip([0, *cuts], [*cuts, len(toks)]):
            rr.llm.eval(toks[a:b])
        logits = llama_cpp.llama_get_logits_ith(rr.llm._ctx.ctx, -1)
        res[name] = round(1 / (1 + math.exp(float(logits[rr.no]) - float(logits[rr.yes]))), 4)
    log.info("%s", json.dumps(res))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["expand", "rerank", "mrr", "split", "all"], default="all")
    ap.add_argument("--models", nargs="+", default=[QWEN, SMOL])
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the config's)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        THREADS.append(args.threads)
    res: dict[str, object] = {}
    if args.part in ("expand", "all"):
        res["expand"] = bench_expand(args.models)
    if args.part in ("rerank", "all"):
        res["rerank"] = bench_rerank(args.models[0])
    if args.part in ("mrr", "all"):
        res["mrr"] = [mrr(m, think) for m in args.models for think in (True, False)]
    if args.part in ("split", "all"):
        res["split"] = split_sensitivity(args.models[0])
    if args.out:
        args.out.write_text(json.dumps(res, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
