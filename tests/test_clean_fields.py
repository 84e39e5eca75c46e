"""Field hygiene (pipelines/clean_fields.py): each rule on hand-built rows, each switch off leaves the field
alone, weights reach fusion, and the stage runs in the search pipeline (fake profile, milliseconds)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from fanout.pipelines.clean_fields import Titles, clean_variants, diagnose, hints, strip_meta
from fanout.pipelines.fuse_rrf import fuse_rrf

from fanout.config import CleanConfig, ConfigError, load_config
from fanout.schemas import HITS

DOCS = [
    {"path": "Linking notes and files/Internal links.md", "title": "Internal links",
     "aliases": ["Wikilinks", "Linking/Old links"]},
    {"path": "Linking notes and files/Embed files.md", "title": "Embed files", "aliases": []},
    {"path": "Editing and formatting/Tags.md", "title": "Tags", "aliases": None},
    {"path": "User interface/Hotkeys.md", "title": "Hotkeys", "aliases": ["Keyboard shortcuts"]},
    {"path": "Plugins/Canvas.md", "title": "Canvas", "aliases": []},
    {"path": "Plugins/Daily notes.md", "title": "Daily notes", "aliases": []},
]
TITLES = Titles.build(DOCS, {"en": 6})
RU_TITLES = Titles.build([{"path": "Ссылки/Внутренние ссылки.md", "title": "Внутренние ссылки",
                           "aliases": ["Internal links"]}], {"ru": 10})
# every rule on (the shipped defaults leave some off: see CleanConfig), so each test sees its rule fire
CFG = CleanConfig(enabled=True, split_lists=True, snap_titles=True, question_answer="vec")


def run(query: str, *variants: tuple[str, str], titles: Titles = TITLES, cfg: CleanConfig = CFG,
        source: str = "agent") -> list[tuple[str, str, float]]:
    vs = [{"kind": "orig", "text": query, "source": "query"}] + [
        {"kind": k, "text": t, "source": source} for k, t in variants]
    out, _ = clean_variants(query, vs, titles, cfg)
    return [(v["kind"], v["text"], v["weight"]) for v in out[1:]]


def test_a_copied_short_query_snaps_to_the_title_it_names():
    got = run("how to create internal links between notes", ("lex", "internal links notes"))
    # the copy stays, and the title whose every word it holds (crudely stemmed: "links" ~ "link") is added
    assert ("lex", "internal links notes", 1.0) in got
    assert ("lex", "Internal links", 1.0) in got


def test_an_exact_title_is_left_alone_and_a_misspelt_one_is_corrected():
    assert run("q", ("lex", "Hotkeys")) == [("lex", "Hotkeys", 1.0)]
    assert ("lex", "Canvas", 1.0) in run("q", ("lex", "Canvass"))
    # an alias counts as a title: nothing to add
    assert run("q", ("lex", "keyboard shortcuts")) == [("lex", "keyboard shortcuts", 1.0)]


def test_a_title_that_covers_too_little_of_the_short_query_is_not_snapped():
    # "Tags" is one of four content words: below snap_min_cover 0.5
    got = run("q", ("lex", "tags folders nested hierarchy"))
    assert [t for _, t, _ in got] == ["tags folders nested hierarchy"]


def test_a_comma_list_is_split_into_one_lex_per_item():
    got = run("q", ("lex", "tags, canvas, daily notes, hotkeys"))
    assert [t for _, t, _ in got] == ["tags", "canvas", "daily notes"]  # max_list_items 3
    off = run("q", ("lex", "tags, canvas"), cfg=dataclasses.replace(CFG, split_lists=False))
    assert [t for _, t, _ in off] == ["tags, canvas", "Canvas", "Tags"]  # unsplit, still naming two titles


def test_an_over_long_short_query_keeps_its_distinctive_terms():
    got = run("q", ("lex", "how can I make a way to sync my daily journal templates automatically"))
    assert got[0][1] == "sync daily journal templates"
    off = run("q", ("lex", "how can I sync my daily journal"), cfg=dataclasses.replace(CFG, lex_max_words=0))
    assert off[0][1] == "how can I sync my daily journal"


@pytest.mark.parametrize("text, inner", [
    ("The documentation should explain how to embed a file.", "How to embed a file."),
    ("The docs should describe that tags can be nested.", "Tags can be nested."),
    ("Documentation explains that hotkeys are set in Settings.", "Hotkeys are set in Settings."),
    ("В документации должно быть объяснено, как создать ссылку.", "Как создать ссылку."),
    ("Tags can be nested with a slash.", None),
])
def test_the_documentation_frame_is_recognised(text, inner):
    assert strip_meta(text) == inner


def test_an_answer_about_the_documentation_loses_its_frame_and_a_question_is_searched_as_one():
    got = run("q", ("hyde", "The documentation should explain that tags can be nested with a slash."))
    assert got == [("hyde", "Tags can be nested with a slash.", 1.0)]
    # the frame around a question: stripped, then routed as a question (vec, the query prompt)
    got = run("q", ("hyde", "The documentation should explain how to embed a file"))
    assert got == [("vec", "How to embed a file", 1.0)]
    assert run("q", ("hyde", "How do I embed a file?")) == [("vec", "How do I embed a file?", 1.0)]
    drop = dataclasses.replace(CFG, question_answer="drop", meta_answer="drop")
    assert run("q", ("hyde", "How do I embed a file?"), ("hyde", "The docs should explain X."), cfg=drop) == []
    keep = dataclasses.replace(CFG, question_answer="keep", meta_answer="keep")
    assert run("q", ("hyde", "How do I embed a file?"), cfg=keep) == [("hyde", "How do I embed a file?", 1.0)]


def test_a_short_query_in_no_language_of_the_notes_goes_to_vectors_unless_it_is_a_title():
    # an English knowledge base, a Russian short_query
    assert run("q", ("lex", "горячие клавиши")) == [("vec", "горячие клавиши", 1.0)]
    # a Russian knowledge base whose page carries the English title as an alias: stays lex (alias lane)
    assert run("q", ("lex", "Internal links"), titles=RU_TITLES) == [("lex", "Internal links", 1.0)]
    assert run("q", ("lex", "settings sync"), titles=RU_TITLES) == [("vec", "settings sync", 1.0)]
    # a list in another language is one vector text, not one per word
    assert run("q", ("lex", "горячие, клавиши")) == [("vec", "горячие клавиши", 1.0)]
    off = dataclasses.replace(CFG, foreign_lex_to_vec=False)
    assert run("q", ("lex", "горячие клавиши"), cfg=off) == [("lex", "горячие клавиши", 1.0)]


def test_shape_weights_are_attached():
    cfg = dataclasses.replace(CFG, w_snap=0.5, w_copied_lex=0.25, w_question_answer=0.7, w_foreign=0.3)
    got = run("how to create internal links between notes", ("lex", "internal links notes"),
              ("hyde", "How are links made?"), ("hyde", "Горячие клавиши задаются в настройках."), cfg=cfg)
    assert got == [("lex", "internal links notes", 0.25), ("lex", "Internal links", 0.5),
                   ("vec", "How are links made?", 0.7), ("hyde", "Горячие клавиши задаются в настройках.", 0.3)]
    # weight 0 drops the variant
    assert run("q", ("hyde", "How?"), cfg=dataclasses.replace(CFG, w_question_answer=0.0)) == []


def test_only_the_configured_sources_are_cleaned():
    cfg = dataclasses.replace(CFG, sources=("model",))
    assert run("q", ("lex", "tags, canvas"), cfg=cfg) == [("lex", "tags, canvas", 1.0)]  # agent: untouched
    assert [t for _, t, _ in run("q", ("lex", "tags, canvas"), cfg=cfg, source="model")] == ["tags", "canvas"]


def test_duplicates_and_the_query_itself_are_removed():
    got = run("tags", ("lex", "Tags, tags, canvas"))
    assert got == [("lex", "canvas", 1.0)]


def test_diagnose_and_hints_name_the_weak_fields():
    row = {"query": "how to create internal links between notes", "short_query": "internal links notes",
           "rephrased_query": "How do I link notes?", "expected_answer": "The documentation should explain it."}
    assert diagnose(row, TITLES) == [("short_query", "copied"), ("expected_answer", "meta")]
    hs = hints(row, TITLES, ["Internal links", "Embed files"])
    assert hs[0].startswith("short_query works best as the feature's name") and hs[0].endswith(
        "e.g. one of: Internal links, Embed files")
    good = {"query": "q", "short_query": "Internal links", "rephrased_query": "r",
            "expected_answer": "Type [[ to link a note."}
    assert diagnose(good, TITLES) == []
    assert diagnose({"query": "q", "short_query": "a, b", "expected_answer": "Is it?"}, TITLES) == [
        ("short_query", "list"), ("expected_answer", "question")]
    assert diagnose({"query": "q", "short_query": "Tags"}, TITLES) == [("expected_answer", "empty")]
    assert diagnose({"query": "q", "short_query": "теги"}, TITLES)[0] == ("short_query", "language")


def test_variant_weights_scale_fusion():
    # two variants put different pages first; halving variant 2's weight lets variant 1's page win
    hits = pa.Table.from_pylist([
        {"qid": "q", "vid": 1, "kind": "lex", "lane": "fts", "path": "A.md", "chunk_id": "A#0", "_rank": 1,
         "_score": 1.0},
        {"qid": "q", "vid": 2, "kind": "hyde", "lane": "vec", "path": "B.md", "chunk_id": "B#0", "_rank": 1,
         "_score": 0.9}], schema=HITS)
    cfg = load_config("local").fuse
    plain = fuse_rrf(hits, cfg).to_pylist()
    assert plain[0]["path"] == "B.md"  # full-text lists weigh fts_scale 0.5: B ahead
    weighted = fuse_rrf(hits, cfg, weights={("q", 2): 0.25}).to_pylist()
    assert weighted[0]["path"] == "A.md"
    # 1.0 / (60 + 1) * 0.5 (fts) + bonus 0.05 for A; 0.25 / 61 + 0.05 for B
    assert weighted[0]["_rrf"] == pytest.approx(0.5 / 61 + 0.05)
    assert weighted[1]["_rrf"] == pytest.approx(0.25 / 61 + 0.05)


def test_bad_config_values_name_the_key():
    with pytest.raises(ConfigError, match="clean.question_answer must be one of"):
        load_config("fake").replace(clean={"question_answer": "maybe"})
    with pytest.raises(ConfigError, match=r"clean.sources must be some of"):
        load_config("fake").replace(clean={"sources": ["agent", "oracle"]})
    with pytest.raises(ConfigError, match="clean.w_snap must be >= 0"):
        load_config("fake").replace(clean={"w_snap": -1.0})


def test_the_stage_cleans_a_batch_in_the_search_pipeline(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from tests.support.vault import write_vault

    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    cfg = fake_cfg.replace(clean={"split_lists": True, "snap_titles": True, "question_answer": "vec"})
    rows = [{"id": "a", "query": "how do I link one note to another", "short_query": "link note, wikilinks",
             "expected_answer": "The documentation should explain how to link notes"},
            {"id": "bad", "query": ""}]
    out = Searcher(db, "t", cfg, fake_runner).search(rows, SearchOptions(n=3))
    vs = [(v["kind"], v["text"]) for v in out.variants.to_pylist() if v["qid"] == "a"]
    assert ("lex", "wikilinks") in vs and ("lex", "link note") in vs  # the list, split
    assert ("vec", "How to link notes") in vs  # the frame stripped, a question searched as one
    assert [v["vid"] for v in out.variants.to_pylist() if v["qid"] == "a"] == list(range(len(vs)))
    assert out.results.num_rows > 0 and out.errors.num_rows == 1
    stages = out.stats["stages"]
    clean = next(v for k, v in stages.items() if "CleanFields" in k)
    assert clean["split_list"] == 1 and clean["meta_answer"] == 1
    off = Searcher(db, "t", fake_cfg.replace(clean={"enabled": False}), fake_runner).search(rows[:1],
                                                                                         SearchOptions(n=3))
    assert ("lex", "link note, wikilinks") in [(v["kind"], v["text"]) for v in off.variants.to_pylist()]


def test_titles_named_in_the_other_fields_are_mined_when_no_short_query_is_a_title():
    mine = dataclasses.replace(CFG, mine_titles="weak", w_mined=0.5)
    got = run("how to connect notes", ("lex", "connect notes"),
              ("hyde", "Type [[ to make Internal links; the Hotkeys panel can bind it."), cfg=mine)
    # a two-word title anywhere, a one-word title only when marked as a name (capitalised mid-sentence)
    assert got[-2:] == [("lex", "Internal links", 0.5), ("lex", "Hotkeys", 0.5)]
    got = run("q", ("lex", "Canvas"), ("hyde", "Internal links are made with [[."), cfg=mine)
    assert got == [("lex", "Canvas", 1.0), ("hyde", "Internal links are made with [[.", 1.0)]  # lex is a title
    always = dataclasses.replace(mine, mine_titles="always")
    assert ("lex", "Internal links", 0.5) in run("q", ("lex", "Canvas"), ("hyde", "Internal links are made."),
                                                 cfg=always)
    # sentence-initial capitals and lower-case one-word titles are not names; quotes are
    assert TITLES.mentioned("Tags help. use tags and canvas", 3) == []
    assert RU_TITLES.mentioned("плагин «Внутренние ссылки» и ещё", 3) == ["Внутренние ссылки"]
    assert Titles.build([{"path": "Слайды.md", "title": "Слайды"}], {"ru": 1}).mentioned(
        "Основной плагин «Слайды» показывает заметку", 3) == ["Слайды"]


def test_the_local_expanders_lines_and_qmd_searches_are_cleaned_too(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from tests.support.vault import write_vault

    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    cfg = fake_cfg.replace(clean={"split_lists": True, "snap_titles": True, "question_answer": "vec"},
                           probe={"enabled": False})
    searcher = Searcher(db, "t", cfg, fake_runner)
    # the fake expander writes "The notes explain <query>." as its hyde line: a documentation frame
    for expect_source in ("model", "cache"):  # generated, then read back from the expansions cache
        out = searcher.search([{"id": "e", "query": "how do I make internal links"}], SearchOptions(expand=True))
        vs = [(v["kind"], v["text"], v["source"]) for v in out.variants.to_pylist()]
        assert ("vec", "How do I make internal links.", expect_source) in vs
        assert ("lex", "Internal links", expect_source) in vs  # "make internal notes": names the title
    rows = [{"id": "s", "query": "old links", "searches": [{"type": "lex", "query": "wikilinks, daily notes"},
                                                           {"type": "hyde", "query": "How are links made?"}]},
            {"id": "o", "query": "old links", "queries": ["how do I make links between two notes in my vault"]}]
    out = searcher.search(rows, SearchOptions())
    got = {(v["qid"], v["kind"], v["text"]) for v in out.variants.to_pylist()}
    assert {("s", "lex", "wikilinks"), ("s", "lex", "daily notes"), ("s", "vec", "How are links made?")} <= got
    # OHS's rephrasing is searched as a question (vec) and as full text, trimmed to its distinctive terms
    assert {("o", "vec", "how do I make links between two notes in my vault"),
            ("o", "lex", "links between two notes")} <= got


def test_an_umbrella_title_is_not_snapped_or_mined_when_max_family_is_set():
    docs = DOCS + [{"path": f"Sync/{t}.md", "title": t, "aliases": []}
                   for t in ("Obsidian Sync", "Set up Obsidian Sync", "Troubleshoot Obsidian Sync",
                             "Obsidian Sync regions")]
    titles = Titles.build(docs, {"en": 10})
    assert titles.family["obsidian sync"] == 3  # three other titles hold both its words
    cfg = dataclasses.replace(CFG, mine_titles="weak", max_family=2)
    got = run("q", ("lex", "my thing"), ("hyde", "Obsidian Sync keeps Internal links working."), titles=titles,
              cfg=cfg)
    assert [t for k, t, _ in got if k == "lex"] == ["my thing", "Internal links"]
    assert ("lex", "Obsidian Sync", 1.0) in run("q", ("lex", "my thing"), ("hyde", "Obsidian Sync keeps it."),
                                                titles=titles, cfg=dataclasses.replace(cfg, max_family=0))


def test_title_families_match_the_pairwise_definition():
    """A title's family (other titles holding all its words and more: an umbrella name like "Obsidian Sync")
    is counted through an inverted index; it must equal the pairwise definition, duplicates, one-word and
    wordless titles included."""
    import random

    rnd = random.Random(5)
    vocab = ["sync", "obsidian", "publish", "canvas", "graph", "view", "core", "plugin", "the", "settings"]
    docs = [{"path": f"p{i}.md", "title": " ".join(rnd.sample(vocab, rnd.randint(1, 4)))} for i in range(300)]
    docs += [{"path": "q.md", "title": "Sync"}, {"path": "r.md", "title": "the"}, {"path": "s.md", "title": "?"}]
    t = Titles.build(docs, {"en": len(docs)})
    want = {k: sum(1 for st2, k2 in t.stems if k2 != k and st < st2) for st, k in t.stems}
    assert t.family == want and max(want.values()) > 0
