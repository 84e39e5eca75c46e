"""Tests for fanout.actors.expander: strict line parsing (no model) and grammar-constrained expansion (real GGUF)."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from fanout.actors.expander import (
    KINDS,
    OUTPUT,
    QueryExpander,
    fallback_variants,
    parse_expansion,
    parse_fields,
    prompt_key,
)

from fanout.config import Config, ExpandConfig

pytestmark = pytest.mark.model

_LINE = re.compile(r"^(lex|vec|hyde): \S.*$")
_CYR = re.compile(r"[\u0400-\u04FF]")


# ---- parse_expansion: pure, no model ----

def test_parse_keeps_overlapping_lines_and_drops_the_query_itself() -> None:
    raw = ("lex: sync notes\n"
           "vec:   How do I SYNC my notes  \n"  # not strict: two spaces after the colon -> junk
           "vec: how do i sync   my NOTES\n"  # equal to the query up to case and spaces -> dropped
           "hyde: Obsidian Sync keeps notes on every device.\n")
    stats: dict[str, int] = {}
    got = parse_expansion(raw, "how do I sync my notes", 6, stats)
    assert got == [("lex", "sync notes"), ("hyde", "Obsidian Sync keeps notes on every device.")]
    assert stats == {"dropped_junk": 1, "dropped_same": 1}


def test_parse_cyrillic_overlap_is_kept_and_unrelated_lines_dropped() -> None:
    # "синхронизация" and "синхронизировать" share the crude stem "синхр"; qmd's ASCII filter drops both
    raw = ("lex: синхронизация заметок\nvec: настройки шрифта и темы\n"
           "hyde: Заметки синхронизирует Obsidian Sync.\n")
    stats: dict[str, int] = {}
    got = parse_expansion(raw, "как синхронизировать заметки", 6, stats)
    assert got == [("lex", "синхронизация заметок"), ("hyde", "Заметки синхронизирует Obsidian Sync.")]
    assert stats == {"dropped_no_overlap": 1}


def test_parse_rejects_junk_and_truncated_lines() -> None:
    raw = ("Sure! Here are some expansions for sync:\n"
           "LEX: sync notes\n"  # kinds are lower case
           "lex:sync notes\n"  # no space after the colon
           "query: sync notes\n"  # unknown kind
           "lex: \n"  # empty content
           "- lex: sync notes\n"  # list marker
           "vec: how to sync notes across dev")  # cut by the token budget: no newline
    stats: dict[str, int] = {}
    assert parse_expansion(raw, "sync notes between devices", 6, stats) == []
    assert stats == {"dropped_junk": 6}


def test_parse_dedupes_per_kind_and_caps_the_count() -> None:
    raw = "lex: sync notes\nlex: Sync  Notes\nvec: sync notes\nvec: sync my notes\nhyde: notes sync daily\n"
    stats: dict[str, int] = {}
    got = parse_expansion(raw, "sync notes between devices", 2, stats)
    # the same text under another kind goes to another lane, so it is not a duplicate
    assert got == [("lex", "sync notes"), ("vec", "sync notes")]
    assert stats == {"dropped_dup": 1}


def test_parse_fields_maps_the_agent_fields_to_kinds_without_an_overlap_filter() -> None:
    raw = ("short_query: Bookmarks\n"  # shares no word with the query: kept (that is what short_query is for)
           "rephrased_query: How do I mark a note as a favourite?\n"
           "expected_answer: Bookmarks keep notes, searches and headings one click away.\n")
    stats: dict[str, int] = {}
    assert parse_fields(raw, "starred", stats) == [
        ("lex", "Bookmarks"), ("vec", "How do I mark a note as a favourite?"),
        ("hyde", "Bookmarks keep notes, searches and headings one click away.")]
    assert stats == {}


def test_parse_fields_is_strict_and_keeps_the_first_of_each_field() -> None:
    raw = ("Here are the fields:\n"  # junk
           "short_query: starred\n"  # equal to the query
           "short_query: Bookmarks\n"  # the second short_query: a duplicate field
           "Rephrased_query: what are bookmarks\n"  # field names are lower case
           "expected_answer: Bookmarks keep notes one click")  # cut by the token budget
    stats: dict[str, int] = {}
    assert parse_fields(raw, "Starred", stats) == []
    assert stats == {"dropped_junk": 2, "dropped_same": 1, "dropped_dup": 1}


def test_prompt_key_changes_with_what_the_prompt_contains() -> None:
    assert prompt_key(ExpandConfig()) == "v1"  # the qmd format keeps the caches written before
    keys = {prompt_key(ExpandConfig(format="fields")), prompt_key(ExpandConfig(format="fields", titles_in_prompt=True)),
            prompt_key(ExpandConfig(format="fields", fields=("short_query",)))}
    assert len(keys) == 3 and "v1" not in keys


def test_fallback_adds_nothing_beyond_the_original_query() -> None:
    assert fallback_variants("how do I sync my notes") == []


# ---- the real model (Qwen2.5-Coder-0.5B by default), loaded once ----

@pytest.fixture(scope="module")
def expander() -> QueryExpander:
    # one thread: on a shared 2-core machine two llama.cpp threads spin-wait on each other (20-30x slower
    # under load, bench/model_calls.py --threads); scores and text do not depend on the thread count
    return QueryExpander(Config().replace(expander={"n_threads": 1}))


EN = "how do I sync my notes between devices"
RU = "как синхронизировать заметки между устройствами"


@pytest.fixture(scope="module")
def expanded(expander: QueryExpander) -> pa.Table:
    batch = pa.table({"qid": ["en", "ru", "en-again"], "query": [EN, RU, EN],
                      "intent": [None, None, None], "lang": ["en", "ru", None]})
    return expander(batch)


def test_expansion_lines_follow_the_grammar(expanded: pa.Table, expander: QueryExpander) -> None:
    assert expanded.schema == OUTPUT
    assert expanded.column("qid").to_pylist() == ["en", "ru", "en-again"]
    for row in expanded.to_pylist():
        assert row["error"] is None
        lines = row["raw"].split("\n")
        assert lines[-1] == "" and 3 <= len(lines) - 1 <= 5, row["raw"]
        assert all(_LINE.match(line) for line in lines[:-1]), row["raw"]
        assert all(v["kind"] in KINDS for v in row["variants"])
        assert row["source"] == ("model" if row["variants"] else "fallback")
    # the repeated query was generated once (lang None is detected as "en": the same prompt)
    assert expander.stats["queries"] == 2
    assert expanded.column("raw")[0] == expanded.column("raw")[2]


def test_russian_query_is_expanded_in_russian(expanded: pa.Table) -> None:
    row = expanded.to_pylist()[1]
    assert row["source"] == "model", row["raw"]
    for v in row["variants"]:
        assert _CYR.search(v["text"]), row["raw"]


def test_english_query_keeps_variants(expanded: pa.Table) -> None:
    row = expanded.to_pylist()[0]
    assert row["source"] == "model", row["raw"]
    assert not any(_CYR.search(v["text"]) for v in row["variants"])


def test_prompt_is_written_in_the_query_language(expander: QueryExpander) -> None:
    ru = expander.prompt(RU, "заметки Obsidian", None)  # language detected from the text
    assert "Пиши все строки только на русском языке" in ru and "Контекст: заметки Obsidian" in ru
    assert ru.endswith("Запрос: " + RU + "\nКонтекст: заметки Obsidian<|im_end|>\n<|im_start|>assistant\n")
    assert "Write every line in English." in expander.prompt(EN, None, "en")
    assert "in the language of the query" in expander.prompt("Notizen synchronisieren", None, "de")


def test_model_error_gives_fallback_and_error(expander: QueryExpander,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(query: str, intent: str | None, lang: str | None, kb_lang: str | None = None,
               titles: tuple[str, ...] = ()) -> str:
        raise RuntimeError("llama_decode returned 1")

    monkeypatch.setattr(expander, "generate", broken)
    before = expander.stats["fallback_error"]
    batch = pa.table({"qid": ["x"], "query": [EN], "intent": ["obsidian"], "lang": ["en"]})
    out = expander(batch).to_pylist()
    assert out[0]["source"] == "fallback" and out[0]["variants"] == []
    assert out[0]["error"] == "RuntimeError: llama_decode returned 1"
    assert expander.stats["fallback_error"] == before + 1


def test_fields_prompt_uses_the_mcp_descriptions_titles_and_the_kb_language(tiny_db, tmp_path) -> None:
    import shutil

    from fanout.pipelines.expand_queries import expand_context

    from fanout.agent_fields import FIELD_DESC
    from fanout.store.db import Collection

    db = shutil.copytree(tiny_db, tmp_path / "db")
    cfg = Config().replace(expander={"n_threads": 1, "n_ctx": 2048},
                           expand={"format": "fields", "titles_in_prompt": True, "fields": ["short_query"]})
    ex = QueryExpander(cfg)
    kb_lang, titles = expand_context(Collection(str(db), "t", cfg), cfg)  # the CPU pool's columns
    assert kb_lang == "en" and "Daily notes" in titles and "Блины" in titles  # 4 English notes, 2 Russian
    en = ex.fields_prompt("starred notes", None, kb_lang, titles)
    assert FIELD_DESC["short_query"].format(lang="").strip() in en
    assert "rephrased_query" not in en  # only the fields asked for
    assert "\nDaily notes\n" in en and en.endswith("Question: starred notes<|im_end|>\n<|im_start|>assistant\n")
    ru = ex.fields_prompt("starred notes", None, "ru", titles)  # a Russian knowledge base: a Russian prompt
    assert "База знаний на русском языке" in ru and "Вопрос: starred notes" in ru
    # the prefix before the question is the same for every query: llama.cpp reuses its KV state
    other = ex.fields_prompt("sync", None, kb_lang, titles)
    assert en[:en.index("Question: starred")] == other[:other.index("Question: sync")]


def test_the_fields_prompt_and_the_mcp_server_share_one_set_of_descriptions() -> None:
    from fanout.actors.expander import _fields_system

    from fanout.agent_fields import FIELD_DESC, FIELD_DESC_RU, FIELD_KINDS
    from fanout.serve.mcp import FIELD_DESC as MCP_DESC

    assert all(MCP_DESC[f] is FIELD_DESC[f] for f in FIELD_DESC)  # one source, not a copy
    system = _fields_system("en", tuple(FIELD_KINDS))
    assert all(f"{f}: {FIELD_DESC[f].format(lang='').strip()}" in system for f in FIELD_KINDS)
    assert "The knowledge base is in English" in system
    ru = _fields_system("ru", ("short_query",))
    assert FIELD_DESC_RU["short_query"] in ru and "rephrased_query" not in ru
