"""Texts the full-text tests index (row ids, postings, the memory engine)."""

from __future__ import annotations

TEXTS = ["sync notes", "internal links", "code blocks fenced", "синхронизация заметок", "блины", "", "zzzz nothing"]
