"""Field hygiene (pipelines/clean_fields.py): each rule on hand-built rows, each switch off leaves the field
alone, and the stage runs in the search pipeline (fake profile, milliseconds)."""

from __future__ import annotations

import dataclasses

import pytest
from fanout.pipelines.clean_fields import Titles, clean_variants, diagnose, hints, strip_meta

from fanout.config import CleanConfig, ConfigError, load_config

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
CFG = CleanConfig()  # the shipped defaults: every rule on


def run(query: str, *variants: tuple[str, str], titles: Titles = TITLES, cfg: CleanConfig = CFG,
        source: str = "agent") -> list[tuple[str, str]]:
    vs = [{"kind": "orig", "text": query, "source": "query"}] + [
        {"kind": k, "text": t, "source": source} for k, t in variants]
    out, _ = clean_variants(query, vs, titles, cfg)
    return [(v["kind"], v["text"]) for v in out[1:]]


def test_an_over_long_short_query_keeps_its_distinctive_terms():
    got = run("q", ("lex", "how can I make a way to sync my daily journal templates automatically"))
    assert got[0][1] == "sync daily journal templates"
    # a title or alias is never trimmed, however long
    long_title = Titles.build([{"path": "How to set up and sync your daily notes.md"}], {"en": 1})
    assert run("q", ("lex", "how to set up and sync your daily notes"), titles=long_title) == [
        ("lex", "how to set up and sync your daily notes")]
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


def test_an_answer_about_the_documentation_loses_its_frame():
    got = run("q", ("hyde", "The documentation should explain that tags can be nested with a slash."))
    assert got == [("hyde", "Tags can be nested with a slash.")]
    # the frame around a question: stripped; the question stays a hyde (an answer-shaped line)
    assert run("q", ("hyde", "The documentation should explain how to embed a file")) == [
        ("hyde", "How to embed a file")]
    assert run("q", ("hyde", "How do I embed a file?")) == [("hyde", "How do I embed a file?")]
    drop = dataclasses.replace(CFG, meta_answer="drop")
    assert run("q", ("hyde", "How do I embed a file?"), ("hyde", "The docs should explain X."), cfg=drop) == [
        ("hyde", "How do I embed a file?")]
    keep = dataclasses.replace(CFG, meta_answer="keep")
    assert run("q", ("hyde", "The docs should explain X."), cfg=keep) == [("hyde", "The docs should explain X.")]


def test_a_short_query_in_no_language_of_the_notes_goes_to_vectors_unless_it_is_a_title():
    # an English knowledge base, a Russian short_query
    assert run("q", ("lex", "горячие клавиши")) == [("vec", "горячие клавиши")]
    # a Russian knowledge base whose page carries the English title as an alias: stays lex (alias lane)
    assert run("q", ("lex", "Internal links"), titles=RU_TITLES) == [("lex", "Internal links")]
    assert run("q", ("lex", "settings sync"), titles=RU_TITLES) == [("vec", "settings sync")]
    # a vector-lane line in another language is left as it is
    assert run("q", ("vec", "горячие клавиши")) == [("vec", "горячие клавиши")]
    off = dataclasses.replace(CFG, foreign_lex_to_vec=False)
    assert run("q", ("lex", "горячие клавиши"), cfg=off) == [("lex", "горячие клавиши")]


def test_only_the_configured_sources_are_cleaned():
    cfg = dataclasses.replace(CFG, sources=("model",))
    framed = ("hyde", "The docs should explain that tags nest.")
    assert run("q", framed, cfg=cfg) == [framed]  # agent: untouched
    assert run("q", framed, cfg=cfg, source="model") == [("hyde", "Tags nest.")]


def test_duplicates_and_the_query_itself_are_removed():
    got = run("tags", ("lex", "Tags"), ("lex", "canvas"), ("lex", "Canvas"), ("vec", "canvas"))
    assert got == [("lex", "canvas"), ("vec", "canvas")]  # one per (kind, text), case-folded


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


def test_bad_config_values_name_the_key():
    with pytest.raises(ConfigError, match="clean.meta_answer must be one of"):
        load_config("fake").replace(clean={"meta_answer": "maybe"})
    with pytest.raises(ConfigError, match=r"clean.sources must be some of"):
        load_config("fake").replace(clean={"sources": ["agent", "oracle"]})
    with pytest.raises(ConfigError, match="clean.lex_max_words must be >= 0"):
        load_config("fake").replace(clean={"lex_max_words": -1})
    # a rule that was measured, left off and removed: the message says so and where the figures are
    with pytest.raises(ConfigError, match=r"clean.snap_titles was removed: .*experiment/clean-opt-in-rules"):
        load_config("fake").replace(clean={"snap_titles": True})


def test_the_stage_cleans_a_batch_in_the_search_pipeline(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from tests.support.vault import write_vault

    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    rows = [{"id": "a", "query": "how do I link one note to another", "short_query": "how can I link one note to another",
             "expected_answer": "The documentation should explain how to link notes"},
            {"id": "bad", "query": ""}]
    out = Searcher(db, "t", fake_cfg, fake_runner).search(rows, SearchOptions(n=3))
    vs = [(v["kind"], v["text"]) for v in out.variants.to_pylist() if v["qid"] == "a"]
    assert ("lex", "link one note another") in vs  # the long short_query, trimmed to its distinctive terms
    assert ("hyde", "How to link notes") in vs  # the documentation frame stripped
    assert [v["vid"] for v in out.variants.to_pylist() if v["qid"] == "a"] == list(range(len(vs)))
    assert out.results.num_rows > 0 and out.errors.num_rows == 1
    stages = out.stats["stages"]
    clean = next(v for k, v in stages.items() if "CleanFields" in k)
    assert clean["long_lex"] == 1 and clean["meta_answer"] == 1
    off = Searcher(db, "t", fake_cfg.replace(clean={"enabled": False}), fake_runner).search(rows[:1],
                                                                                         SearchOptions(n=3))
    assert ("lex", "how can I link one note to another") in [(v["kind"], v["text"])
                                                            for v in off.variants.to_pylist()]


def test_the_local_expanders_lines_and_qmd_searches_are_cleaned_too(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault
    from fanout.pipelines.search import Searcher, SearchOptions

    from tests.support.vault import write_vault

    db = tmp_path / "db"
    index_vault(write_vault(tmp_path / "vault"), db, "t", fake_cfg, fake_runner)
    cfg = fake_cfg.replace(probe={"enabled": False})
    searcher = Searcher(db, "t", cfg, fake_runner)
    # the fake expander writes "The notes explain <query>." as its hyde line: a documentation frame
    for expect_source in ("model", "cache"):  # generated, then read back from the expansions cache
        out = searcher.search([{"id": "e", "query": "how do I make internal links"}], SearchOptions(expand=True))
        vs = [(v["kind"], v["text"], v["source"]) for v in out.variants.to_pylist()]
        assert ("hyde", "How do I make internal links.", expect_source) in vs
    rows = [{"id": "s", "query": "old links", "searches": [{"type": "lex", "query": "wikilinks, daily notes"},
                                                           {"type": "hyde", "query": "How are links made?"}]},
            {"id": "o", "query": "old links", "queries": ["how do I make links between two notes in my vault"]}]
    out = searcher.search(rows, SearchOptions())
    got = {(v["qid"], v["kind"], v["text"]) for v in out.variants.to_pylist()}
    assert {("s", "lex", "wikilinks, daily notes"), ("s", "hyde", "How are links made?")} <= got
    # OHS's rephrasing is searched as a question (vec) and as full text, trimmed to its distinctive terms
    assert {("o", "vec", "how do I make links between two notes in my vault"),
            ("o", "lex", "links between two notes")} <= got
