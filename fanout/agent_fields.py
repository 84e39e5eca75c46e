"""The agent fields: what the MCP server tells an agent to write, and what the local expander is told.

One text for both, so that the local model (actors/expander.py, `expand.format: fields`) writes the same
three fields an agent writes, from the same instructions (issue 11). `{lang}` is filled with
`language_line(...)`.
"""

from __future__ import annotations

import pyarrow.compute as pc

from fanout.config.vocab import EXPAND_FORMATS, FIELD_KINDS, LANG_NAMES  # noqa: F401  (their home is fanout.config.vocab)
from fanout.store.db import Collection

# agent field -> the variant kind it becomes (short_query -> full text, the other two -> vectors)

FIELD_DESC: dict[str, str] = {
    "query": "The user's question, as asked.",
    "short_query": "The feature's or setting's name, the way a help page title says it: one to three "
                   "words. Not a comma list, not words copied from the question. Searched by full text. "
                   "{lang}",
    "rephrased_query": "The question rephrased in other words, as one question. Searched by meaning.",
    "expected_answer": "One or two sentences that could stand in the note itself, as a statement, the way "
                       "documentation is written (not \"the documentation should explain...\"). Searched by "
                       "meaning. {lang}",
}

# The same three descriptions in Russian: the local expander's prompt for a Russian knowledge base.
FIELD_DESC_RU: dict[str, str] = {
    "short_query": "название функции или настройки так, как его пишет заголовок страницы справки: одно-три "
                   "слова. Не список через запятую и не слова из вопроса.",
    "rephrased_query": "тот же вопрос другими словами, одним вопросом.",
    "expected_answer": "одно-два предложения, которые могли бы стоять в самой заметке, в виде утверждения, как "
                       "пишут документацию (не «в документации должно быть объяснено...»).",
}


def language_code(value: object) -> str | None:
    """`value` if it is a language code fanout knows (LANG_NAMES), else None.

    A note's `lang:` is free text its author wrote; only a known code may reach a prompt, a tool description
    or the MCP server's instructions.
    """
    return value if isinstance(value, str) and value in LANG_NAMES else None


def known_languages(counts: dict[str, int]) -> dict[str, int]:
    """Notes per known language code (as count_languages orders them); every other `lang` value, and notes
    without one, are counted together under "other"."""
    out: dict[str, int] = {}
    for code, n in counts.items():
        key = language_code(code) or "other"
        out[key] = out.get(key, 0) + n
    return out


def language_line(langs: dict[str, int] | list[str]) -> str:
    """The sentence the descriptions carry: which language(s) to write short_query and expected_answer in.
    Only known language codes are named (by their LANG_NAMES name); anything else is left out."""
    names = [LANG_NAMES[code] for code in langs if language_code(code)]
    if not names:
        return ""
    if len(names) == 1:
        return (f"The knowledge base is in {names[0]}; write short_query and expected_answer in {names[0]}, "
                "whatever the language of the question.")
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    return (f"The knowledge base is in {listed}; write short_query and expected_answer in the language of "
            "the notes you expect.")


def count_languages(col: Collection) -> dict[str, int]:
    """Notes per language in the documents table, most common first."""
    langs = col.read(col.documents_name, ["lang"])["lang"]
    counts = pc.value_counts(langs).to_pylist()
    return {c["values"] or "unknown": c["counts"] for c in sorted(counts, key=lambda c: -c["counts"])}
