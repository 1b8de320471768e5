"""The one prompt module: ctxleak's template holding a list of documents gives the very parts
the influence run builds for the same example (each passage tokenised on its own, the list's
separator at the front of all but the first), the prompt without retrieval is the template
with an empty slot, the window cuts the context from its end, and the app's messages joined
by a blank line are the prompt of a model without a chat template."""

from __future__ import annotations

import pytest

from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
from ctxleak.mitigations.prompts import (
    LIST_SEPARATOR,
    TASK_TEMPLATES,
    document_parts,
    list_pieces,
    messages_ids,
    template_prompt,
)

TEXTS = ["the capital is paris .", "rome is in italy ."]
QUERY = "what is the capital ?"


def test_document_parts_are_the_influence_runs_parts(tiny_lm):
    pieces = list_pieces(TEXTS)
    assert pieces == [TEXTS[0], LIST_SEPARATOR + TEXTS[1]]
    example = InfluenceExample(id=1, context="".join(pieces), query=QUERY, reference=None,
                               task="qa", passages=tuple(pieces))
    for context_tokens in (None, 3):
        ours = document_parts(tiny_lm, TEXTS, QUERY, context_tokens=context_tokens, reserve=4)
        assert ours == prompt_parts(tiny_lm, example, context_tokens=context_tokens, reserve=4)
    by_hand = tiny_lm.encode(TEXTS[0]) + tiny_lm.encode(LIST_SEPARATOR + TEXTS[1])
    assert list(document_parts(tiny_lm, TEXTS, QUERY)[0].context) == by_hand


def test_no_documents_is_the_empty_slot(tiny_lm):
    empty = InfluenceExample(id=1, context="", query=QUERY, reference=None, task="qa")
    prompt = template_prompt(tiny_lm, QUERY)
    assert prompt([]) == prompt_parts(tiny_lm, empty)[0].full
    assert prompt(TEXTS) == document_parts(tiny_lm, TEXTS, QUERY)[0].full
    assert TASK_TEMPLATES["qa"] == "Document: {context}. {query}"


def test_the_window_cuts_the_context_from_its_end(tiny_lm, monkeypatch):
    whole, _ = document_parts(tiny_lm, TEXTS, QUERY)
    monkeypatch.setattr(type(tiny_lm), "max_length", property(lambda self: len(whole.full)))
    cut, dropped = document_parts(tiny_lm, TEXTS, QUERY, reserve=3)
    assert dropped == 3 and cut.context == whole.context[:-3]
    assert (cut.before, cut.after) == (whole.before, whole.after)


def test_messages_without_a_chat_template_are_joined_by_a_blank_line(tiny_lm, monkeypatch):
    messages = (("system", "be brief ."), ("user", "docs : {context} question : {query}"))
    monkeypatch.setattr(tiny_lm, "use_chat_template", False)
    ids = messages_ids(tiny_lm, messages, QUERY, TEXTS[0])
    text = f"be brief .\n\ndocs : {TEXTS[0]} question : {QUERY}\n"
    assert tiny_lm.decode(ids) == tiny_lm.decode(tiny_lm.encode(text))


def test_parts_as_a_requests_prompt_give_each_prompt_once_and_refuse_other_texts(tiny_lm):
    parts, _ = document_parts(tiny_lm, TEXTS, QUERY, reserve=4)
    prompt = parts.prompt_of(TEXTS)
    assert prompt(TEXTS) == parts.full == template_prompt(tiny_lm, QUERY, reserve=4)(TEXTS)
    assert prompt([]) == parts.empty == template_prompt(tiny_lm, QUERY, reserve=4)([])
    assert prompt(tuple(TEXTS)) == parts.full
    for other in (TEXTS[:1], TEXTS[::-1], [*TEXTS, "more"]):
        with pytest.raises(ValueError, match="its request's documents or none"):
            prompt(other)
