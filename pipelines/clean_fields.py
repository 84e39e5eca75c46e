"""Stage: field hygiene. Make the most of variants a weak writer filled (an agent, the local expander).

A weak agent fills the three fields almost every time, but with the wrong content: a short_query of words
copied from the question or a comma list instead of the feature's name; an expected_answer that is a
question or says what "the documentation should explain"; a field in a language the notes are not in. Each
rule below is one switch in `CleanConfig` (`clean:`), costs a few set and regex operations per variant
(no model call) and applies to every variant of a cleaned source: the caller's fields, qmd `searches`, OHS
`queries`, and the local expander's lines (cached or fresh).

- split_lists: a `lex` comma/semicolon list becomes one `lex` per item (at most `max_list_items`);
- lex_max_words: an over-long `lex` keeps its first distinctive terms (stopwords and question words out);
- snap_titles: a `lex` that names a page title or alias (all the title's words, crudely stemmed, in it, or a
  close spelling of a whole title) adds that title as one more `lex` (which also hits the exact alias lane);
- foreign_lex_to_vec: a `lex` in a language no note of the knowledge base is in (and no title) -> `vec`;
- question_answer / meta_answer: a `hyde` that is a question is searched as a question (`vec`), one that
  talks about "the documentation" loses that frame (`strip`), or either is dropped;
- mine_titles: page titles that the rephrased_query / expected_answer name ("The Workspaces plugin lets
  you ...") become `lex` variants too, when no `lex` is a title already ("weak") or always;
- w_*: the fusion weight of a variant of each shape (`_weights`, read by fuse_rrf).

`diagnose` names what looks weak in an agent's fields; the MCP server turns it into hints for the agent.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
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
_QUOTES = "«\"'*`[„“"  # a one-word title right after one of these is marked as a name
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
    """A crude stem for matching a title's words inside a field (en and ru inflection: drop up to 2 letters)."""
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
    stems: tuple[tuple[frozenset[str], str], ...]  # (stems of the key's words, key)
    langs: frozenset[str]
    ngrams: dict[tuple[str, ...], str] = dataclasses.field(default_factory=dict)  # stemmed words -> key
    family: dict[str, int] = dataclasses.field(default_factory=dict)  # key -> other keys holding all its words

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
        stems = tuple((frozenset(stem(w) for w in k.split()), k) for k in display)
        total = sum(langs.values()) or 1
        keep = frozenset(lg for lg, n in langs.items() if lg != "unknown" and n / total >= min_share)
        ngrams: dict[tuple[str, ...], str] = {}
        for k in display:
            ngrams.setdefault(tuple(stem(w) for w in k.split()), k)
        return cls(display, stems, keep, ngrams, _families(stems))

    def specific(self, title: str, cfg: CleanConfig) -> bool:
        """False for an umbrella name ("Obsidian Sync") whose words recur in more than `max_family` other
        titles: it names a product area, not the page that answers."""
        return not cfg.max_family or self.family.get(title_key(title), 0) <= cfg.max_family

    def mentioned(self, text: str, limit: int) -> list[str]:
        """Titles a sentence mentions, in order: a title of two or more words anywhere (crudely stemmed), a
        one-word title only where it is marked as a name (capitalised inside the sentence, or quoted)."""
        toks = [(m.group(0), m.start()) for m in _WORD.finditer(nfc(text))]
        st = [stem(t.casefold()) for t, _ in toks]
        longest = max((len(k) for k in self.ngrams), default=0)
        out: list[str] = []
        i = 0
        while i < len(toks) and len(out) < limit:
            for n in range(min(longest, len(toks) - i), 0, -1):
                key = self.ngrams.get(tuple(st[i:i + n]))
                if key is None:
                    continue
                word, pos = toks[i]
                before = text[max(0, pos - 1):pos]
                quoted = before != "" and before in _QUOTES
                capital = word[:1].isupper() and i > 0 and text[:pos].rstrip()[-1:] not in ".!?:"
                named = n > 1 or quoted or capital
                if named and self.display[key] not in out:
                    out.append(self.display[key])
                    i += n - 1
                    break
            i += 1
        return out

    def named(self, text: str, cfg: CleanConfig) -> list[str]:
        """Titles `text` names, best first: those all of whose words are in it (the longer, the better;
        covering at least `snap_min_cover` of its content words), else the closest whole-title spelling."""
        key = title_key(text)
        if not key or key in self.display:
            return []
        ws = [w for w in key.split() if w not in STOPWORDS]
        have = {stem(w) for w in ws}
        found = []
        for st, k in self.stems:
            if st and st <= have and len(st) / max(1, len(have)) >= cfg.snap_min_cover:
                found.append((-len(st), k))
        out = [k for _, k in sorted(found)]
        if not out and cfg.fuzzy_cutoff > 0:
            out = difflib.get_close_matches(key, list(self.display), n=1, cutoff=cfg.fuzzy_cutoff)
        return [self.display[k] for k in out if self.specific(k, cfg)][:cfg.max_snaps]

    def is_title(self, text: str) -> bool:
        return title_key(text) in self.display

    def foreign(self, text: str) -> bool:
        """True when the text's language (Cyrillic share) is none of the knowledge base's."""
        return bool(self.langs) and bool(words(text)) and detect_lang(text) not in self.langs


def _families(stems: tuple[tuple[frozenset[str], str], ...]) -> dict[str, int]:
    """key -> how many other keys hold all its words and more (their stem sets are strict supersets of its).

    Through an inverted index (stem -> keys holding it): a key's candidates are the intersection of its
    stems' postings, so the build grows with the postings, not with keys x keys (the pairwise comparison took
    11 CPU-s at 20,000 notes, once per index version in every retrieval process; bench/query_cost.py
    --scale-notes 20000)."""
    postings: dict[str, set[int]] = {}
    for i, (st, _) in enumerate(stems):
        for w in st:
            postings.setdefault(w, set()).add(i)
    out: dict[str, int] = {}
    for st, k in stems:
        holders = set.intersection(*sorted((postings[w] for w in st), key=len)) if st else range(len(stems))
        out[k] = sum(1 for j in holders if len(stems[j][0]) > len(st))  # a superset that is not equal
    return out


def clean_variants(query: str, variants: list[dict], titles: Titles, cfg: CleanConfig
                   ) -> tuple[list[dict], dict[str, int]]:
    """One query's variants (kind, text, source; the original first) -> cleaned variants, each with a
    `weight` (fusion multiplier), and counts of the rules that fired."""
    fired: dict[str, int] = {}

    def hit(rule: str) -> None:
        fired[rule] = fired.get(rule, 0) + 1

    qwords = {stem(w) for w in words(query)}
    out: list[dict] = []
    for v in variants:
        kind, text, src = v["kind"], v["text"], v.get("source")
        if kind == "orig" or src not in cfg.sources:
            out.append({**v, "weight": 1.0})
            continue
        if kind == "hyde":
            inner = strip_meta(text) if cfg.meta_answer != "keep" else None
            w = 1.0
            if inner is not None:
                hit("meta_answer")
                if cfg.meta_answer == "drop" or not inner:
                    continue
                text, w = inner, cfg.w_meta_answer
            if is_question(text) and cfg.question_answer != "keep":
                hit("question_answer")
                if cfg.question_answer == "drop":
                    continue
                kind, w = "vec", w * cfg.w_question_answer
            if titles.foreign(text):
                hit("foreign_vec")
                w *= cfg.w_foreign
            out.append({**v, "kind": kind, "text": text, "weight": w})
            continue
        if kind == "vec":
            w = cfg.w_foreign if titles.foreign(text) else 1.0
            if w != 1.0:
                hit("foreign_vec")
            out.append({**v, "weight": w})
            continue
        # lex
        items = split_list(text) if cfg.split_lists else [text]
        if len(items) > 1 and cfg.foreign_lex_to_vec and titles.foreign(text):
            items = [" ".join(items)]  # a list in another language goes to vectors as one text
        if len(items) > 1:
            hit("split_list")
            items = items[:cfg.max_list_items]
        for item in items:
            if cfg.lex_max_words and len(words(item)) > cfg.lex_max_words and not titles.is_title(item):
                short = distinctive(item, cfg.lex_max_words)
                if short:
                    hit("long_lex")
                    item = short
            named = titles.named(item, cfg) if cfg.snap_titles else []
            if named:
                hit("snap_title")
            if cfg.foreign_lex_to_vec and titles.foreign(item) and not titles.is_title(item):
                hit("foreign_lex")
                out.append({**v, "kind": "vec", "text": item, "weight": cfg.w_foreign})
            else:
                copied = not titles.is_title(item) and {stem(w) for w in words(item)} <= qwords
                if copied:
                    hit("copied_lex")
                out.append({**v, "text": item, "weight": cfg.w_copied_lex if copied else 1.0})
            out += [{**v, "text": t, "weight": cfg.w_snap} for t in named]
    if cfg.mine_titles != "off" and cfg.max_mined:
        src = next((v for v in variants if v["kind"] != "orig" and v.get("source") in cfg.sources), None)
        good_lex = any(v["kind"] == "lex" and v.get("weight") in (1.0, cfg.w_snap) and titles.is_title(v["text"])
                       for v in out[1:])
        if src is not None and (cfg.mine_titles == "always" or not good_lex):
            mined: list[str] = []
            for v in out:
                if v["kind"] in ("vec", "hyde") and v is not out[0]:
                    mined += [t for t in titles.mentioned(v["text"], 2 * cfg.max_mined)
                              if t not in mined and titles.specific(t, cfg)]
            if mined:
                hit("mined_title")
                out += [{**src, "kind": "lex", "text": t, "weight": cfg.w_mined} for t in mined[:cfg.max_mined]]
    seen: set[tuple[str, str]] = set()
    uniq = []
    for v in out:
        key = (v["kind"], v["text"].casefold())
        if v["kind"] != "orig" and (key in seen or v["text"].casefold() == query.casefold() or v["weight"] <= 0):
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
    those of one built before in this process (an index round that edited note bodies) reuses it."""
    def build() -> Titles:
        docs = col.read(col.documents_name, ["path", "title", "aliases"]).to_pylist()
        langs = count_languages(col)
        key = hashlib.sha256(json.dumps([sorted(langs.items()), sorted(docs, key=lambda d: d["path"])],
                                        ensure_ascii=False).encode("utf-8", "surrogateescape")).hexdigest()
        with _TITLES_LOCK:
            if key in _TITLES:
                _TITLES.move_to_end(key)
                return _TITLES[key]
        got = Titles.build(docs, langs)
        with _TITLES_LOCK:
            _TITLES[key] = got
            while len(_TITLES) > 4:
                _TITLES.popitem(last=False)
        return got
    return col.memo("clean_titles", build)


WEIGHT = pa.struct([("vid", pa.int32()), ("weight", pa.float64())])


class CleanFields:
    """Stage: `variants` cleaned (rules above), renumbered from 0 (the original), + `_weights` (vid, weight)
    for variants whose fusion weight is not 1. Runs after ExpandQueries, so it sees every source."""

    def __init__(self, cfg: Config, db: str, collection: str):
        self.cfg = cfg.clean
        self.col = Collection(db, collection, cfg)
        self.stats: dict[str, int] = {"queries": 0, "variants_in": 0, "variants_out": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        titles = collection_titles(self.col)
        errors = batch.column("error").to_pylist()
        queries = batch.column("query").to_pylist()
        new_vs, weights = [], []
        for err, q, vs in zip(errors, queries, batch.column("variants").to_pylist()):
            if err is not None or not vs:
                new_vs.append(vs)
                weights.append([])
                continue
            cleaned, fired = clean_variants(q, vs, titles, self.cfg)
            for k, n in fired.items():
                self.stats[k] = self.stats.get(k, 0) + n
            self.stats["queries"] += 1
            self.stats["variants_in"] += len(vs)
            self.stats["variants_out"] += len(cleaned)
            new_vs.append([{"vid": i, "kind": v["kind"], "text": v["text"], "source": v.get("source")}
                           for i, v in enumerate(cleaned)])
            weights.append([{"vid": i, "weight": v["weight"]} for i, v in enumerate(cleaned) if v["weight"] != 1.0])
        batch = batch.set_column(batch.schema.get_field_index("variants"), "variants",
                                 pa.array(new_vs, pa.list_(VARIANT)))
        arr = pa.array(weights, pa.list_(WEIGHT))
        if "_weights" in batch.column_names:
            return batch.set_column(batch.schema.get_field_index("_weights"), "_weights", arr)
        return batch.append_column("_weights", arr)
