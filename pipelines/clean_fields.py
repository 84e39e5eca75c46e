"""Stage: field hygiene. Make the most of variants a weak writer filled (an agent, the local expander).

A weak agent fills the three fields almost every time, but with the wrong content: a short_query of words
copied from the question or a comma list instead of the feature's name; an expected_answer that is a
question or says what "the documentation should explain"; a field in a language the notes are not in. Each
rule below is one switch in `CleanConfig` (`clean:`), costs a few set and regex operations per variant
(no model call) and applies to every variant of a cleaned source: the caller's fields, qmd `searches`, OHS
`queries`, and the local expander's lines (cached or fresh).

- lex_max_words: an over-long `lex` keeps its first distinctive terms (stopwords and question words out);
- foreign_lex_to_vec: a `lex` in a language no note of the knowledge base is in (and no title) -> `vec`;
- meta_answer: a `hyde` that talks about "the documentation" loses that frame (`strip`) or is dropped.

The rules the benchmark measured and left off (split lists, snap or mine titles, a question-shaped answer
searched as a question, per-shape fusion weights) are kept at the tag `experiment/clean-opt-in-rules`
(docs/benchmark.md#weak-fields-field-hygiene has their figures).

`diagnose` names what looks weak in an agent's fields; the MCP server turns it into hints for the agent.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from fanout.agent_fields import count_languages
from fanout.config import CleanConfig, Config
from fanout.schemas import VARIANT
from fanout.store.db import Collection
from fanout.text import STOPWORDS, detect_lang, nfc

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_LIST_SEP = re.compile(r"\s*[,;]\s*")
# question openers (en, ru); a text starting with one of these or ending with "?" is a question
QUESTION_WORDS = frozenset(
    ["how", "what", "why", "when", "where", "which", "who", "whom", "whose", "can", "could", "do", "does", "did", "is", "are", "was", "were", "should", "would", "will", "shall", "may", "might", "must", "как", "что", "почему", "зачем", "когда", "где", "какой", "какая", "какие", "каком", "какую", "сколько", "кто", "можно", "ли", "чем", "куда", "откуда", "нужно", "ли"])
# words a question adds around the feature's name (not distinctive as a search term)
FILLER = frozenset(
    ["way", "ways", "possible", "able", "want", "need", "make", "create", "add", "change", "set", "setup", "configure", "work", "works", "working", "obsidian", "feature", "option", "options", "help", "thing", "things", "use", "used", "uses", "also", "just", "please", "there", "способ", "можно", "нужно", "хочу", "сделать", "как-то", "работает", "функция", "опция"])
_META = re.compile(
    r"^\s*(?:the\s+)?(?:documentation|docs|doc|help\s+page|help|page|article|guide|note|answer|manual)s?\s+"
    r"(?:should|would|will|must|might|may|could|needs?\s+to|is\s+expected\s+to|probably)?\s*"
    r"(?:explain|describe|cover|say|mention|tell|show|detail|list|discuss|outline|contain|include|state)s?"
    r"(?:\s+(?:that|whether|about))?[\s:,]*",
    re.IGNORECASE)
_META_RU = re.compile(
    r"^\s*(?:в\s+)?(?:документаци[яию]|справк[аеиу]|стать[яеи]|страниц[аеу]|руководств[оеа]|заметк[аеу])\s+"
    r"(?:должн[аоы]?\s+(?:быть\s+)?|может\s+|будет\s+|следует\s+)?"
    r"(?:объясн\w*|описа\w*|опис\w*|рассказ\w*|сказано|упомян\w*|показ\w*|объяснено|описано|перечисл\w*)"
    r"(?:\s*,?\s*(?:что|о\s+том,?\s*(?:что)?))?[\s:,]*",
    re.IGNORECASE)


def words(text: str) -> list[str]:
    return _WORD.findall(nfc(text).casefold())


def stem(word: str) -> str:
    """A crude stem for comparing a field's words with the question's (en and ru inflection: drop up to 2 letters)."""
    return word if len(word) <= 4 else word[:max(4, len(word) - 2)]


def title_key(text: str) -> str:
    """Case- and punctuation-insensitive form of a title, alias or field (as the exact alias lane keys it)."""
    return " ".join(words(text.removesuffix(".md")))


def is_question(text: str) -> bool:
    t = text.strip()
    ws = words(t)
    return t.endswith("?") or bool(ws and ws[0] in QUESTION_WORDS)


def strip_meta(text: str) -> str | None:
    """The statement inside "The documentation should explain that X" (X), or None when there is no frame."""
    for rx in (_META, _META_RU):
        m = rx.match(text)
        if m and m.end() > 0:
            rest = text[m.end():].strip()
            return rest[:1].upper() + rest[1:] if rest else ""
    return None


def split_list(text: str) -> list[str]:
    return [p.strip() for p in _LIST_SEP.split(text) if p.strip()]


def distinctive(text: str, max_words: int) -> str:
    """The first `max_words` words that are neither stopwords, question words nor filler."""
    keep = [w for w in words(text) if w not in STOPWORDS and w not in QUESTION_WORDS and w not in FILLER]
    return " ".join(keep[:max_words])


@dataclass(frozen=True)
class Titles:
    """The knowledge base's titles and aliases (display form by key) and the languages its notes are in."""

    display: dict[str, str]  # title_key -> the title or alias as written
    langs: frozenset[str]

    @classmethod
    def build(cls, docs: list[dict[str, Any]], langs: dict[str, int], min_share: float = 0.1) -> Titles:
        display: dict[str, str] = {}
        for d in docs:
            names = [d.get("title") or "", (d.get("path") or "").rsplit("/", 1)[-1].removesuffix(".md")]
            for a in d.get("aliases") or []:
                names += [a, a.rsplit("/", 1)[-1]]
            for n in names:
                k = title_key(n)
                if k:
                    display.setdefault(k, n.rsplit("/", 1)[-1].removesuffix(".md").strip())
        total = sum(langs.values()) or 1
        keep = frozenset(lg for lg, n in langs.items() if lg != "unknown" and n / total >= min_share)
        return cls(display, keep)

    def is_title(self, text: str) -> bool:
        return title_key(text) in self.display

    def foreign(self, text: str) -> bool:
        """True when the text's language (Cyrillic share) is none of the knowledge base's."""
        return bool(self.langs) and bool(words(text)) and detect_lang(text) not in self.langs


def clean_variants(query: str, variants: list[dict], titles: Titles, cfg: CleanConfig
                   ) -> tuple[list[dict], dict[str, int]]:
    """One query's variants (kind, text, source; the original first) -> cleaned variants and counts of the
    rules that fired."""
    fired: dict[str, int] = {}

    def hit(rule: str) -> None:
        fired[rule] = fired.get(rule, 0) + 1

    out: list[dict] = []
    for v in variants:
        kind, text, src = v["kind"], v["text"], v.get("source")
        if kind == "orig" or src not in cfg.sources or kind == "vec":
            out.append(v)
            continue
        if kind == "hyde":
            inner = strip_meta(text) if cfg.meta_answer != "keep" else None
            if inner is not None:
                hit("meta_answer")
                if cfg.meta_answer == "drop" or not inner:
                    continue
                text = inner
            out.append({**v, "text": text})
            continue
        # lex
        if cfg.lex_max_words and len(words(text)) > cfg.lex_max_words and not titles.is_title(text):
            short = distinctive(text, cfg.lex_max_words)
            if short:
                hit("long_lex")
                text = short
        if cfg.foreign_lex_to_vec and titles.foreign(text) and not titles.is_title(text):
            hit("foreign_lex")
            out.append({**v, "kind": "vec", "text": text})
        else:
            out.append({**v, "text": text})
    seen: set[tuple[str, str]] = set()
    uniq = []
    for v in out:
        key = (v["kind"], v["text"].casefold())
        if v["kind"] != "orig" and (key in seen or v["text"].casefold() == query.casefold()):
            continue
        seen.add(key)
        uniq.append(v)
    return uniq, fired


def diagnose(row: dict[str, Any], titles: Titles) -> list[tuple[str, str]]:
    """(field, problem) for each agent field that looks weak: the shapes clean_variants repairs."""
    out = []
    q = row.get("query") or ""
    sq, ea = (row.get("short_query") or "").strip(), (row.get("expected_answer") or "").strip()
    if sq:
        if len(split_list(sq)) > 1:
            out.append(("short_query", "list"))
        elif titles.is_title(sq):
            pass
        elif len(words(sq)) > 4:
            out.append(("short_query", "long"))
        elif titles.foreign(sq):
            out.append(("short_query", "language"))
        elif {stem(w) for w in words(sq)} <= {stem(w) for w in words(q)}:
            out.append(("short_query", "copied"))
    if ea:
        if strip_meta(ea) is not None:
            out.append(("expected_answer", "meta"))
        elif is_question(ea):
            out.append(("expected_answer", "question"))
        elif titles.foreign(ea):
            out.append(("expected_answer", "language"))
    elif sq or row.get("rephrased_query"):
        out.append(("expected_answer", "empty"))
    return out


HINTS = {
    ("short_query", "list"): "short_query works best as one name, not a list",
    ("short_query", "long"): "short_query works best as the feature's name (one to three words)",
    ("short_query", "copied"): "short_query works best as the feature's name, the way a help page title "
                               "says it, not words from the question",
    ("short_query", "language"): "short_query works best in the language of the notes ({langs})",
    ("expected_answer", "meta"): "expected_answer works best as one or two sentences that could stand in the "
                                 "note itself, not what the documentation should explain",
    ("expected_answer", "question"): "expected_answer works best as a statement that could stand in the "
                                     "note itself, not a question",
    ("expected_answer", "language"): "expected_answer works best in the language of the notes ({langs})",
    ("expected_answer", "empty"): "expected_answer is empty; one or two sentences that could stand in the "
                                  "note itself find pages the other fields miss",
}


def hints(row: dict[str, Any], titles: Titles, examples: list[str]) -> list[str]:
    """Short hints for the agent, one per weak field; short_query hints name `examples` (page titles)."""
    langs = ", ".join(sorted(titles.langs))
    out = []
    for field, problem in diagnose(row, titles):
        h = HINTS[(field, problem)].format(langs=langs)
        if field == "short_query" and examples:
            h += ", e.g. one of: " + ", ".join(examples[:3])
        out.append(h)
    return out


_TITLES: OrderedDict[str, Titles] = OrderedDict()  # digest of the titles and languages -> their Titles
_TITLES_LOCK = threading.Lock()


def collection_titles(col: Collection) -> Titles:
    """The collection's Titles, once per index version; a version whose paths, titles, aliases and languages are
    those of one built before in this process (an index round that edited note bodies) reuses it, keyed at the
    cost of the notes changed since (fanout/store/rows_key.py)."""
    def build() -> Titles:
        from fanout.store.rows_key import rows_key

        langs = count_languages(col)
        with col.guard(col.documents_name):  # (only the rows changed since the last version keyed are read)
            key = rows_key(col.dataset(col.documents_name), ["path", "title", "aliases"], sorted(langs.items()))
        with _TITLES_LOCK:
            if key in _TITLES:
                _TITLES.move_to_end(key)
                return _TITLES[key]
        got = Titles.build(col.read(col.documents_name, ["path", "title", "aliases"]).to_pylist(), langs)
        with _TITLES_LOCK:
            _TITLES[key] = got
            while len(_TITLES) > 4:
                _TITLES.popitem(last=False)
        return got
    return col.memo("clean_titles", build)


class CleanFields:
    """Stage: `variants` cleaned (rules above), renumbered from 0 (the original). Runs after ExpandQueries, so
    it sees every source."""

    def __init__(self, cfg: Config, db: str, collection: str):
        self.cfg = cfg.clean
        self.col = Collection(db, collection, cfg)
        self.stats: dict[str, int] = {"queries": 0, "variants_in": 0, "variants_out": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        titles = collection_titles(self.col)
        errors = batch.column("error").to_pylist()
        queries = batch.column("query").to_pylist()
        new_vs = []
        for err, q, vs in zip(errors, queries, batch.column("variants").to_pylist()):
            if err is not None or not vs:
                new_vs.append(vs)
                continue
            cleaned, fired = clean_variants(q, vs, titles, self.cfg)
            for k, n in fired.items():
                self.stats[k] = self.stats.get(k, 0) + n
            self.stats["queries"] += 1
            self.stats["variants_in"] += len(vs)
            self.stats["variants_out"] += len(cleaned)
            new_vs.append([{"vid": i, "kind": v["kind"], "text": v["text"], "source": v.get("source")}
                           for i, v in enumerate(cleaned)])
        return batch.set_column(batch.schema.get_field_index("variants"), "variants",
                                pa.array(new_vs, pa.list_(VARIANT)))
