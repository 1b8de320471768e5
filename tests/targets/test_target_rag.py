"""The RAG app an audit builds itself: BM25 computed by hand and equal to the bundled retriever
over the Northwind corpus, documents left out of the index never retrieved, the prompt's slots
checked, and CID answers on a tiny model that depend on the question's own seed only (not on
the batch) and, at λ = 0, not on the documents at all."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from importlib import resources

import pytest
from helpers.cid_ledgers import cid_ledgers
from helpers.exits import exit_restored, exits_trapped
from helpers.tiny_bpe import tiny_bpe_llama

from ctxleak.errors import ConfigError
from ctxleak.mitigations.bm25 import BM25, words
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.targets.base import TargetError
from ctxleak.targets.model_answerer import ModelAnswerer, question_seed
from ctxleak.targets.rag import RAGApp, RAGPrompt, demo_corpus, demo_rag, load_messages

DEMO = resources.files("ctxleak") / "data" / "demo" / "rag_audit"
DOCS = ["the capital of france is paris .", "the capital of italy is rome .",
        "berlin is a city in germany .", "madrid is the capital of spain ."]


class Echo:
    """An answerer that answers with its prompt's context and records every prompt."""

    def __init__(self) -> None:
        self.seen: list[RAGPrompt] = []

    def answer(self, prompts):
        self.seen += prompts
        return [p.context for p in prompts]

    def describe(self):
        return "echo"

    def fingerprint(self):
        return "echo"


def test_bm25_score_by_hand():
    index = BM25((("a", "paris paris france"), ("b", "rome italy"), ("c", "paris news")))
    # "paris" is in 2 of 3 documents: idf = ln(1 + 1.5/2.5); lengths 3, 2, 2, mean 7/3
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    tf_a = 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 3 / (7 / 3)))
    tf_c = 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 2 / (7 / 3)))
    got = index.scores("Where is Paris?")
    assert got == pytest.approx([idf * tf_a, 0.0, idf * tf_c], rel=1e-12)
    assert [i for i, _ in index.search("paris", 3)] == [0, 2, 1]
    assert words("What is the Capital?") == ["capital"]


def test_bm25_ties_go_by_document_id():
    index = BM25((("z", "rome"), ("m", "rome"), ("a", "paris")))
    assert [index.documents[i][0] for i, _ in index.search("rome", 3)] == ["m", "z", "a"]


def _bundled_retriever():
    spec = importlib.util.spec_from_file_location("bundled_retriever",
                                                  str(DEMO / "retriever.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.retriever


def test_demo_app_retrieves_what_the_bundled_retriever_does():
    bundled = _bundled_retriever()
    app = demo_rag(Echo())
    queries = [json.loads(line)["query"] for line in (DEMO / "queries.jsonl").read_text().splitlines()
               if line.strip()]
    assert len(queries) >= 30
    for query in queries:
        want = [d["id"] for d in bundled(query)]
        assert [d.id for d in app.retrieve(query)] == want, query


def test_answers_carry_the_retrieved_documents_and_left_out_ones_are_never_retrieved():
    corpus = demo_corpus()
    held = corpus[0]
    app = demo_rag(Echo(), leave_out=[held.id])
    assert held.id not in {d.id for d in app.documents} and len(app.documents) == len(corpus) - 1
    # the held-out document's own first words as the question: still never retrieved
    [got] = app.answer([held.text[:80]])
    assert held.id not in got.document_ids and len(got.document_ids) == 3
    assert got.text == "\n\n".join(got.documents)
    full = demo_rag(Echo())
    assert full.answer([held.text[:80]])[0].document_ids[0] == held.id
    assert app.fingerprint() != full.fingerprint()
    assert full.fingerprint() == demo_rag(Echo()).fingerprint()


def test_the_prompt_is_filled_in_order():
    echo = Echo()
    app = RAGApp(DOCS, answerer=echo, top_k=2,
                 prompt=[{"role": "user", "content": "docs: {context} q: {query}"}])
    app.answer(["capital of italy"])
    [prompt] = echo.seen
    assert [d.id for d in prompt.documents] == ["1", "0"]
    assert prompt.filled() == [{"role": "user", "content": "docs: " + DOCS[1] + "\n\n" + DOCS[0]
                                + " q: capital of italy"}]


@pytest.mark.parametrize("bad, words_", [
    ([{"role": "user", "content": "{query}"}], "{context}"),
    ([{"role": "user", "content": "{context} {question}"}], "no other slot"),
    ([{"role": "user", "content": "{context} {query} {query}"}], "once each"),
    ([{"role": "user"}], "'role' and 'content'"),
])
def test_a_bad_prompt_is_one_config_error(bad, words_):
    with pytest.raises(ConfigError, match="prompt") as err:
        load_messages(bad)
    assert words_ in str(err.value) and err.value.param == "prompt"


def test_bad_documents_and_settings():
    with pytest.raises(ConfigError, match=r"ids \['a'\] occur more than once"):
        RAGApp([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}], answerer=Echo())
    with pytest.raises(ConfigError, match="at least one document"):
        RAGApp([], answerer=Echo())
    with pytest.raises(ConfigError, match="top_k"):
        RAGApp(DOCS, answerer=Echo(), top_k=0)
    with pytest.raises(ConfigError, match=r"documents\[1\]"):
        RAGApp(["x", 3], answerer=Echo())
    with pytest.raises(ConfigError, match="not ids of the demo corpus"):
        demo_rag(Echo(), leave_out=["nope"])


def test_a_retriever_of_ones_own():
    app = RAGApp(DOCS, answerer=Echo(), top_k=1,
                 retriever=lambda q: [{"id": "x", "text": q.upper()}, {"id": "y", "text": "."}])
    [got] = app.answer(["paris"])
    assert got.document_ids == ("x",) and got.documents == ("PARIS",)
    broken = RAGApp(DOCS, answerer=Echo(), retriever=lambda q: 1 / 0)
    with pytest.raises(ConfigError, match="retriever raised ZeroDivisionError"):
        broken.answer(["q"])


def test_model_answers_are_cid_of_their_own_seed_whatever_the_batch(llama_lm):
    cid = CIDConfig(max_new_tokens=6, min_new_tokens=2)
    answerer = ModelAnswerer(llama_lm, cid, seed=5, batch_size=2)
    app = RAGApp(DOCS, answerer=answerer, top_k=2)
    questions = ["capital of france", "capital of italy", "city in germany"]
    together = [a.text for a in app.answer(questions)]
    alone = [app.answer([q])[0].text for q in reversed(questions)][::-1]
    assert together == alone
    # recomputed by hand: the same prompt ids and the question's seed through CID
    prompt = RAGPrompt(questions[1], app.retrieve(questions[1]), app.messages)
    full, empty = answerer.prompt_ids(prompt)
    [ledger] = cid_ledgers(llama_lm, [(full, empty, cid, question_seed(5, questions[1]))])
    assert together[1] == llama_lm.decode(ledger.response_ids)
    assert len(empty) < len(full) and llama_lm.decode(full).count("rome") == 1
    assert "rome" not in llama_lm.decode(empty)
    assert app.model is llama_lm and "tiny-llama" in app.influence_note()
    assert RAGApp(DOCS, answerer=Echo()).influence_note() is None


def test_at_lambda_zero_the_answer_does_not_depend_on_the_documents(gpt2_lm):
    answerer = ModelAnswerer(gpt2_lm, CIDConfig(lam=0.0, max_new_tokens=6, min_new_tokens=2), seed=1)
    one = RAGApp(DOCS[:2], answerer=answerer, top_k=2).answer(["what is the capital ?"])
    two = RAGApp(DOCS[2:], answerer=answerer, top_k=2).answer(["what is the capital ?"])
    assert one[0].text == two[0].text and one[0].document_ids != two[0].document_ids


def test_a_chat_model_gets_the_app_messages_through_its_template():
    chat = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")
    lm = tiny_bpe_llama(["<system>be brief.</s><user>docs: the capital is paris. question: "
                         "where is it?</s><assistant>"], chat)
    lm.use_chat_template = True
    answerer = ModelAnswerer(lm, CIDConfig(max_new_tokens=3, min_new_tokens=0), greedy=True)
    prompt = RAGPrompt("where is it?", (), (("system", "be brief."),
                                            ("user", "docs: {context} question: {query}")))
    prompt = RAGPrompt(prompt.query, RAGApp(["the capital is paris."], answerer=answerer,
                                            top_k=1).retrieve("capital"), prompt.messages)
    full, empty = answerer.prompt_ids(prompt)
    def text_of(ids):
        return "".join(lm.tokenizer.convert_ids_to_tokens(ids))

    text = text_of(full)
    assert text.startswith("<system>be brief.</s><user>docs: the capital is paris. question: ")
    assert text.endswith("where is it?</s><assistant>")
    assert text_of(empty) == text.replace("the capital is paris.", "")
    assert isinstance(answerer.answer([prompt])[0], str)
    assert "greedy" in answerer.describe() and answerer.fingerprint().startswith("mechanism:")
    sampled = ModelAnswerer(lm, CIDConfig(max_new_tokens=3, min_new_tokens=0))
    assert "greedy" not in sampled.describe()
    assert sampled.fingerprint() != answerer.fingerprint()  # a resume tells them apart


class FirstTokens:
    """A test-only mechanism: answers with the first two ids of the prompt holding only its
    first document, and claims ε = 1 per document; records its requests."""

    name = "first-tokens"
    min_documents = 2

    def __init__(self):
        self.requests = []

    def key(self):
        return "first-tokens()"

    def describe(self):
        return "the mechanism first-tokens()"

    def claim(self, decoding):
        from ctxleak.mitigations.mechanisms import Claim

        return Claim(1.0, relation="document")

    def answer(self, lm, requests, decoding):
        from ctxleak.mitigations.mechanisms import Claim, MechanismAnswer

        self.requests += requests
        return [MechanismAnswer(tuple(r.prompt(r.documents[:1])[-2:]), False,
                                Claim(1.0, relation="document"), 0) for r in requests]


def test_a_mechanism_answers_over_the_retrieved_documents(gpt2_lm):
    from ctxleak.targets.mechanism_answerer import MechanismAnswerer

    mechanism = FirstTokens()
    answerer = MechanismAnswerer(gpt2_lm, mechanism, seed=3)
    app = RAGApp(DOCS, answerer=answerer, top_k=2)
    [got] = app.answer(["capital of italy"])
    [request] = mechanism.requests
    assert request.ids == got.document_ids == ("1", "0")
    assert request.documents == got.documents and request.query == "capital of italy"
    assert request.seed == question_seed(3, "capital of italy")
    prompt = RAGPrompt("capital of italy", app.retrieve("capital of italy"), app.messages)
    full, empty = ModelAnswerer(gpt2_lm).prompt_ids(prompt)
    assert request.prompt(list(request.documents)) == full and request.prompt([]) == empty
    assert got.text == gpt2_lm.decode(request.prompt(request.documents[:1])[-2:])
    assert [c.eps for c in answerer.claims] == [1.0]
    with pytest.raises(ConfigError, match="at least 2 documents per question") as err:
        RAGApp(DOCS, answerer=answerer, top_k=1).answer(["capital"])
    assert err.value.param == "top_k"


def test_the_cost_of_an_app_ctxleak_answers_is_counted_by_its_model(gpt2_lm):
    """A RAG app whose model ctxleak holds: the estimate counts each filled prompt with that
    model's tokenizer (recomputed here), not characters / 4."""
    from ctxleak.targets.endpoint import ChatEndpointTarget
    from ctxleak.targets.journal import cost_line

    app = RAGApp(DOCS, answerer=ModelAnswerer(gpt2_lm), top_k=2)
    questions = ["capital of italy", "capital of germany"]
    prompts = ["\n".join(m["content"] for m in RAGPrompt(q, app.retrieve(q), app.messages).filled())
               for q in questions]  # the filled prompt: the retrieved documents with the question
    tokens = sum(len(gpt2_lm.encode(p)) for p in prompts)
    line = cost_line(app, questions)
    assert f"2 queries, {tokens:,} prompt tokens in all (counted by the tokenizer)" in line
    # a chat endpoint: its system message with each question, characters / 4, and its bound
    chat = ChatEndpointTarget("http://127.0.0.1:9/v1", "m", system="Be brief.", max_tokens=8)
    assert "2 queries, 8 prompt tokens in all (estimated as characters / 4" in \
        cost_line(chat, ["abcd", "efgh"])  # ⌈len("Be brief.\nabcd") / 4⌉ = 4 each
    assert "at most 16 answer tokens" in cost_line(chat, ["abcd", "efgh"])
    # a question asked twice is sent once: counted once, as max_queries counts it
    assert "2 queries, 8 prompt tokens" in cost_line(chat, ["abcd", "efgh", "abcd"])


class _Echo:
    def answer(self, prompts):
        return [p.context for p in prompts]

    def describe(self):
        return "echo"

    def fingerprint(self):
        return "echo"


def test_a_retriever_that_exits_is_a_target_error():
    """os._exit and sys.exit in the retriever: a TargetError naming the retriever, and os._exit
    put back afterwards. In this process, under a trap (helpers/exits.py) that turns an exit
    the guard let through into a failure instead of the end of the test runner."""
    lines = []
    with exits_trapped():
        for how in ("os", "sys"):
            stop = (lambda q: os._exit(3)) if how == "os" else (lambda q: sys.exit(0))
            app = RAGApp(["a document"], answerer=_Echo(), retriever=stop, name="mine")
            with pytest.raises(TargetError) as caught:
                app.answer(["q"])
            lines.append(str(caught.value))
        restored = exit_restored()
    assert lines == ["the retriever of RAG app 'mine' called os._exit(3) (a target may not end "
                     "the audit's process) on 'q'",
                     "the retriever of RAG app 'mine' called sys.exit(0) (a target may not end "
                     "the audit's process) on 'q'"]
    assert restored

