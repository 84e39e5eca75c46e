"""Small text helpers shared by stages: Unicode-aware terms, token estimates, language guess."""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CYR = re.compile(r"[\u0400-\u04FF]")
_LAT = re.compile(r"[A-Za-z]")

STOPWORDS = frozenset(
    ["a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "how", "do", "does", "i", "is", "are", "can", "what", "where", "why", "when", "which", "my", "me", "you", "it", "this", "that", "be", "by", "from", "as", "at", "not", "no", "use", "using", "into", "your", "get", "set", "there", "their", "about", "и", "в", "во", "не", "на", "я", "что", "как", "с", "со", "по", "к", "ко", "у", "из", "за", "от", "до", "для", "это", "ли", "или", "а", "но", "же", "то", "бы", "мне", "можно", "ли", "чем", "где", "когда", "почему", "какой", "какие", "какая", "каком"]
)


def nfc(s: str) -> str:
    return unicodedata.normalize("NFC", s)


def terms(text: str) -> list[str]:
    """Lower-cased word terms (letters and digits of any script), stopwords removed."""
    return [t for t in _WORD.findall(text.casefold()) if t not in STOPWORDS]


def stem_key(term: str) -> str:
    """A crude language-neutral stem for overlap checks: the first 5 characters (covers most inflection)."""
    return term[:5] if len(term) > 5 else term


def shares_term(a: str, b: str) -> bool:
    """True when two texts share a (crudely stemmed) term; works for Cyrillic, unlike qmd's ASCII filter."""
    ka = {stem_key(t) for t in terms(a)}
    return any(stem_key(t) in ka for t in terms(b))


def detect_lang(text: str, default: str = "en") -> str:
    """Guess 'ru' or 'en' from the share of Cyrillic letters (enough for the vaults we index)."""
    sample = text[:4000]
    cyr = len(_CYR.findall(sample))
    lat = len(_LAT.findall(sample))
    if cyr + lat == 0:
        return default
    return "ru" if cyr > 0.3 * (cyr + lat) else "en"


def est_tokens(text: str, chars_per_token: float = 4.0) -> int:
    """Estimate tokens: Latin ~4 chars/token, Cyrillic ~2 (trip2g's rule), at least 1 for non-empty text."""
    if not text:
        return 0
    cyr = len(_CYR.findall(text))
    return max(1, int((len(text) - cyr) / chars_per_token + cyr / 2.0 + 0.5))
