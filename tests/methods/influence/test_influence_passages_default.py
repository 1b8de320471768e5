"""Passages from Python on the default model: of three retrieved passages, the one holding the
fact the response copies has the most influence (Def. 3.1-3.2 with S = the passage)."""

from __future__ import annotations

import pytest

import ctxleak

pytestmark = pytest.mark.integration


def test_the_passage_holding_the_copied_fact_ranks_first(default_lm, tmp_path):
    data = [{"id": "bank", "query": "What is Zorvath Quillby's account number?",
             "passages": ["The museum opens at nine in the morning and closes at five.",
                          "Zorvath Quillby's bank account number is 88-4412-9071.",
                          "The weather in spring is mild and often rainy."]}]
    res = ctxleak.influence(default_lm, data, max_new_tokens=12, min_new_tokens=4,
                            temperature=0.3, progress=False, output=str(tmp_path / "run"))
    record = res.records[0]
    assert "Quillby" in record["response"]  # the response copies from passage 2
    assert record["max_passage"] == 2  # numbered from 1
    frame = res.passages()
    assert frame.loc[frame["rank"] == 1, "passage"].item() == 2
    assert frame["influence"].min() >= 0
    # one example: no control, and the verdict says so
    assert "no other example's context" in res.summary["verdict"]["text"]
