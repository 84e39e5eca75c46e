"""A prefilter (fanout/filters.py's SQL `where`) as the rows it keeps: one bool per row of a pinned chunks
version, in sorted row-id order, evaluated by Lance once per filter and version and shared by the searches that
rank in memory (the memory full-text engine, fanout/store/fts.py; exact vector search, fanout/store/
exact_vectors.py), so only allowed rows are ranked and a filter costs one Lance scan however many queries use it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lance import LanceDataset

MASKS_PER_VERSION = 64  # filters kept per version (a batch's queries share a few; an agent's fields a few more)
VERSIONS = 2  # versions whose masks are kept: the pinned one and the one a watch round is publishing
_MASKS: OrderedDict[tuple[str, int], OrderedDict[str, np.ndarray]] = OrderedDict()
_LOCK = threading.RLock()


def allowed(ds: LanceDataset, ids: np.ndarray, where: str) -> np.ndarray | None:
    """The rows (a bool per row of `ids`, the sorted row ids of the pinned version `ds`) that pass `where`;
    None when Lance cannot evaluate it here (the caller sends the query to Lance, which says what is wrong)."""
    key = (str(ds.uri), int(ds.version))
    with _LOCK:
        if key not in _MASKS:
            _MASKS[key] = OrderedDict()
            while len(_MASKS) > VERSIONS:
                _MASKS.popitem(last=False)
        _MASKS.move_to_end(key)
        masks = _MASKS[key]
        got = masks.get(where)
        if got is not None and len(got) == len(ids):
            masks.move_to_end(where)
            return got
    try:
        rows = ds.to_table(columns=[], with_row_id=True, filter=where)["_rowid"].to_numpy()
    except Exception:  # noqa: BLE001  the Lance call of the caller's fallback raises it with its own message
        return None
    pos = np.searchsorted(ids, rows)
    if len(rows) and not (ids[np.minimum(pos, len(ids) - 1)] == rows).all():
        return None
    mask = np.zeros(len(ids), bool)
    mask[pos] = True
    mask.flags.writeable = False  # shared by every search of the version
    with _LOCK:
        masks[where] = mask
        masks.move_to_end(where)
        while len(masks) > MASKS_PER_VERSION:
            masks.popitem(last=False)
    return mask
