"""The first screen of a report holds a table: the verdict's first sentence, the rows a reader
acts on, then the rest of the verdict's paragraph (issue 85)."""

from __future__ import annotations

import re

from ctxleak.report import Report

TEXT = ("2 documents leaked beyond their control (Def. 3.2): hr-7 and ops-1. The control is "
        "the nearest other document. A bound of 0 nats is not shown.")


def verdict_section(page: str) -> str:
    return re.search(r'<section class="verdict".*?</section>', page, re.S).group(0)


def test_the_table_sits_between_the_first_sentence_and_the_rest():
    report = Report("t")
    report.set_verdict(TEXT, "the rule", [{"document": "hr-7", "leaked in (answers)": 3},
                                          {"document": "ops-1", "leaked in (answers)": 1}],
                       "The 2 most leaked")
    box = verdict_section(report.render())
    first = box.index("2 documents leaked beyond their control (Def. 3.2): hr-7 and ops-1.")
    table = box.index("<table")
    rest = box.index("The control is the nearest other document.")
    assert first < table < rest < box.index("the rule")
    assert "The control is" not in box[:table]  # one sentence above the table, not the paragraph
    assert box.count("<tr>") == 3  # header and two rows


def test_without_a_table_the_verdict_is_one_paragraph():
    report = Report("t")
    report.set_verdict(TEXT, "the rule")
    box = verdict_section(report.render())
    assert "<table" not in box and "verdict-more" not in box
    assert "hr-7 and ops-1. The control is the nearest" in box
