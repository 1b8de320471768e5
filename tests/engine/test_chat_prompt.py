"""An app's messages tokenised whole (Def. 3.1 of "Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models" with S = one retrieved document, on the prompt the app
sent): on a tokenizer whose merges cross the edges of the documents, the ids are the whole text's,
every character of the context is in the context's tokens, leaving a document out leaves none of
its characters, and the prompt without documents is the text without them tokenised whole."""

from __future__ import annotations

import pytest
from helpers.tiny_bpe import as_model, bpe_tokenizer

from ctxleak.engine.chat_prompt import as_template, render_messages, whole_prompt
from ctxleak.methods.rag.app_prompt import trace_messages

CHAT = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")
DOCS = ["the capital is paris.", "berlin is big.", "rome is old."]
MESSAGES = (("system", "be brief {{ok}}."), ("user", "docs:\n{context}\n\nquestion: {query}"))


@pytest.fixture(scope="module")
def merging():
    """A byte-pair tokenizer with no pre-tokenizer, trained here on text like the prompt's: its
    merges run across spaces, line breaks and the documents' edges ("s.\n\n")."""
    corpus = ["docs:\n" + "\n\n".join(DOCS[j:] + DOCS[:j]) + "\n\nquestion: where is it?"
              for j in range(3)]
    return as_model(bpe_tokenizer(corpus, CHAT))


def _offsets(lm, text):
    enc = lm.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def test_whole_ids_and_no_character_of_a_document_left_when_it_is_left_out(merging):
    rendered = render_messages(merging, MESSAGES)
    pieces = [DOCS[0]] + ["\n\n" + d for d in DOCS[1:]]
    query = "where is it?"
    whole = whole_prompt(merging, rendered, pieces, query, [0, 2, 2])
    head, tail = rendered.split("\u2063CTXLEAK_CONTEXT\u2063")
    tail = tail.replace("\u2063CTXLEAK_QUERY\u2063", query)
    text = head + "".join(pieces) + tail
    ids, offsets = _offsets(merging, text)
    assert [*whole.before, *whole.context, *whole.after] == ids
    assert list(whole.empty) == _offsets(merging, head + tail)[0]
    t0 = len(whole.before)
    c0, c1 = len(head), len(head) + len("".join(pieces))
    covered = offsets[t0:t0 + len(whole.context)]
    assert covered[0][0] <= c0 and covered[-1][1] >= c1  # the context's tokens hold it all
    # the tokenizer merges across the edges ("old.\n\n", "g.\n\n"): a token holds the last
    # document's end and the template's line break, another a document's end and the separator
    assert any(s < c1 < e for s, e in offsets)
    end_1 = c0 + len(pieces[0]) + len(pieces[1])
    assert any(s < end_1 < e for s, e in offsets)
    start = c0
    for j, (a, b) in enumerate(whole.pieces):
        doc_start = start + len(pieces[j]) - len(DOCS[j])
        doc_end = start + len(pieces[j])
        left = [offsets[t0 + i] for i in range(len(whole.context)) if not a <= i < b]
        left += offsets[:t0] + offsets[t0 + len(whole.context):]
        assert not [o for o in left if o[0] < doc_end and o[1] > doc_start], j
        start += len(pieces[j])


def test_the_template_text_keeps_literal_braces_and_marks_the_slots(merging):
    template = as_template(render_messages(merging, MESSAGES))
    assert template == ("<system>be brief {{ok}}.</s><user>docs:\n{context}\n\nquestion: "
                        "{query}</s><assistant>")
    assert template.format(context="C", query="Q") == \
        "<system>be brief {ok}.</s><user>docs:\nC\n\nquestion: Q</s><assistant>"


def test_documents_between_the_apps_own_separators_become_the_context():
    sent = [{"role": "system", "content": "use {the} sources"},
            {"role": "user", "content": "sources:\n[1] " + DOCS[0] + "\n[2] " + DOCS[1]
             + "\nask: where is it?"}]
    messages, pieces = trace_messages(sent, DOCS[:2], "where is it?", ["a", "b"],
                                      {"trace": "t", "file": "f", "line": 1})
    assert messages == (("system", "use {{the}} sources"),
                        ("user", "sources:\n[1] {context}\nask: {query}"))
    assert pieces == [DOCS[0], "\n[2] " + DOCS[1]]
    # with the trace's own text filled back in, the message is the one sent
    assert messages[1][1].format(context="".join(pieces), query="where is it?") == \
        sent[1]["content"]
