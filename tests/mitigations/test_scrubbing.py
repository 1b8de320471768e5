"""PII scrubbing (Presidio's anonymizer over ctxleak's one detection layer, then plain decoding):
each operator on a document checked by hand, the types it may be limited to, the one-line
errors, and decoding: the prompt holds the scrubbed documents and the answer is the one plain
decoding (CID at λ = 1) draws from it, with no claim and no token paid."""

from __future__ import annotations

import pytest
from helpers.cid_ledgers import cid_ledgers

from ctxleak.errors import ConfigError
from ctxleak.methods.influence.data import load_examples
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding, Mechanism
from ctxleak.mitigations.scrubbing import OPERATORS, Scrubbing
from ctxleak.sensitive import find_sensitive
from ctxleak.sensitive.detect import Span

NOTE = "Reviewer: Ines Okafor, ines.okafor@example.com, phone (555) 010-4417."


def _fixed(text: str) -> list[Span]:
    """A detector that finds the note's name, e-mail and phone at offsets counted by hand."""
    assert text == NOTE
    return [Span("person", 10, 21, "Ines Okafor", 0.85),
            Span("email", 23, 46, "ines.okafor@example.com", 1.0),
            Span("phone", 54, 68, "(555) 010-4417", 0.5)]


def test_the_hand_counted_spans_are_the_values():
    assert [NOTE[s.start:s.end] for s in _fixed(NOTE)] == [s.text for s in _fixed(NOTE)]


@pytest.mark.parametrize("operator, expected", [
    ("replace", "Reviewer: <PERSON>, <EMAIL>, phone <PHONE>."),
    ("redact", "Reviewer: , , phone ."),
    ("mask", "Reviewer: ***********, ***********************, phone **************."),
])
def test_each_operator_on_a_document_checked_by_hand(operator, expected):
    assert Scrubbing(operator, detect=_fixed).scrub(NOTE) == expected


def test_entities_limit_the_types_scrubbed():
    scrub = Scrubbing("replace", entities="email+phone", detect=_fixed)
    assert scrub.entities == ("email", "phone")
    assert scrub.scrub(NOTE) == "Reviewer: Ines Okafor, <EMAIL>, phone <PHONE>."
    assert Scrubbing("mask", entities=["person"], detect=_fixed).scrub(NOTE) == \
        "Reviewer: ***********, ines.okafor@example.com, phone (555) 010-4417."
    assert scrub.key() == "scrub(operator=replace,entities=email+phone,detect=_fixed)"
    assert Scrubbing().key() == "scrub(operator=replace)"


def test_the_detection_layer_finds_what_is_scrubbed():
    """The default detector is ctxleak.sensitive's: on a note with a name, an e-mail address,
    a phone number, a door code and a password, each found value is replaced by its type."""
    text = ("Hi Tomas, the new door code is 4417 and the VPN password is Tr0ub4dor&3x. "
            "Please phone Ines Okafor on (555) 010-4417 or write to ines.okafor@example.com.")
    assert Scrubbing().scrub(text) == (
        "Hi <PERSON>, the new door code is <PIN> and the VPN password is <PASSWORD>. "
        "Please phone <PERSON> on <PHONE> or write to <EMAIL>.")
    assert Scrubbing().spans(text) == find_sensitive(text)


def test_a_text_without_personal_data_is_left_as_it_is():
    text = "Book flights through the travel desk at least fourteen days before you travel."
    assert Scrubbing("redact").scrub(text) == text


def test_a_detector_span_outside_the_text_is_ignored():
    def wild(text: str) -> list[Span]:
        return [Span("person", 0, 4, text[:4], 0.9), Span("person", 5, 999, "?", 0.9),
                Span("person", 3, 3, "", 0.9)]

    assert Scrubbing("replace", detect=wild).scrub("Ines writes") == "<PERSON> writes"


@pytest.mark.parametrize("operator", ["scramble", "hash", "Replace", ""])
def test_an_operator_scrubbing_does_not_take_is_one_line_naming_them(operator):
    with pytest.raises(ConfigError) as err:
        Scrubbing(operator)
    message = str(err.value)
    assert "\n" not in message and err.value.param == "operator"
    assert f"'{operator}'" in message and all(op in message for op in OPERATORS)


@pytest.mark.parametrize("entities", [("person", "passport"), "email+", ()])
def test_unknown_or_no_entity_types_are_refused(entities):
    with pytest.raises(ConfigError) as err:
        Scrubbing(entities=entities)
    assert err.value.param == "entities" and "\n" not in str(err.value)


def test_a_detector_that_is_not_a_function_is_refused():
    with pytest.raises(ConfigError) as err:
        Scrubbing(detect="presidio")  # type: ignore[arg-type]
    assert err.value.param == "detect"


def _request(lm, documents, seed, seen):
    def prompt(texts):
        seen.append(list(texts))
        body = " ".join(texts)
        return lm.encode(f"Documents: {body} Question: who reviews it? Answer:")

    return AnswerRequest(documents=tuple(documents), prompt=prompt, seed=seed)


def test_decoding_draws_from_the_prompt_with_the_scrubbed_documents(tiny_lm):
    scrub: Mechanism = Scrubbing("replace", detect=_fixed)
    decoding = Decoding(temperature=0.8, max_new_tokens=6, min_new_tokens=2)
    seen: list[list[str]] = []
    request = _request(tiny_lm, [NOTE, NOTE], seed=11, seen=seen)
    (answer,) = scrub.answer(tiny_lm, [request], decoding)
    scrubbed = "Reviewer: <PERSON>, <EMAIL>, phone <PHONE>."
    assert seen == [[scrubbed, scrubbed], []]  # the documents, scrubbed; the empty prompt
    config = CIDConfig(lam=1.0, temperature=0.8, max_new_tokens=6, min_new_tokens=2)
    (plain,) = cid_ledgers(tiny_lm, [(request.prompt([scrubbed, scrubbed]),
                                            request.prompt([]), config, 11)])
    assert list(answer.response_ids) == plain.response_ids
    assert answer.stopped_on_eos == plain.stopped_on_eos
    assert answer.claim.eps is None and answer.claim.relation == "none"
    assert answer.tokens_paid == 0 and answer.documents_used == (0, 1)
    assert [s["token_id"] for s in answer.steps] == [e.token_id for e in plain.entries]
    assert not any(s["paid"] for s in answer.steps)


def test_each_answer_depends_on_its_own_request_only(tiny_lm):
    scrub = Scrubbing("mask", detect=_fixed)
    decoding = Decoding(temperature=0.8, max_new_tokens=5, min_new_tokens=5)
    first, second = (_request(tiny_lm, [NOTE], seed=s, seen=[]) for s in (3, 4))
    together = scrub.answer(tiny_lm, [first, second], decoding)
    alone = scrub.answer(tiny_lm, [second], decoding)
    assert together[1].response_ids == alone[0].response_ids
    assert len(together[0].response_ids) == 5 and scrub.name == "scrub"
    assert Scrubbing.min_documents == 1


def test_on_demo_qa_large_contact_details_go_and_codes_stay():
    """Scrubbing the bundled set's gold documents with the detection layer: every answer that
    is a phone number, an e-mail or a street address is gone from its document, and answers
    that are no one's personal data (a firmware version, an error code, a batch, a server, a
    snapshot, a serial prefix) stay."""
    scrub = Scrubbing("replace")
    kept = {"4.2.7", "E24", "FC1-2208", "bwa-vault-03", "pre-cr3302-snap", "KTA9"}
    contact = ("phone number", "email address", "street address")
    checked = {"contact": 0, "kept": 0}
    for ex in load_examples("demo-qa-large"):
        ref = ex.reference or ""
        gold = next(d.text for d in ex.documents or () if ref in d.text)
        scrubbed = scrub.scrub(gold)
        if any(cue in ex.query for cue in contact):
            assert ref not in scrubbed, ex.id
            checked["contact"] += 1
        if ref in kept:
            assert ref in scrubbed, ex.id
            checked["kept"] += 1
    assert checked == {"contact": 10, "kept": len(kept)}
