"""`fanout gaps --previous OLD_ANSWERS`: the questions whose page of an earlier answers file is gone.

A docs team answers its query log every night. A page removed or renamed since the previous run is what scores
alone cannot show on a cross-linked site (another page that mentions the topic still scores high; README
"Gaps"), so the previous answers are compared with the current index: a question whose best page then scored
as an answer (>= gaps.weak_below: a page that only came closest to an unanswered question was no answer to
lose) and is no longer a note of the index has lost its page. The old file may come from any index version
(that is the point), never from another collection. Memory: one path per distinct question.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fanout.config import Config
from fanout.errors import UserError
from fanout.gaps.read import ReadStats, read_answers, text_key

if TYPE_CHECKING:
    from fanout.store.db import Collection


def previous_tops(previous: str, collection: str, cfg: Config) -> dict[str, str]:
    """text key -> the best page of that question in `previous`, for the questions it answered then."""
    tops: dict[str, tuple[float, str]] = {}
    rows = 0
    for t in read_answers(previous, cfg.storage, ReadStats()):
        rows += t.num_rows
        for stamp in t.column("index").unique().to_pylist():
            if stamp is not None and stamp.split("@")[0] != collection:
                raise UserError(f"--previous {previous}: answered from collection {stamp.split('@')[0]!r}, not "
                                f"{collection!r}; give an earlier answers file of {collection!r}")
        cols = [t.column(c).to_pylist() for c in ("query", "path", "score", "error")]
        for query, path, score, error in zip(*cols):
            if query is None or path is None or error is not None or score is None or not math.isfinite(score):
                continue
            key = text_key(query)
            if key not in tops or score > tops[key][0]:
                tops[key] = (float(score), path)
    if not rows:
        raise UserError(f"--previous {previous}: no answer rows in it; give an earlier --out file of `fanout batch`")
    return {k: p for k, (score, p) in tops.items() if score >= cfg.gaps.weak_below}


def index_paths(col: Collection) -> set[str]:
    """Every note path of the collection's current documents version."""
    col.refresh()
    with col.guard(col.documents_name):
        t = col.table(col.documents_name).search().select(["path"]).limit(None).to_arrow()
    return set(t.column("path").to_pylist())


def lost_pages(previous: str, col: Collection, cfg: Config) -> dict[str, str]:
    """text key -> the page that answered it in `previous` and is no longer in `col`'s index."""
    have = index_paths(col)
    return {k: p for k, p in previous_tops(previous, col.name, cfg).items() if p not in have}
