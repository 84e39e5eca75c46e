import itertools

from fanout.config import ChunkConfig
from fanout.text import est_tokens
from pipelines.chunk_notes import chunk_note, scan_lines, split_sections

BODY = """Intro line.

## Alpha
Alpha text.

```bash
# not a heading
## neither
```

### Alpha one
Deep text.

## Beta
Beta text.
"""


def test_headings_outside_fences_only():
    secs = split_sections(BODY, scan_lines(BODY))
    assert [s.path for s in secs] == [(), ("Alpha",), ("Alpha", "Alpha one"), ("Beta",)]


def test_h2_forces_a_chunk_and_small_h3_packs_under_it():
    chunks = chunk_note("a.md", "A", "en", BODY, 0, ChunkConfig(max_tokens=200, min_tokens=1))
    # intro | Alpha (+ its small H3 packed in) | Beta
    assert [c["heading"] for c in chunks] == ["", "Alpha", "Beta"]
    assert "Deep text." in chunks[1]["text"] and "# not a heading" in chunks[1]["text"]


def test_offsets_point_into_the_file_and_breadcrumb_prefixes_embed_text():
    offset = 40  # as if 40 characters of front matter came first
    chunks = chunk_note("a.md", "A", "en", BODY, offset, ChunkConfig(max_tokens=200, min_tokens=1))
    for c in chunks:
        assert BODY[c["start"] - offset:c["end"] - offset].strip("\n") == c["text"]
    assert chunks[1]["embed_text"].startswith("A > Alpha\n")
    off = chunk_note("a.md", "A", "en", BODY, 0, ChunkConfig(max_tokens=200, min_tokens=1, breadcrumb=False))
    assert off[1]["embed_text"] == off[1]["text"]


def test_long_section_is_cut_under_budget_with_overlap_and_never_inside_a_fence():
    para = "\n\n".join(f"Sentence number {i} says something about topic {i}." for i in range(80))
    fence = "```\n" + "\n".join(f"line {i} of code" for i in range(30)) + "\n```\n"
    body = "## Long\n" + para + "\n\n" + fence + "\n" + para
    cfg = ChunkConfig(max_tokens=120, overlap=0.15, min_tokens=10)
    chunks = chunk_note("l.md", "L", "en", body, 0, cfg)
    assert len(chunks) > 3
    for c in chunks:
        assert c["heading"] == "Long"
        assert c["text"].count("```") in (0, 2)  # a fence is whole or absent
        if "```" not in c["text"]:
            assert est_tokens(c["text"]) <= 120 * 1.1
    # overlap: consecutive pieces share text
    assert any(a["end"] > b["start"] for a, b in itertools.pairwise(chunks))


def test_note_under_budget_is_one_chunk():
    chunks = chunk_note("s.md", "S", "en", "Just one line.\n", 0, ChunkConfig())
    assert len(chunks) == 1 and chunks[0]["chunk_id"] == "s.md#0"
