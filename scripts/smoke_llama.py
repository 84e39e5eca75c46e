"""Set-up smoke test of the llama-cpp-python build on this CPU, run by scripts/setup.sh in a subprocess.

    .venv/bin/python scripts/smoke_llama.py [--config local]

Loads the ggml CPU variant the actors would use (actors/_llama.py: load_backends), embeds a real quantized
prompt of a few hundred tokens with the profile's embedder (short prompts can pass where long ones hit the
kernels that crash) and checks the vectors mean something (a paraphrase beats an unrelated text), then
generates one token with the expander and checks it is the obvious one. Exit 0 and one line naming the
variant when all is well; exit 1 with the reason otherwise. A SIGILL kills this process, not set-up:
setup.sh reports it with the way to force another variant ($FANOUT_GGML_CPU).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import numpy as np
import pyarrow as pa
from fanout.actors._llama import backend_info

from fanout.config import load_config

log = logging.getLogger("smoke")
# ~300 tokens of plain documentation prose: long enough for the batched (GEMM) quantized kernels
LONG = ("Sync keeps your vault the same on every device you sign in on. " * 4 + " ".join(
    f"Step {i}: open Settings, choose Sync, pick the remote vault number {i} and wait until the status "
    "icon turns green before you close the app." for i in range(1, 9)))
QUERY = "how do I keep my notes the same on all my devices"
UNRELATED = "Add flour and eggs to the milk, whisk, and fry the pancakes on a hot pan for two minutes."


def check_embedder(cfg) -> dict[str, float]:
    from fanout.actors.embedder import Embedder

    emb = Embedder(cfg)
    t = time.perf_counter()
    out = emb(pa.table({"text": [QUERY, LONG, UNRELATED], "role": ["query", "document", "document"]}))
    secs = time.perf_counter() - t
    v = np.asarray(out["vector"].to_pylist(), dtype=np.float32)
    if not np.isfinite(v).all() or not np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3):
        raise SystemExit(f"embedder gave non-finite or non-unit vectors: norms {np.linalg.norm(v, axis=1)}")
    good, bad = float(v[0] @ v[1]), float(v[0] @ v[2])
    if not good > bad + 0.1:
        raise SystemExit(f"embedder output is wrong: query~paraphrase {good:.3f} is not above "
                         f"query~unrelated {bad:.3f} + 0.1 (a broken CPU kernel gives such vectors)")
    tokens = len(emb.llm.tokenize(LONG.encode(), add_bos=True))
    return {"cos_paraphrase": round(good, 3), "cos_unrelated": round(bad, 3), "long_tokens": tokens,
            "embed_s": round(secs, 2)}


def check_expander(cfg) -> dict[str, str]:
    from fanout.actors._llama import load_llama, model_path

    llm = load_llama(model_path(cfg, "expander"), cfg.expander)
    prompt = "The capital city of France is the city of"
    out = llm.create_completion(prompt, max_tokens=1, temperature=0.0)
    word = str(out["choices"][0]["text"])  # type: ignore[index]
    if "paris" not in word.lower():
        raise SystemExit(f"expander's first greedy token after {prompt!r} is {word!r}, not ' Paris' "
                         "(a broken CPU kernel gives such output)")
    return {"expander_token": word}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None, help="profile or YAML path (default: local / $FANOUT_CONFIG)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    cfg = load_config(args.config)
    info = backend_info()
    res = {"variant": info["variant"], **check_embedder(cfg), **check_expander(cfg)}
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
