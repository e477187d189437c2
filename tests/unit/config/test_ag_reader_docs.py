"""The all-gather reader table and the memory cases are said once (simharness.ag_readers)
and the pages that state them say the same words."""

from __future__ import annotations

from support.paths import ROOT

from simharness.ag_readers import memory_case, reader_table_markdown

PAGE = ROOT / "docs" / "all-gather-option.md"


def test_the_page_holds_the_reader_table_of_ag_readers():
    assert reader_table_markdown() in PAGE.read_text()


def test_the_page_states_every_memory_case_in_ag_readers_words():
    text = PAGE.read_text()
    for launch, read in (("lazy", True), ("lazy", False), ("lazy", None), ("eager", False)):
        assert memory_case(launch, read) in text


def test_no_page_puts_the_distributed_optimizers_all_gather_on_the_ag_group():
    wrong = ("The distributed optimizer reduce-scatters gradients over the data-parallel group",
             "same communicator as the reduce-scatter: they serialise",
             "own communicator: overlaps the reduce-scatter",
             "`--kind megatron` runs the distributed optimizer's data path")
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for words in wrong:
            assert words not in text, (page.name, words)
