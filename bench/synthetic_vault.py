"""The query-cost benches' inputs (bench/query_cost.py, bench/scale_curve.py): a synthetic vault written like a
real one (`Topics`: a Zipf vocabulary, one topic per 300 notes with words of its own, so fake-embedder vectors
cluster by topic) and queries with an agent's three fields, plain (`queries`) or written with one topic's words
(`topic_queries`)."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ["backup", "snapshot", "vlan", "router", "vpn", "media", "server", "power", "ups", "sourdough", "dal",
         "train", "lisbon", "packing", "glossary", "meeting", "borscht", "kvass", "baikal", "kazan", "restic",
         "zfs", "mirror", "disk", "pantry", "plug", "camera", "garden", "tomato", "ferment"]


def queries(n: int, seed: int) -> list[dict]:
    """n distinct queries with the three agent fields (each text unique: no cache or dedupe helps)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c = rnd.sample(WORDS, 3)
        out.append({"id": f"q{seed}-{i}", "query": f"how do I set up {a} {b} ({i})",
                    "short_query": f"{a} {c} {i}",
                    "rephrased_query": f"{b} {c} configuration steps {seed}-{i}",
                    "expected_answer": f"The {a} notes explain the {c} setup and the {b} schedule ({seed}-{i})."})
    return out


class Topics:
    """A synthetic vault's words, drawn like a real vault's: a Zipf vocabulary of VOCAB made-up words, and one
    topic per TOPIC_NOTES notes with TOPIC_WORDS words of its own. A note's text is mostly its topic's words
    (TOPIC_SHARE), the rest the common vocabulary, so the fake embedder's bag-of-words vectors (fake.dim: the
    model's 768) cluster by topic with neighbours inside it, as real embeddings do, and a query written with a
    topic's words lands next to that topic's notes. Full-text postings get a realistic spread too (a few
    frequent words, most rare)."""

    VOCAB, TOPIC_NOTES, TOPIC_WORDS, TOPIC_SHARE = 20_000, 300, 150, 0.6

    def __init__(self, notes: int, seed: int = 1):
        import numpy as np

        rng = np.random.default_rng(seed)
        letters = np.array(list("etaoinshrdlucmfwypvbgkqjxz"))
        words: list[str] = []
        seen: set[str] = set()
        while len(words) < self.VOCAB:  # distinct made-up words of 4-10 letters
            w = "".join(rng.choice(letters, int(rng.integers(4, 11))))
            if w not in seen:
                seen.add(w)
                words.append(w)
        self.words = np.array(words)
        p = 1.0 / np.arange(1, self.VOCAB + 1) ** 1.05
        self.p = p / p.sum()
        self.n_topics = max(2, notes // self.TOPIC_NOTES)
        self.topic_words = [self.words[rng.choice(self.VOCAB, self.TOPIC_WORDS, replace=False)]
                            for _ in range(self.n_topics)]
        tp = 1.0 / np.arange(1, self.TOPIC_WORDS + 1) ** 0.8
        self.tp = tp / tp.sum()

    def text(self, rng, topic: int, n: int) -> str:
        own = rng.random(n) < self.TOPIC_SHARE
        out = self.words[rng.choice(self.VOCAB, n, p=self.p)]
        out[own] = self.topic_words[topic][rng.choice(self.TOPIC_WORDS, int(own.sum()), p=self.tp)]
        return " ".join(out.tolist())


def synthetic_vault(root: Path, notes: int, seed: int = 1) -> Path:
    """`notes` markdown notes of two sections each (about 3 chunks a note), each note on one of `Topics`'
    topics (note i: topic i mod topics)."""
    import numpy as np

    top = Topics(notes, seed)
    rng = np.random.default_rng(seed + 1)
    for i in range(notes):
        d = root / f"area{i % 20}"
        d.mkdir(parents=True, exist_ok=True)
        t = i % top.n_topics
        body = [f"## {top.text(rng, t, 2)}\n\n{top.text(rng, t, 120)}.\n" for _ in range(2)]
        (d / f"note {i}.md").write_text(f"# Note {i} {top.text(rng, t, 2)}\n\n" + "\n".join(body),
                                        encoding="utf-8")
    return root


def topic_queries(n: int, seed: int, notes: int) -> list[dict]:
    """n distinct queries about the synthetic vault's topics (`Topics`), the three agent fields included: each
    written with one topic's words, so its vectors land next to that topic's chunks."""
    import numpy as np

    top = Topics(notes, 1)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = int(rng.integers(top.n_topics))
        out.append({"id": f"q{seed}-{i}", "query": f"how do I set up {top.text(rng, t, 4)} ({i})",
                    "short_query": f"{top.text(rng, t, 2)} {i}",
                    "rephrased_query": f"{top.text(rng, t, 5)} configuration steps {seed}-{i}",
                    "expected_answer": f"The notes explain {top.text(rng, t, 14)} ({seed}-{i})."})
    return out
