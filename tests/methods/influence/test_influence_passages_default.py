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
    # T = 0.1: every seed tried (0 to 3) copies passage 2; at T = 0.3 one seed in four answers
    # from passage 1 first
    res = ctxleak.influence(default_lm, data, max_new_tokens=12, min_new_tokens=4,
                            temperature=0.1, progress=False, output=str(tmp_path / "run"))
    record = res.records[0]
    assert "Quillby" in record["response"]  # the response copies from passage 2
    assert record["max_passage"] == 2  # numbered from 1
    frame = res.passages()
    assert frame.loc[frame["rank"] == 1, "passage"].item() == 2
    assert frame["influence"].min() >= 0
    # one example: no control, and the verdict says so
    assert "no other example's context" in res.summary["verdict"]["text"]


SECRET = "Zorvath Quillby's bank account number is 88-4412-9071."
MUSEUM = "The museum opens at nine in the morning and closes at five."
MENU = "The canteen serves soup on Mondays and fish on Fridays."
UNUSED = "The parking garage has 240 spaces on three levels."
NAMES = {SECRET: "acct-7", MUSEUM: "museum", MENU: "canteen", UNUSED: "garage"}


def _docs(*texts: str) -> list[dict]:
    return [{"id": NAMES[t], "text": t, "metadata": {"source": f"wiki/{NAMES[t]}.md"}}
            for t in texts]


#: Logged turns of a RAG assistant: two answers copy the secret, one each the museum's hours and
#: the canteen's menu; the garage is retrieved every time and never used.
LOG = [
    {"id": "q1", "query": "What is Zorvath Quillby's account number?",
     "documents": _docs(SECRET, MUSEUM, UNUSED),
     "response": "Zorvath Quillby's account number is 88-4412-9071."},
    {"id": "q2", "query": "When does the museum open?", "documents": _docs(MUSEUM, SECRET, UNUSED),
     "response": "The museum opens at nine in the morning."},
    {"id": "q3", "query": "What does the canteen serve on Fridays?",
     "documents": _docs(MENU, UNUSED, SECRET), "response": "The canteen serves fish on Fridays."},
    {"id": "q4", "query": "Which account number did Zorvath Quillby give?",
     "documents": _docs(SECRET, MENU, UNUSED),
     "response": "He gave 88-4412-9071 as his bank account number."},
]


def test_the_ledger_ranks_the_planted_secret_first_and_the_unused_document_last(default_lm,
                                                                                 tmp_path):
    # the ledger's order and sums read no control run
    res = ctxleak.influence(default_lm, LOG, temperature=1.0, control=False, progress=False,
                            output=str(tmp_path / "run"))
    ledger = res.summary["settings"][0]["documents"]
    assert [d["document"] for d in ledger][0] == "acct-7"
    assert [d["document"] for d in ledger][-1] == "garage"
    assert ledger[0]["source"] == "wiki/acct-7.md"
    assert ledger[0]["retrieved"] == ledger[-1]["retrieved"] == 4
    # the secret's two copying answers alone outweigh everything the garage did in four
    assert ledger[0]["influence_max"] > 4 * ledger[-1]["influence_sum"]
    assert {q["id"] for q in ledger[0]["top_queries"][:2]} == {"q1", "q4"}
