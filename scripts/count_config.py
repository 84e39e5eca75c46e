"""Count fanout's config fields: every dataclass field in fanout/config/ (per class) and the keys each bundled
profile (configs/*.yaml) sets. Rerun: `.venv/bin/python scripts/count_config.py` (`--json` for a machine form).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from collections.abc import Iterator
from typing import Any

import fanout.config as config_pkg
from fanout.config import CONFIG_DIR, Config, remote, sections, services
from fanout.config.safe_yaml import load_bounded


def dataclass_fields() -> dict[str, int]:
    """Fields per dataclass defined in fanout/config/ (Config's own fields are its sections)."""
    out: dict[str, int] = {}
    for mod in (sections, services, remote, config_pkg):
        for name, cls in inspect.getmembers(mod, inspect.isclass):
            if dataclasses.is_dataclass(cls) and cls.__module__ == mod.__name__:
                out[name] = len(dataclasses.fields(cls))
    return dict(sorted(out.items()))


def leaf_settings(obj: Any = None, prefix: str = "") -> Iterator[str]:
    """Every setting a user can write (`section.field`), the actor sections counted once each."""
    obj = Config() if obj is None else obj
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from leaf_settings(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


def profile_keys() -> dict[str, int]:
    """Settings each bundled profile sets itself (not those it inherits through `extends`)."""
    def count(data: Any) -> int:
        return sum(count(v) if isinstance(v, dict) else 1 for k, v in data.items() if k not in ("extends", "profile"))

    return {p.name: count(load_bounded(p.read_text(encoding="utf-8"), 16, 200_000) or {})
            for p in sorted(CONFIG_DIR.glob("*.yaml"))}


def main() -> None:
    per_class = dataclass_fields()
    leaves = list(leaf_settings())
    sections_only = sum(n for name, n in per_class.items() if name not in ("Config", "ServedSpec"))
    report = {"dataclass_fields": per_class, "dataclass_fields_total": sum(per_class.values()),
              "section_fields": sections_only,
              "settings": len(leaves), "profile_keys": profile_keys()}
    if "--json" in sys.argv:
        print(json.dumps(report, indent=1))
        return
    for name, n in per_class.items():
        print(f"{name:16} {n:4}")
    print(f"{'total':16} {report['dataclass_fields_total']:4}  (fields of the dataclasses in fanout/config/)")
    print(f"section fields {sections_only}  (the same without Config's section slots and ServedSpec, a parsed value)")
    print(f"settings {len(leaves)}  (section.field a config can set; the 5 actor sections count each)")
    for name, n in report["profile_keys"].items():
        print(f"configs/{name:20} {n:4} keys set")


if __name__ == "__main__":
    main()
