"""Query expander actor: a small instruct GGUF writes the variants an agent would otherwise write.

Two formats (`expand.format`):
- `qmd`: lex/vec/hyde lines under a GBNF grammar. The prompt is written in the query's language (qmd's
  defect #454: non-English queries expanded in English); lines are parsed strictly and kept only when they
  share a term with the query (Unicode-aware, unlike qmd's ASCII filter).
- `fields`: the seed's three agent fields (short_query -> lex, rephrased_query -> vec, expected_answer ->
  hyde), from the same descriptions the MCP server gives agents (fanout/agent_fields.py), in the knowledge
  base's language, optionally with the collection's page titles in the prompt (`expand.titles_in_prompt`:
  short_query is then usually a page title). No grammar (a 151k-token vocabulary under a grammar is slow);
  the three lines are parsed strictly instead, and no overlap filter applies (an agent's short_query often
  shares no word with the question: that is its point).
The system prompt, the titles and the example form a prefix shared by every query of a collection, so
llama-cpp-python evaluates it once and keeps its KV state between queries (it reuses the longest common
prompt prefix). When nothing survives, the query runs alone: see `fallback_variants`.
"""

from __future__ import annotations

import logging
import re
from importlib import resources
from typing import Any

import pyarrow as pa
from fanout.actors._llama import load_llama, model_path, render_chat

from fanout.agent_fields import (
    FIELD_DESC,
    FIELD_DESC_RU,
    FIELD_KINDS,
    language_line,
)
from fanout.config import Config, ExpandConfig
from fanout.models.identity import model_id
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


_FIELD_LINE = re.compile(r"^(" + "|".join(FIELD_KINDS) + r"): (\S.*)$")


def _fields_system(lang: str, fields: tuple[str, ...]) -> str:
    """The fields prompt: the MCP server's own field descriptions (Russian: the same text translated)."""
    n = len(fields)
    if lang == "ru":
        count = {1: "одной строкой", 2: "ровно двумя строками", 3: "ровно тремя строками"}[n]
        return ("Ты пишешь поля поиска для вопроса к базе знаний (справка или личные заметки). База знаний на "
                "русском языке: пиши поля по-русски, на каком бы языке ни был вопрос. "
                f"Ответь {count} в таком порядке:\n" + "\n".join(f"{f}: {FIELD_DESC_RU[f]}" for f in fields))
    line = language_line([lang]) if lang else ""
    desc = {k: v.format(lang="").strip() for k, v in FIELD_DESC.items()}
    count = {1: "one line", 2: "exactly two lines", 3: "exactly three lines"}[n]
    return ("You write the search fields for a question asked of a knowledge base (a help site or personal "
            f"notes). {line} Answer with {count}, in this order:\n"
            + "\n".join(f"{f}: {desc[f]}" for f in fields))


# The example is on a topic no help site of ours covers, so that it teaches the format, not an answer.
FIELDS_PROMPTS: dict[str, dict[str, Any]] = {  # strings, and example_hits a list of them
    "en": {
        "titles": "The knowledge base has pages with these titles (short_query is usually one of them):",
        "query": "Question: {query}", "intent": "Context: {intent}",
        "example_q": "Question: how do I print only some of the pages",
        "short_query": "Print range",
        "rephrased_query": "How can I print a selected range of pages instead of the whole document?",
        "expected_answer": "To print only some pages, open the Print dialog and enter a page range such as 2-5.",
    },
    "ru": {
        "titles": "В базе знаний есть страницы с такими заголовками (short_query обычно один из них):",
        "query": "Вопрос: {query}", "intent": "Контекст: {intent}",
        "example_q": "Вопрос: как напечатать только некоторые страницы",
        "short_query": "Диапазон печати",
        "rephrased_query": "Как распечатать выбранные страницы, а не весь документ?",
        "expected_answer": "Чтобы напечатать только часть страниц, откройте окно печати и укажите диапазон "
                           "страниц, например 2-5.",
    },
}


def prompt_key(cfg: ExpandConfig) -> str:
    """The expansions cache's prompt version: everything in the prompt that config decides."""
    if cfg.format == "qmd":
        return cfg.prompt_version
    titles = f"titles={cfg.max_titles}" if cfg.titles_in_prompt else "titles=0"
    return f"{cfg.prompt_version}:{cfg.format}:{','.join(cfg.fields)}:{titles}"


def parse_fields(raw: str, query: str, stats: dict[str, int] | None = None) -> list[tuple[str, str]]:
    """Parse `short_query: ...` / `rephrased_query: ...` / `expected_answer: ...` lines strictly.

    Each field counts once (the first line of it); a line cut by the token budget (no newline) is dropped, a
    field equal to the query is dropped (its lists would repeat the query's). Returns (kind, text) pairs in
    the fields' order. Drop reasons go to `stats`: dropped_junk, dropped_same, dropped_dup.
    """
    counts = stats if stats is not None else {}
    found: dict[str, str] = {}
    seen: set[str] = set()
    for line in raw.split("\n")[:-1]:
        m = _FIELD_LINE.match(line.strip())
        reason = None
        if m is None:
            reason = "dropped_junk" if line.strip() else None
        elif m.group(1) in seen:
            reason = "dropped_dup"
        elif _norm(m.group(2)) == _norm(query):
            reason = "dropped_same"
        else:
            found[m.group(1)] = m.group(2).strip()
        if m is not None:
            seen.add(m.group(1))
        if reason:
            counts[reason] = counts.get(reason, 0) + 1
    return [(FIELD_KINDS[f], found[f]) for f in FIELD_KINDS if f in found]


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
    """`__call__(batch)`: qid, query, intent, lang (+ kb_lang, titles) -> qid, raw, variants, source, error.

    The fields format writes in `kb_lang` (the knowledge base's language; else the query's) and lists `titles`
    (the index's page titles). Both are optional columns, filled in by the CPU pool
    (pipelines/expand_queries.py LookupExpansions): this actor holds the model and never opens the index.
    """

    def __init__(self, cfg: Config):
        from llama_cpp import LlamaGrammar

        self.cfg = cfg
        self.path = model_path(cfg, "expander")
        self.model_id = model_id(cfg, "expander")
        self.llm = load_llama(self.path, cfg.expander, "expander")
        self.grammar = None
        if cfg.expand.format == "qmd":
            gbnf = resources.files("fanout").joinpath("grammars/expand.gbnf").read_text(encoding="utf-8")
            self.grammar = LlamaGrammar.from_string(gbnf, verbose=False)
        self.stats: dict[str, int] = {"queries": 0, "model": 0, "fallback_empty": 0, "fallback_error": 0}
        # fields format: stop at a blank line, or right after the one line when only one field is asked for
        self.stop = [] if self.grammar else ["\n"] if len(cfg.expand.fields) == 1 else ["\n\n"]

    def fits(self, text: str, budget: int) -> bool:
        """Does `text` take at most `budget` tokens of the model?"""
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False)) <= budget

    def fields_prompt(self, query: str, intent: str | None, kb_lang: str | None, titles: list[str]) -> str:
        """The fields-format chat prompt: system (+ titles) and the example are a prefix shared by all queries."""
        return render_chat(self.llm, self.fields_messages(query, intent, kb_lang, titles))

    def fields_messages(self, query: str, intent: str | None, kb_lang: str | None,
                        titles: list[str]) -> list[dict[str, str]]:
        """The fields-format chat messages (fields_prompt; a served expander sends them as they are)."""
        lang = kb_lang if kb_lang in FIELDS_PROMPTS else ("en" if kb_lang is None else kb_lang)
        p = FIELDS_PROMPTS.get(lang, FIELDS_PROMPTS["en"])
        fields = self.cfg.expand.fields
        system = _fields_system(lang, fields)
        if titles:
            budget = self.cfg.expander.n_ctx - self.cfg.expand.max_tokens - 256
            while titles:
                listed = system + "\n\n" + p["titles"] + "\n" + "\n".join(titles)
                if self.fits(listed, budget):
                    system = listed
                    break
                titles = titles[:len(titles) // 2]
                log.warning("page titles do not fit expander.n_ctx %d; keeping the first %d",
                            self.cfg.expander.n_ctx, len(titles))
        user = p["query"].format(query=query)
        if intent:
            user += "\n" + p["intent"].format(intent=intent)
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": p["example_q"]},
                    {"role": "assistant", "content": "".join(f"{f}: {p[f]}\n" for f in fields)},
                    {"role": "user", "content": user}]
        return messages

    def prompt(self, query: str, intent: str | None, lang: str | None) -> str:
        """The qmd-format chat prompt for one query, in its language (detected when `lang` is null)."""
        return render_chat(self.llm, self.qmd_messages(query, intent, lang))

    def qmd_messages(self, query: str, intent: str | None, lang: str | None) -> list[dict[str, str]]:
        """The qmd-format chat messages (prompt; a served expander sends them as they are)."""
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
        return messages

    def generate(self, query: str, intent: str | None, lang: str | None, kb_lang: str | None = None,
                 titles: tuple[str, ...] = ()) -> str:
        """Model text for one query (greedy when expand.temperature is 0); qmd format under its grammar.

        When the model stopped on its own (not at max_tokens) its last line is complete: a newline is
        added so that the parser, which drops an unterminated last line, keeps it.
        """
        if self.cfg.expand.format == "fields":
            prompt = self.fields_prompt(query, intent, kb_lang or lang or detect_lang(query), list(titles))
        else:
            prompt = self.prompt(query, intent, lang)
        out = self.llm.create_completion(
            prompt, grammar=self.grammar, max_tokens=self.cfg.expand.max_tokens,
            temperature=self.cfg.expand.temperature, top_k=20, top_p=0.8, seed=0,
            stop=self.stop)
        choice = out["choices"][0]
        text = str(choice["text"])
        if choice["finish_reason"] == "stop" and text and not text.endswith("\n"):
            text += "\n"
        return text

    def expand_one(self, query: str, intent: str | None, lang: str | None, kb_lang: str | None = None,
                   titles: tuple[str, ...] = ()) -> dict[str, object]:
        """One output row (without qid); a model error gives the fallback and an error message."""
        self.stats["queries"] += 1
        raw, error = "", None
        try:
            if not query.strip():
                raise ValueError("empty query: nothing to expand")
            raw = self.generate(query, intent, lang, kb_lang, titles)
            if self.cfg.expand.format == "fields":
                variants = parse_fields(raw, query, self.stats)
            else:
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
        kbs, titles = ((batch.column(c).to_pylist() if c in batch.column_names else [None] * n)
                       for c in ("kb_lang", "titles"))
        keys = [(q or "", it or None, lg or detect_lang(q or ""), kb, tuple(t or ()))
                for q, it, lg, kb, t in zip(queries, intents, langs, kbs, titles)]
        done: dict[tuple, dict[str, object]] = {}
        # identical queries are generated once; one prompt prefix at a time (knowledge base, language), so
        # llama-cpp-python keeps the KV cache of the system prompt and example between queries
        for key in sorted(dict.fromkeys(keys), key=lambda k: (k[3] or "", k[4], k[2])):
            done[key] = self.expand_one(*key)
        rows = [{"qid": qid, **done[key]} for qid, key in zip(qids, keys)]
        return pa.Table.from_pylist(rows, schema=OUTPUT)
