"""Doc2query, offline: the local 1.5B writes, for each page of a vault, the questions a user would type that
the page answers (issue 25's next experiment: vocabulary a weak writer's fields lack, added at index time,
never at query time).

Writes one JSONL line per page, `{"path", "questions": [...], "seconds", "prompt_tokens", "gen_tokens"}`, to
OUT (outside the project when the vault is the benchmark's: its docs carry no licence). Resumable: pages
already in OUT are skipped. Nothing here is wired into the index yet; this measures the cost per page and
keeps the questions for the experiment that adds them as a lane.

    python bench/weak_fields/doc2query.py VAULT --out /work/d2q/ru.jsonl [--limit N] [--chars 1200] [--n 3]

Measured 2026-12-04 (2 cores, Qwen2.5-Coder-1.5B Q4_K_M, 2 threads): 5.5-6.2 s a page (prompt ~420 tokens,
40-63 generated), so ~18 minutes for the 176 pages of one language; the Russian questions come in Russian.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

PROMPT = ("Page:\n{text}\n\nWrite {n} short questions, in the page's language, that a user would type and this "
          "page answers. One per line.")
_NUM = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s*")


def questions(reply: str, n: int) -> list[str]:
    """The reply's lines without their numbering, at most n."""
    out = [_NUM.sub("", ln).strip() for ln in reply.splitlines()]
    return [q for q in out if q][:n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("vault", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=0, help="at most this many pages (0: all)")
    ap.add_argument("--chars", type=int, default=1200, help="characters of each page shown to the model")
    ap.add_argument("--n", type=int, default=3, help="questions per page")
    args = ap.parse_args(argv)

    from fanout.actors._llama import load_llama, model_path

    from fanout.config import load_config

    cfg = load_config("local-1.5b")
    llm = load_llama(model_path(cfg, "expander"), cfg.expander, "expander")  # the expander's own settings
    pages = sorted(p for p in args.vault.rglob("*.md") if p.is_file())
    if args.limit:
        pages = pages[:args.limit]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.out.exists():
        done = {json.loads(x)["path"] for x in args.out.read_text(encoding="utf-8").splitlines() if x.strip()}
    with args.out.open("a", encoding="utf-8") as f:
        for p in pages:
            rel = p.relative_to(args.vault).as_posix()
            if rel in done:
                continue
            text = p.read_text(encoding="utf-8", errors="replace")[:args.chars]
            msgs = [{"role": "system", "content": "You write search questions."},
                    {"role": "user", "content": PROMPT.format(text=text, n=args.n)}]
            t = time.perf_counter()
            out = llm.create_chat_completion(messages=msgs, max_tokens=24 * args.n + 16, temperature=0)
            row = {"path": rel, "questions": questions(out["choices"][0]["message"]["content"], args.n),
                   "seconds": round(time.perf_counter() - t, 2), "prompt_tokens": out["usage"]["prompt_tokens"],
                   "gen_tokens": out["usage"]["completion_tokens"]}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            print(f"{row['seconds']:5.1f}s {rel}: {' | '.join(row['questions'])[:160]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
