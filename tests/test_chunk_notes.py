import itertools

import pytest
from fanout.pipelines.chunk_notes import chunk_note
from fanout.pipelines.markdown import scan_lines, split_sections

from fanout.config import ChunkConfig
from fanout.text import est_tokens

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



NESTED = """## Example
````markdown
# Page Title
```bash
# a comment
```
## Still inside
````

~~~
```python
~~~~ not a close: text follows
# inside too
~~~

## After
Text.
"""


def test_nested_fences_close_only_on_a_long_enough_bare_run():
    # CommonMark: a ```` block ends at ```` (or longer) with nothing after it, not at the inner ```; a line
    # with text after the run never closes
    lines = scan_lines(NESTED)
    assert [s.path for s in split_sections(NESTED, lines)] == [("Example",), ("After",)]
    inside = [ln.text for ln in lines if ln.in_fence]
    assert "## Still inside" in inside and "# inside too" in inside
    assert [ln.text for ln in lines if ln.fence_close] == ["````", "~~~"]

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


# -- the budget holds for every input (issue 13 item 4) -------------------------------------------------
def _max_tokens(chunks):
    return max(est_tokens(c["text"]) for c in chunks)


def test_tiny_forced_sections_stay_separate_and_name_their_heading():
    # was: 30 tiny H2 terms under one H1 merged into one chunk over budget, named "Glossary"
    body = "# Glossary\n\n" + "".join(f"## Term {i}\nTerm {i} means a thing about other things.\n\n"
                                       for i in range(30))
    chunks = chunk_note("g.md", "G", "en", body, 0, ChunkConfig(max_tokens=100))
    assert [c["heading"] for c in chunks[1:]] == [f"Glossary > Term {i}" for i in range(30)]
    assert _max_tokens(chunks) <= 100


def test_packed_subsections_split_under_budget_and_name_the_subsection():
    body = "# Top\n" + "".join(f"### Heading {i}\ntext number {i}\n" for i in range(10_000))
    chunks = chunk_note("t.md", "T", "en", body, 0, ChunkConfig())
    assert len(chunks) > 100 and _max_tokens(chunks) <= 450
    assert chunks[1]["heading"].startswith("Top > Heading ")


@pytest.mark.parametrize("body", [
    "word " * 50_000,  # one line, no break
    "x" * 40_000,  # no space at all: hard cut
    "Sentence one is here. " * 3000,  # one line of sentences
    "## F\nintro\n```\n" + "\n".join(f"code line {i} = {i} * 2" for i in range(3000)) + "\n```\nafter\n",
    "## Р\n" + "Синхронизация хранит одинаковое хранилище на всех устройствах. " * 400,  # 2 chars/token
])
def test_every_chunk_is_under_budget_and_the_text_is_covered(body):
    cfg = ChunkConfig(max_tokens=200)
    chunks = chunk_note("x.md", "X", "en", body, 0, cfg)
    assert _max_tokens(chunks) <= 200
    assert chunks[0]["start"] == 0 or not body[:chunks[0]["start"]].strip()
    for a, b in itertools.pairwise(chunks):  # no gap between consecutive pieces
        assert b["start"] <= a["end"]
    assert not body[chunks[-1]["end"]:].strip()


def test_a_fence_under_budget_is_never_cut():
    fence = "```\n" + "\n".join(f"print({i})" for i in range(40)) + "\n```\n"
    body = "## S\n" + ("Some prose line here.\n" * 30 + fence) * 6
    for c in chunk_note("f.md", "F", "en", body, 0, ChunkConfig(max_tokens=150, overlap=0.0)):
        assert c["text"].count("```") % 2 == 0


def test_real_token_counts_split_a_chunk_that_does_not_fit_the_context():
    # a tokenizer that counts every character: the estimate says 1 chunk, the context says 4+
    body = "## S\n" + "\n".join(f"line {i} with words" for i in range(40))
    chunks = chunk_note("c.md", "C", "en", body, 0, ChunkConfig(), count=lambda t, title: len(t), context=250)
    assert len(chunks) >= 4
    assert all(len(c["embed_text"]) <= 250 for c in chunks)
    assert [c["ordinal"] for c in chunks] == list(range(len(chunks)))
    assert all(c["heading"] == "S" for c in chunks)
