"""Query expander actor: a small instruct GGUF writes lex/vec/hyde lines under a GBNF grammar (qmd's format).

The prompt is written in the query's language (qmd's defect #454: non-English queries expanded in English),
lines are parsed strictly and kept only when they share a term with the query (Unicode-aware, unlike qmd's
ASCII filter). When nothing survives, the query runs alone: see `fallback_variants`.
"""

from __future__ import annotations

import logging
import re
from importlib import resources

import pyarrow as pa

from actors._llama import load_llama, model_id, model_path, render_chat
from fanout.config import Config
from fanout.text import detect_lang, shares_term

log = logging.getLogger(__name__)

KINDS = ("lex", "vec", "hyde")
_LINE = re.compile(r"^(lex|vec|hyde): (\S.*)$")
VARIANT = pa.struct([("kind", pa.string()), ("text", pa.string())])
OUTPUT = pa.schema([("qid", pa.string()), ("raw", pa.string()), ("variants", pa.list_(VARIANT)),
                    ("source", pa.string()), ("error", pa.string())])

# One prompt per language, written in that language; the example is on another topic, so a copied
# example line shares no term with the query and is dropped by the filter.
PROMPTS: dict[str, dict[str, str]] = {
    "en": {
        "system": "You expand search queries for a search engine over personal notes and documentation. "
                  "Answer only with lines in this format:\n"
                  "lex: 2-3 keywords for full-text search\n"
                  "vec: the question asked again in other words\n"
                  "hyde: one sentence written the way the answer would stand in the documentation\n"
                  "Write every line in English.",
        "query": "Query: {query}", "intent": "Context: {intent}",
        "example_q": "Query: change the default font size",
        "example_a": "lex: font size settings\nvec: how to make the editor text bigger\n"
                     "hyde: To change the font size, open Settings > Appearance and set the font size.\n",
    },
    "ru": {
        "system": "Ты расширяешь поисковые запросы для поиска по личным заметкам и документации. "
                  "Отвечай только строками в таком формате:\n"
                  "lex: 2-3 ключевых слова для полнотекстового поиска\n"
                  "vec: тот же вопрос другими словами\n"
                  "hyde: одно предложение, написанное так, как ответ стоял бы в документации\n"
                  "Пиши все строки только на русском языке, не на английском.",
        "query": "Запрос: {query}", "intent": "Контекст: {intent}",
        "example_q": "Запрос: изменить размер шрифта",
        "example_a": "lex: размер шрифта настройки\nvec: как сделать текст в редакторе крупнее\n"
                     "hyde: Чтобы изменить размер шрифта, откройте Настройки > Оформление и задайте "
                     "размер шрифта.\n",
    },
}


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def parse_expansion(raw: str, query: str, max_variants: int,
                    stats: dict[str, int] | None = None) -> list[tuple[str, str]]:
    """Parse `kind: text` lines strictly; keep lines that differ from the query and share a term with it.

    Only newline-terminated lines count (a line cut by the token budget is dropped). Drop reasons are
    added to `stats` when given: dropped_junk, dropped_same, dropped_no_overlap, dropped_dup.
    """
    counts = stats if stats is not None else {}
    lines = raw.split("\n")[:-1]  # the text after the last newline is incomplete
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for line in lines:
        m = _LINE.match(line.strip())
        reason = None
        if m is None:
            reason = "dropped_junk"
        else:
            kind, text = m.group(1), m.group(2).strip()
            if _norm(text) == _norm(query):
                reason = "dropped_same"
            elif not shares_term(query, text):
                reason = "dropped_no_overlap"
            elif (kind, _norm(text)) in seen:
                reason = "dropped_dup"
        if reason:
            counts[reason] = counts.get(reason, 0) + 1
            continue
        seen.add((kind, _norm(text)))
        if len(out) < max_variants:
            out.append((kind, text))
    return out


def fallback_variants(query: str) -> list[tuple[str, str]]:
    """What to search when no expansion line survives: nothing beyond the original query.

    qmd falls back to `lex q`, `vec q` and `hyde "Information about q"`. The original query already goes
    to both lanes (weight 2), so `lex q`/`vec q` only repeat its two lists (an RRF ranking scaled by a
    constant is unchanged; only the top-rank bonuses shrink relatively), and "Information about q" embeds
    next to q itself, adding a near-copy of the vector list that tilts fusion towards vectors. Each costs a
    search and an embedding for no new evidence, so the fallback is the empty list (source "fallback").
    """
    del query
    return []


class QueryExpander:
    """`__call__(batch)`: columns qid, query, intent, lang -> qid, raw, variants, source, error."""

    def __init__(self, cfg: Config):
        from llama_cpp import LlamaGrammar

        self.cfg = cfg
        self.path = model_path(cfg, "expander")
        self.model_id = model_id(cfg, "expander")
        self.llm = load_llama(self.path, cfg.expander)
        gbnf = resources.files("fanout").joinpath("grammars/expand.gbnf").read_text(encoding="utf-8")
        self.grammar = LlamaGrammar.from_string(gbnf, verbose=False)
        self.stats: dict[str, int] = {"queries": 0, "model": 0, "fallback_empty": 0, "fallback_error": 0}

    def prompt(self, query: str, intent: str | None, lang: str | None) -> str:
        """The chat prompt for one query, in its language (detected from the text when `lang` is null)."""
        lang = lang or detect_lang(query)
        p = PROMPTS.get(lang) or {**PROMPTS["en"], "system": PROMPTS["en"]["system"].replace(
            "Write every line in English.", "Write every line in the language of the query.")}
        user = p["query"].format(query=query)
        if intent:
            user += "\n" + p["intent"].format(intent=intent)
        messages = [{"role": "system", "content": p["system"]},
                    {"role": "user", "content": p["example_q"]},
                    {"role": "assistant", "content": p["example_a"]},
                    {"role": "user", "content": user}]
        return render_chat(self.llm, messages)

    def generate(self, query: str, intent: str | None, lang: str | None) -> str:
        """Grammar-constrained model text for one query (greedy when expand.temperature is 0).

        When the model stopped on its own (not at max_tokens) its last line is complete: a newline is
        added so that parse_expansion, which drops an unterminated last line, keeps it.
        """
        out = self.llm.create_completion(
            self.prompt(query, intent, lang), grammar=self.grammar, max_tokens=self.cfg.expand.max_tokens,
            temperature=self.cfg.expand.temperature, top_k=20, top_p=0.8, seed=0)
        choice = out["choices"][0]  # type: ignore[index]
        text = str(choice["text"])
        if choice["finish_reason"] == "stop" and text and not text.endswith("\n"):
            text += "\n"
        return text

    def expand_one(self, query: str, intent: str | None, lang: str | None) -> dict[str, object]:
        """One output row (without qid); a model error gives the fallback and an error message."""
        self.stats["queries"] += 1
        raw, error = "", None
        try:
            if not query.strip():
                raise ValueError("empty query: nothing to expand")
            raw = self.generate(query, intent, lang)
            variants = parse_expansion(raw, query, self.cfg.expand.max_variants, self.stats)
        except Exception as exc:  # noqa: BLE001 - one bad row never kills the batch
            error = f"{type(exc).__name__}: {exc}"
            log.warning("expansion failed for query %r: %s; using the fallback", query, error)
            variants = []
        if variants:
            self.stats["model"] += 1
            source = "model"
        else:
            key = "fallback_error" if error else "fallback_empty"
            self.stats[key] += 1
            if not error:
                log.info("no expansion line survived for query %r; using the fallback", query)
            variants, source = fallback_variants(query), "fallback"
        return {"raw": raw, "variants": [{"kind": k, "text": t} for k, t in variants],
                "source": source, "error": error}

    def __call__(self, batch: pa.Table) -> pa.Table:
        qids = batch.column("qid").to_pylist()
        queries = batch.column("query").to_pylist()
        n = len(queries)
        intents = batch.column("intent").to_pylist() if "intent" in batch.column_names else [None] * n
        langs = batch.column("lang").to_pylist() if "lang" in batch.column_names else [None] * n
        keys = [(q or "", it or None, lg or detect_lang(q or ""))
                for q, it, lg in zip(queries, intents, langs)]
        done: dict[tuple[str, str | None, str], dict[str, object]] = {}
        # identical queries are generated once; one language at a time, so llama-cpp-python keeps the
        # KV cache of that language's system prompt and example between queries
        for key in sorted(dict.fromkeys(keys), key=lambda k: k[2]):
            done[key] = self.expand_one(*key)
        rows = [{"qid": qid, **done[key]} for qid, key in zip(qids, keys)]
        return pa.Table.from_pylist(rows, schema=OUTPUT)
