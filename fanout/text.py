"""Small text helpers shared by stages: Unicode-aware terms, token estimates, language guess."""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CYR = re.compile(r"[\u0400-\u04FF]")
_LAT = re.compile(r"[A-Za-z]")
# UTF-8 lead bytes of U+0400-U+04FF (_CYR) and the bytes of everything but ASCII letters (_LAT): counting
# bytes is what findall's one-character matches count, without a list of them (`_cyr_lat`)
_CYR_LEADS = (0xD0, 0xD1, 0xD2, 0xD3)
_NOT_LATIN = bytes(b for b in range(256) if not (65 <= b <= 90 or 97 <= b <= 122))

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
    cyr, lat = _cyr_lat(text[:4000])
    if cyr + lat == 0:
        return default
    return "ru" if cyr > 0.3 * (cyr + lat) else "en"


def est_tokens(text: str, chars_per_token: float = 4.0) -> int:
    """Estimate tokens: Latin ~4 chars/token, Cyrillic ~2 (trip2g's rule), at least 1 for non-empty text."""
    if not text:
        return 0
    cyr = _cyr_lat(text)[0]
    return max(1, int((len(text) - cyr) / chars_per_token + cyr / 2.0 + 0.5))


def _cyr_lat(text: str) -> tuple[int, int]:
    """(Cyrillic letters U+0400-U+04FF, ASCII letters) in `text`: len(_CYR.findall), len(_LAT.findall)."""
    b = text.encode("utf-8", "surrogatepass")
    return sum(b.count(x) for x in _CYR_LEADS), len(b.translate(None, _NOT_LATIN))
