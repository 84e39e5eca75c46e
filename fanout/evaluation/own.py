"""Your own judged queries for `fanout eval --queries FILE`: the file's rows and agent fields, read and checked
(each bad row named with its fix; judged paths checked against the index)."""

from __future__ import annotations

import json
import logging
import unicodedata
from pathlib import Path

from fanout.errors import UserError
from fanout.evaluation.bench_data import AGENT_FIELDS as FIELDS

log = logging.getLogger(__name__)


def _path(p: str) -> str:
    return unicodedata.normalize("NFC", p.strip().replace("\\", "/")).removeprefix("./")


def load_judged(path: str | Path) -> list[dict]:
    """Judged queries in the documented format (EVAL_HELP); every problem is reported with its line."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            items = [(f"item {i}", x) for i, x in enumerate(json.loads(text), 1)]
        except ValueError as e:
            raise UserError(f"{path}: not valid JSON ({e}); give a JSON list or one object per line") from None
    else:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append((f"line {n}", json.loads(line)))
                except ValueError as e:
                    items.append((f"line {n}", ValueError(f"not valid JSON ({e})")))
    problems: list[str] = []
    out: list[dict] = []
    seen: set[str] = set()
    for where, q in items:
        if isinstance(q, Exception) or not isinstance(q, dict):
            problems.append(f"{where}: {q if isinstance(q, Exception) else 'not a JSON object'}")
            continue
        qid = q.get("id")
        if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid).strip() == "":
            problems.append(f"{where}: `id` is missing or not a string")
            continue
        qid = str(qid)
        if qid in seen:
            problems.append(f"{where}: id {qid!r} appears twice; ids must be unique")
        seen.add(qid)
        if not isinstance(q.get("query"), str) or not q["query"].strip():
            problems.append(f"{where} ({qid}): `query` is missing or empty")
        lists = {}
        for key in ("relevant", "partial"):
            v = q.get(key) or []
            v = [v] if isinstance(v, str) else v
            if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
                problems.append(f"{where} ({qid}): `{key}` must be a list of note paths")
                v = []
            lists[key] = [_path(x) for x in v]
        if not lists["relevant"]:
            problems.append(f"{where} ({qid}): `relevant` is empty; judge at least one page relevant")
        extra = {k: str(q[k]) for k in ("lang", "subset", "category") if q.get(k) not in (None, "")}
        out.append({"id": qid, "query": q.get("query"), **lists, "lang": extra.get("lang", ""),
                    "subset": extra.get("subset", ""), "category": extra.get("category", ""),
                    "set": extra.get("subset", "all")})
    if problems:
        raise UserError(f"{path}: {len(problems)} problem(s) in the judged queries:\n  " + "\n  ".join(problems[:20])
                        + "\nformat: one JSON object a line with id, query, relevant [paths], optional partial, "
                        "subset, category, lang (see `fanout eval --help`)")
    return out


def load_own_fields(files: list[str], ids: set[str]) -> dict[str, dict[str, str]]:
    """Agent fields keyed by the judged queries' own ids (a list of objects with `id`, or a map id -> object)."""
    fields: dict[str, dict[str, str]] = {}
    for f in files:
        data = json.loads(Path(f).read_text(encoding="utf-8"))
        items = [dict(v, id=k) for k, v in data.items()] if isinstance(data, dict) else list(data or [])
        for item in items:
            if isinstance(item, dict) and item.get("id") is not None:
                fields[str(item["id"])] = {k: item[k].strip() for k in FIELDS if isinstance(item.get(k), str)}
    unknown = sorted(set(fields) - ids)
    if fields and len(unknown) == len(fields):
        raise UserError(f"agent fields in {files} are keyed by ids like {unknown[:3]}, none of which is a "
                        f"query id (e.g. {sorted(ids)[:3]}); key them by the judged queries' `id`")
    if unknown:
        log.warning("%d agent-field entries match no query id (e.g. %s); ignored", len(unknown), unknown[:3])
    return fields


def check_judged(col, queries: list[dict]) -> None:
    """Every judged path must be a note of the index; the error lists the strays and the closest paths."""
    from difflib import get_close_matches

    t = col.table(col.documents_name).search().select(["path"]).limit(None).to_arrow()
    known = set(t["path"].to_pylist())
    missing = [(q["id"], p) for q in queries for p in q["relevant"] + q["partial"] if p not in known]
    if not missing:
        return
    lines = []
    for qid, p in missing[:10]:
        close = get_close_matches(p, known, n=1)
        lines.append(f"{qid}: {p!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise UserError(f"{len(missing)} judged path(s) are not notes of collection {col.name!r} "
                    f"({len(known)} notes, vault {col.read_manifest().get('vault')}):\n  " + "\n  ".join(lines)
                    + "\npaths are relative to the vault root, with .md, as `fanout ls` prints them")
