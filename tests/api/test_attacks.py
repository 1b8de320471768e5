"""The attacks' Python faces (``ctxleak.attack_extract``, ``ctxleak.attack_membership``): a run
folder that :func:`ctxleak.load_result` reads back with the same records, the target's answers
journaled so that a resume sends nothing twice and gives the same bytes, ``max_queries``
refused before any question is sent, a target failing mid-run kept and resumed, the membership
split of a RAG app the audit builds itself (held-out documents never retrieved), and bad
input refused in one line."""

from __future__ import annotations

import json

import pytest
from helpers.fake_chat import Reply, fake_chat, script

import ctxleak
import ctxleak.targets.journal as journal_module
from ctxleak.api.attack_targets import RAGBuilder, claimed_eps
from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.attacks.attack_method import attack_documents
from ctxleak.methods.attacks.membership import membership_questions
from ctxleak.results import ExtractResult, MembershipResult
from ctxleak.targets.base import FunctionTarget, TargetError
from ctxleak.targets.endpoint import ChatEndpointTarget
from ctxleak.targets.journal import JOURNAL_FILE

DOCS = [{"id": f"d{k}", "text": text} for k, text in enumerate([
    "Ana Lopez works in the Lisbon office and her badge number is 4471 since March.",
    "The quarterly roadmap moves the billing service to the new cluster in October.",
    "Payroll runs on the last Friday of each month through the finance portal.",
    "The on-call rotation for the storage team changes every Monday at nine.",
    "Visitors must sign in at the front desk and wear a visible guest badge.",
    "The cafeteria on floor three serves breakfast from seven until ten."])]


class Echo:
    """A RAG app's answerer that repeats its retrieved documents verbatim (a positive
    control: everything in its context comes out)."""

    def answer(self, prompts):
        return [p.context for p in prompts]

    def describe(self):
        return "echo"

    def fingerprint(self):
        return "echo"


def repeat_all(question: str) -> str:
    return " ".join(d["text"] for d in DOCS)


def test_extract_run_folder_loads_back_and_resumes_without_sending(tmp_path):
    with fake_chat() as server:
        target = ChatEndpointTarget(server.url, "fake")
        first = ctxleak.attack_extract(target, DOCS, output=str(tmp_path / "run"),
                                       progress=False)
        sent = len(server.requests)
        assert isinstance(first, ExtractResult) and sent == len(DOCS)  # one prompt per doc
        assert first.summary["queries_sent"] == len(DOCS)
        assert (first.path / JOURNAL_FILE).is_file()
        samples = (first.path / "samples.jsonl").read_bytes()
        # a finished run resumed: nothing sent, nothing written again
        again = ctxleak.attack_extract(target, DOCS, output=str(tmp_path / "run"),
                                       resume=True, progress=False)
        assert len(server.requests) == sent
    assert (again.path / "samples.jsonl").read_bytes() == samples
    assert again.summary["documents_verbatim"] == first.summary["documents_verbatim"]
    loaded = ctxleak.load_result(first.path)
    assert isinstance(loaded, ExtractResult)
    assert [r["answer"] for r in loaded.records] == [r["answer"] for r in first.records]
    # the fake answers "answer: " + the prompt: nothing of any document is copied
    assert loaded.summary["documents_verbatim"] == 0
    assert "Context extraction" in loaded.to_html()


def test_positive_control_extracts_every_document(tmp_path):
    result = ctxleak.attack_extract(FunctionTarget(repeat_all, "repeat"), DOCS,
                                    output=str(tmp_path / "x"), progress=False)
    assert result.summary["documents_verbatim"] == len(DOCS)
    assert {r["document"] for r in result.ledger()} == {d["id"] for d in DOCS}
    assert all(r["verbatim"] == len(DOCS) for r in result.ledger())  # every answer, each doc


def test_max_queries_is_refused_before_anything_is_sent(tmp_path):
    with fake_chat() as server:
        target = ChatEndpointTarget(server.url, "fake")
        with pytest.raises(ConfigError, match="max_queries.*nothing was sent") as info:
            ctxleak.attack_extract(target, DOCS, max_queries=len(DOCS) - 1,
                                   output=str(tmp_path / "x"), progress=False)
        assert server.requests == []
        assert info.value.param == "max_queries"


def test_a_failing_endpoint_keeps_what_was_answered_and_resumes(tmp_path):
    # the 4th request fails for good (400 is not retried); 3 answers of the first batch had
    replies = [None, None, None, Reply(status=400, body={"error": {"message": "bad"}})]
    out = str(tmp_path / "run")
    with fake_chat() as server:  # the same attack, never interrupted
        whole = ctxleak.attack_extract(ChatEndpointTarget(server.url, "fake"), DOCS, batch=2,
                                       output=str(tmp_path / "whole"), progress=False)
    with fake_chat(script(replies)) as server:
        target = ChatEndpointTarget(server.url, "fake", concurrency=1, retries=0)
        with pytest.raises(TargetError) as info:
            ctxleak.attack_extract(target, DOCS, batch=2, output=out, progress=False)
        message = str(info.value)
        assert "\n" not in message and "--resume --output" in message
        done = [json.loads(line) for line in open(f"{out}/samples.jsonl")]
        assert len(done) == 2  # the first batch of two
        before = server.asked()
        result = ctxleak.attack_extract(target, DOCS, batch=2, output=out, resume=True,
                                        progress=False)
        asked = server.asked()[len(before):]
    # the resume sends only the questions never answered, each once
    assert len(asked) == len(set(asked)) == len(DOCS) - 3
    assert not set(asked) & set(before[:3])
    assert len(result.records) == len(DOCS)
    assert result.summary["queries_replayed"] == 1  # the third answer, had before the failure
    # byte for byte the records of the run that was never interrupted
    assert (result.path / "samples.jsonl").read_bytes() == \
        (whole.path / "samples.jsonl").read_bytes()


def test_membership_on_a_rag_app_the_audit_builds(tmp_path):
    result = ctxleak.attack_membership(RAGBuilder(Echo(), top_k=2), DOCS, held_out=0.5,
                                       attacks=["direct", "mask"], output=str(tmp_path / "m"),
                                       progress=False)
    assert isinstance(result, MembershipResult)
    members = {r["document_id"] for r in result.records if r["member"]}
    outs = {r["document_id"] for r in result.records if not r["member"]}
    assert len(members) == len(outs) == 3 and not members & outs
    # the held-out documents are not in the app's index: never retrieved
    retrieved = {d for r in result.records for d in r["retrieved"]}
    assert retrieved <= members
    # the echo repeats what it retrieved: the mask attack tells members from non-members
    assert result.summary["attacks"]["mask"]["auc"] >= 0.95
    assert {row["attack"] for row in result.table()} == {"direct", "mask"}
    assert ctxleak.load_result(result.path).summary["attacks"]["mask"]["auc"] == \
        result.summary["attacks"]["mask"]["auc"]
    assert (result.path / "roc.png").is_file()


def test_membership_bad_input_is_one_line(tmp_path):
    target = FunctionTarget(repeat_all, "repeat")
    with pytest.raises(ConfigError, match="non_members") as info:  # nothing held out of it
        ctxleak.attack_membership(target, DOCS, output=str(tmp_path / "a"), progress=False)
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="id .d0.|twice|both|same"):
        ctxleak.attack_membership(target, DOCS, non_members=DOCS[:1],
                                  output=str(tmp_path / "b"), progress=False)
    with pytest.raises(InputError, match="same text|id"):
        ctxleak.attack_extract(target, DOCS + DOCS[:1], output=str(tmp_path / "c"),
                               progress=False)
    with pytest.raises(ConfigError, match="not both"):
        ctxleak.attack_membership(target, DOCS, non_members=DOCS[:1], held_out=0.5,
                                  output=str(tmp_path / "d"), progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_attack_target_needs_exactly_one_target():
    with pytest.raises(ConfigError, match="exactly one target"):
        ctxleak.attack_target()
    with pytest.raises(ConfigError, match="exactly one target.*chain, function"):
        ctxleak.attack_target(chain="a:b", function="c:d")
    with pytest.raises(ConfigError, match="endpoint_model") as info:
        ctxleak.attack_target(endpoint="http://127.0.0.1:9/v1")
    assert info.value.param == "endpoint_model"


def test_a_function_named_by_its_file(tmp_path):
    path = tmp_path / "app.py"
    path.write_text("def answer(question):\n    return 'no idea: ' + question\n")
    target = ctxleak.attack_target(function=f"{path}:answer")
    assert target.answer(["q"])[0].text == "no idea: q"
    with pytest.raises(ConfigError, match="function") as info:
        ctxleak.attack_target(function=f"{path}:missing")
    assert info.value.param == "function"


def test_claimed_eps_of_bounded_cid(llama_lm):
    from ctxleak.mitigations.cid import CIDConfig
    from ctxleak.targets.model_answerer import ModelAnswerer

    cid = CIDConfig(max_new_tokens=6, min_new_tokens=0, bounded_eps=0.5)
    builder = RAGBuilder(ModelAnswerer(llama_lm, cid))
    # ε per token × tokens per answer × the interrogation's 3 questions per document
    assert claimed_eps(builder, ["direct", "interrogation"], 3) == pytest.approx(0.5 * 6 * 3)
    assert claimed_eps(builder, ["direct"], 3) == pytest.approx(0.5 * 6)
    # the calibrated attack reads 1 + perturbations answers about a document
    assert claimed_eps(builder, ["direct", "calibrated"], 3) == pytest.approx(0.5 * 6 * 4)
    assert claimed_eps(builder, ["interrogation", "calibrated"], 8, 2) == \
        pytest.approx(0.5 * 6 * 8)
    assert claimed_eps(RAGBuilder(ModelAnswerer(llama_lm, CIDConfig())), ["direct"], 3) is None
    # a defence's pure ε claim over a document or the context; none for a shard's, nor for an
    # (ε, δ) claim, which the attacks' pure-ε lower bound is not compared with
    from ctxleak.mitigations.cid import CID
    from ctxleak.mitigations.dp_rag import DPRAG
    from ctxleak.mitigations.dp_vote import DPVote
    from ctxleak.mitigations.mechanisms import Decoding
    from ctxleak.targets.mechanism_answerer import MechanismAnswerer

    dec = Decoding(max_new_tokens=6, min_new_tokens=0)
    dp_rag = MechanismAnswerer(llama_lm, DPRAG(eps=3.0), dec)  # δ = 1e-3
    assert claimed_eps(RAGBuilder(dp_rag), ["direct"], 3) is None
    bounded = MechanismAnswerer(llama_lm, CID(1.0, 0.5), dec)
    assert claimed_eps(RAGBuilder(bounded), ["interrogation"], 3) == pytest.approx(0.5 * 6 * 3)
    vote = MechanismAnswerer(llama_lm, DPVote(eps=3.0, shards=3), dec)
    assert claimed_eps(RAGBuilder(vote), ["direct"], 3) is None
    # through ctxleak serve: its epsilon × the answer's max_tokens
    served = ctxleak.attack_target(rag_demo=True, endpoint="http://127.0.0.1:9/v1",
                                   endpoint_model="m", endpoint_context="ctxleak",
                                   bounded_eps=2.0, max_new_tokens=5)
    assert claimed_eps(served, ["mask"], 3) == pytest.approx(2.0 * 5)
    plain = ctxleak.attack_target(rag_demo=True, endpoint="http://127.0.0.1:9/v1",
                                  endpoint_model="m")
    assert claimed_eps(plain, ["mask"], 3) is None
    with pytest.raises(ConfigError, match="endpoint_context") as info:
        ctxleak.attack_target(rag_demo=True, endpoint="http://127.0.0.1:9/v1",
                              endpoint_model="m", bounded_eps=2.0)
    assert info.value.param == "endpoint_context"


def test_demo_rag_on_a_tiny_model(llama_lm, tmp_path):
    target = ctxleak.attack_target(rag_demo=True, model=llama_lm, bounded_eps=1.0,
                                   max_new_tokens=4, top_k=1)
    result = ctxleak.attack_extract(target, "demo-rag", queries=3, output=str(tmp_path / "x"),
                                    progress=False)
    assert len(result.records) == 3
    assert all(len(r["retrieved"]) == 1 for r in result.records)
    assert "bounded CID ε = 1" in result.summary["target"]
    # ctxleak holds the app's model: the run says what context influence would add
    assert "ctxleak influence" in result.summary["influence_note"]
    assert "what influence would add" in result.to_html()
    assert len(attack_documents("demo-rag")) == 15


def test_the_ledger_joins_an_influence_run_by_document_id(llama_lm, tmp_path):
    influence = ctxleak.influence(llama_lm, "demo-rag-log", lambda_=1.0, temperature=1.0,
                                  min_new_tokens=0, max_new_tokens=3, limit=3, progress=False,
                                  output=str(tmp_path / "influence"))
    measured = {d["document"]: d for d in influence.summary["settings"][0]["documents"]}
    corpus = attack_documents("demo-rag")
    result = ctxleak.attack_extract(FunctionTarget(repeat_all, "repeat"), corpus,
                                    influence=str(tmp_path / "influence"),
                                    output=str(tmp_path / "x"), progress=False)
    assert result.summary["influence_run"]["path"] == str(tmp_path / "influence")
    rows = {r["document"]: r for r in result.ledger()}
    assert set(rows) == {d.id for d in corpus}
    for doc_id, row in rows.items():  # joined where the influence run measured the document
        if doc_id in measured:
            assert row["influence"]["influence_sum"] == measured[doc_id]["influence_sum"]
        else:
            assert row["influence"] is None
    with pytest.raises(ConfigError, match="not of 'influence'"):
        ctxleak.attack_extract(FunctionTarget(repeat_all, "repeat"), DOCS,
                               influence=str(result.path), output=str(tmp_path / "y"),
                               progress=False)


def test_a_langchain_chain_over_the_bundled_corpus(tmp_path):
    """A real LangChain chain (RunnableLambda steps: BM25 retrieval over the members of the
    bundled corpus, then an answer that repeats what it retrieved) audited end to end, with the
    held-out half of the corpus as the non-members."""
    runnables = pytest.importorskip("langchain_core.runnables")
    from ctxleak.methods.attacks.membership import split_members
    from ctxleak.targets.rag import RAGApp

    members, outs = split_members(attack_documents("demo-rag"), held_out=0.5, seed=0)
    index = RAGApp([{"id": d.id, "text": d.text} for d in members], answerer=Echo(), top_k=2)
    chain = runnables.RunnableLambda(lambda q: {"question": q, "docs": index.retrieve(q)}) | \
        runnables.RunnableLambda(lambda x: {"answer": " ".join(d.text for d in x["docs"]),
                                            "documents": [{"id": d.id, "text": d.text}
                                                          for d in x["docs"]]})
    result = ctxleak.attack_membership(
        chain, [{"id": d.id, "text": d.text} for d in members],
        non_members=[{"id": d.id, "text": d.text} for d in outs], attacks=["mask"],
        output=str(tmp_path / "m"), progress=False)
    assert "LangChain" in result.summary["target"]
    assert result.summary["attacks"]["mask"]["auc"] >= 0.95
    assert {d for r in result.records for d in r["retrieved"]} <= {d.id for d in members}


def test_a_claim_the_answers_do_not_keep_is_caught(tmp_path):
    """A RAG app that claims ε = 0.1 per document but repeats its documents (no mechanism at
    all): with 48 documents the mask attack's ε lower bound rises above the claim and the law
    reads "violated", as the canary audit catches a broken mechanism."""
    import random

    rng = random.Random(7)
    vocabulary = [f"w{k}" for k in range(2000)]
    docs = [{"id": f"doc-{k}", "text": " ".join(rng.sample(vocabulary, 24)) + "."}
            for k in range(48)]
    result = ctxleak.attack_membership(RAGBuilder(Echo(), top_k=1), docs, held_out=0.5,
                                       attacks=["mask"], eps_claimed=0.1,
                                       output=str(tmp_path / "m"), progress=False)
    eps = result.summary["attacks"]["mask"]["eps"]
    assert result.summary["attacks"]["mask"]["auc"] == 1.0
    assert eps["eps_lower"] > 0.1 and eps["law"] == "violated"
    assert "violated" in result.to_html()


def test_ctrl_c_mid_batch_keeps_each_answer_and_a_resume_asks_only_the_rest(tmp_path):
    calls: list[str] = []
    stop = {"at": 4}

    def app(question: str) -> str:
        if len(calls) == stop["at"]:
            raise KeyboardInterrupt
        calls.append(question)
        return "no idea"

    out = str(tmp_path / "run")
    target = FunctionTarget(app, "app")
    with pytest.raises(KeyboardInterrupt):  # one batch of 6: interrupted after 4 answers
        ctxleak.attack_extract(target, DOCS, output=out, progress=False)
    first = list(calls)
    stop["at"] = 99
    result = ctxleak.attack_extract(target, DOCS, output=out, resume=True, progress=False)
    assert len(first) == 4 and calls[4:] == [q for q in calls[4:] if q not in first]
    assert len(calls) == len(DOCS)  # the 4 answered questions were not asked again
    assert result.summary["queries_replayed"] == 4


def test_a_resume_against_another_function_of_the_same_name_is_refused(tmp_path):
    """Two files each define ``answer``: a run folder of the first is not resumed with the
    second (its answers are not this target's); the refusal names the folder and what
    differs. The same file loaded again is the same target."""
    for name, text in (("one.py", "nothing"), ("two.py", "something else")):
        (tmp_path / name).write_text(f"def answer(question):\n    return {text!r}\n")
    out = tmp_path / "run"
    one = ctxleak.attack_target(function=f"{tmp_path / 'one.py'}:answer")
    ctxleak.attack_extract(one, DOCS[:2], output=str(out), progress=False)
    again = ctxleak.attack_target(function=f"{tmp_path / 'one.py'}:answer")
    ctxleak.attack_extract(again, DOCS[:2], output=str(out), resume=True, progress=False)
    two = ctxleak.attack_target(function=f"{tmp_path / 'two.py'}:answer")
    with pytest.raises(ConfigError) as info:
        ctxleak.attack_extract(two, DOCS[:2], output=str(out), resume=True, progress=False)
    message = str(info.value)
    assert "\n" not in message and f"cannot resume {out}" in message
    assert "another target than Python function answer" in message
    assert "one.py.answer@" in message and "two.py.answer@" in message


def test_an_endpoint_that_echoes_its_key_stores_and_shows_it_nowhere(tmp_path, monkeypatch,
                                                                     capsys):
    """The key verbatim, spaced out, split every few characters, on several lines, in base64,
    base64url and inside a base64 header: each is "[API KEY]" in the answers, and no form of
    it is in samples.jsonl, answers.sqlite, results.json or the HTML report, nor printed."""
    import base64

    from helpers.fake_chat import completion

    key = "sk-proj-7Hq2Lm9Xv4Rt8Wz1Kp6Nd3Fs"
    forms = [key, " ".join(key), "-".join(key[i:i + 3] for i in range(0, len(key), 3)),
             "\n".join(key[i:i + 5] for i in range(0, len(key), 5)),
             base64.b64encode(key.encode()).decode(),
             base64.urlsafe_b64encode(b"\xfb" + key.encode()).decode(),
             base64.b64encode(b"Authorization: Bearer " + key.encode()).decode()]
    monkeypatch.setenv("LEAKY_KEY", key)
    answer = " | ".join(f"form {k}: {form}" for k, form in enumerate(forms))
    with fake_chat(lambda body, headers: Reply(body=completion(answer))) as server:
        target = ChatEndpointTarget(server.url, "fake", api_key_env="LEAKY_KEY")
        result = ctxleak.attack_extract(target, DOCS[:2], output=str(tmp_path / "run"),
                                        progress=False)
        html = result.to_html()
    texts = {r["answer"] for r in result.records}
    assert texts == {" | ".join(f"form {k}: [API KEY]" for k in range(len(forms)))}
    stored = b"".join(p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()
                      and not p.name.endswith(".key"))
    printed = "".join(capsys.readouterr()) + html
    for form in forms + [key[:10], key[-10:]]:
        assert form.encode() not in stored and form not in printed, form
    assert b"[API KEY]" in stored


def test_what_a_target_returns_wrong_is_one_line_or_kept_with_a_warning(tmp_path, monkeypatch):
    """A lone surrogate in an answer: kept, replaced by U+FFFD, with a warning naming the
    question (a reader wants the answer, not a refusal); documents that are not a list: one
    TargetError naming the function and what it returned; one string: one document;
    documents=None: one ConfigError."""
    warned: list[str] = []  # (detect-secrets, imported on the way, sends warnings to logging)
    monkeypatch.setattr(journal_module, "warn", lambda message, *a, **k: warned.append(message))
    result = ctxleak.attack_extract(FunctionTarget(lambda q: "bad \ud800 answer", "f"),
                                    DOCS[:1], output=str(tmp_path / "a"), progress=False)
    assert result.records[0]["answer"] == "bad \ufffd answer"
    # (the record's question as written, its run's secrets masked: its start names it)
    assert len(warned) == 1 and "holds lone surrogates" in warned[0] and \
        result.records[0]["question"][:30] in warned[0]
    with pytest.raises(TargetError) as info:
        ctxleak.attack_extract(FunctionTarget(lambda q: ("answer", 5), "five"), DOCS[:1],
                               output=str(tmp_path / "b"), progress=False)
    assert "five returned (str, int) for question 1: expected (answer, documents) with the " \
        "documents a list" in str(info.value) and "\n" not in str(info.value)
    one = ctxleak.attack_extract(FunctionTarget(lambda q: ("answer", "a document"), "one"),
                                 DOCS[:1], output=str(tmp_path / "c"), progress=False)
    assert one.records[0]["retrieved"] == ["0"]
    with pytest.raises(ConfigError, match="documents: give 'demo-rag', 'demo-datastore', a "
                       "JSONL or CSV file, or a list of strings or of dicts with 'text', not "
                       "NoneType") as info:
        ctxleak.attack_extract(FunctionTarget(str, "f"), None, output=str(tmp_path / "d"),
                               progress=False)
    assert info.value.param == "documents"


def test_an_answer_over_the_limit_is_cut_to_it_with_a_warning(tmp_path, monkeypatch):
    """The attack's journal keeps at most MAX_ANSWER_CHARS (1,000,000) characters of an answer
    (its default, which the runner does not override); a longer answer is cut to the limit,
    with a warning naming the question. Shown here at a limit of 1,000 with an answer twice as
    long: the same road at the full limit spent about 15 s scanning the kept megabyte for
    sensitive values, which is what a kept answer gets, whatever its size."""
    import inspect
    from functools import partial

    from ctxleak.run import runner
    from ctxleak.targets.journal import MAX_ANSWER_CHARS, JournaledTarget

    assert inspect.signature(JournaledTarget).parameters["max_answer_chars"].default == \
        MAX_ANSWER_CHARS == 1_000_000
    limit = 1_000
    # a keyword the runner gave would replace this one (and the length below would differ)
    monkeypatch.setattr(runner, "JournaledTarget",
                        partial(JournaledTarget, max_answer_chars=limit))
    warned: list[str] = []
    monkeypatch.setattr(journal_module, "warn", lambda message, *a, **k: warned.append(message))
    huge = "x" * (2 * limit)  # one word: the matching stays cheap, the size is what is tested
    result = ctxleak.attack_extract(FunctionTarget(lambda q: huge, "huge"), DOCS[:1],
                                    output=str(tmp_path / "a"), progress=False)
    assert result.records[0]["answer"] == "x" * limit
    assert len(warned) == 1 and "has 2,000 characters: cut to the first 1,000" in \
        warned[0] and result.records[0]["question"][:30] in warned[0]


def test_an_attack_with_no_question_is_named_in_the_summary_with_why(tmp_path):
    members = [{"id": f"m{k}", "text": w} for k, w in enumerate(["Lisbon", "payroll", "cluster"])]
    outs = [{"id": f"n{k}", "text": w} for k, w in enumerate(["badge", "rotation", "breakfast"])]
    result = ctxleak.attack_membership(FunctionTarget(lambda q: "yes", "yes"), members,
                                       non_members=outs, attacks=["direct", "interrogation"],
                                       output=str(tmp_path / "m"), progress=False)
    attacks = result.summary["attacks"]
    assert set(attacks) == {"direct", "interrogation"}
    assert "no document gave it a question" in attacks["interrogation"]["skipped"]
    assert len(attacks["interrogation"]["unasked"]) == 6
    assert {r["attack"] for r in result.records} == {"direct"}
    # the console names it too (its table has no row for an attack without figures)
    from ctxleak.report.attacks import _notes

    assert any(line.startswith("not scored: interrogation (") and
               "no document gave it a question" in line for line in _notes(result))


@pytest.mark.parametrize("twin", ["Cafe\u0301 menu changes every Monday at nine.",
                                  "Caf\u00e9 menu changes every Mon\u200bday at nine.",
                                  "\ufeffCaf\u00e9 menu changes every Monday at nine."])
def test_texts_that_differ_only_in_normal_form_or_zero_width_are_duplicates(tmp_path, twin):
    docs = [{"id": "a", "text": "Caf\u00e9 menu changes every Monday at nine."},
            {"id": "b", "text": twin}]
    with pytest.raises(InputError, match="documents 'a' and 'b' have the same text"):
        ctxleak.attack_membership(FunctionTarget(str, "f"), docs[:1], non_members=docs[1:],
                                  output=str(tmp_path / "m"), progress=False)


def test_the_calibrated_attack_by_name_its_queries_counted_against_max_queries(tmp_path):
    asked = []

    def repeat(question):  # the positive control: answers with every member document
        asked.append(question)
        return " ".join(d["text"] for d in DOCS[:3])

    target = FunctionTarget(repeat, "repeat")
    # 6 direct questions and 1 + 2 calibrated ones per document
    with pytest.raises(ConfigError, match="max_queries") as info:
        ctxleak.attack_membership(target, DOCS[:3], non_members=DOCS[3:],
                                  attacks=["direct", "calibrated"], perturbations=2,
                                  max_queries=6 + 6 * 3 - 1, output=str(tmp_path / "a"),
                                  progress=False)
    assert info.value.param == "max_queries" and asked == []
    result = ctxleak.attack_membership(target, DOCS[:3], non_members=DOCS[3:],
                                       attacks=["direct", "calibrated"], perturbations=2,
                                       max_queries=6 + 6 * 3, output=str(tmp_path / "b"),
                                       progress=False)
    assert len(asked) == 24 and result.config["perturbations"] == 2
    calibrated = [r for r in result.records if r["attack"] == "calibrated"]
    assert sorted(r["part"] for r in calibrated) == sorted([0, 1, 2] * 6)
    # a target that shows every member whatever it is asked: the original and the perturbed
    # queries alike give a member's masked words, so the calibrated scores are all 0: it
    # cannot tell (the uncalibrated mask attack would call every member)
    assert {r["document"]: r["membership"]["calibrated"] for r in result.ledger()} == \
        dict.fromkeys([d["id"] for d in DOCS], 0.0)
    with pytest.raises(ConfigError, match="^perturbations must be") as info:
        ctxleak.attack_membership(target, DOCS[:3], non_members=DOCS[3:],
                                  attacks=["calibrated"], perturbations=0,
                                  output=str(tmp_path / "c"), progress=False)
    assert info.value.param == "perturbations" and not (tmp_path / "c").exists()


def test_interrogation_asks_the_questions_per_document_it_is_given(tmp_path):
    sentences = [{"id": f"s{k}", "text": f"{a} Lisbon office opened in {1990 + k}. Its badge "
                                        f"readers were replaced by {b} in March. The canteen "
                                        f"now serves {c} every Friday."}
                 for k, (a, b, c) in enumerate([("Northwind's", "Kestrel", "paella"),
                                                ("Harbor's", "Osprey", "ramen"),
                                                ("Alder's", "Merlin", "falafel"),
                                                ("Birch's", "Condor", "pierogi")])]
    target = FunctionTarget(lambda q: " ".join(d["text"] for d in sentences[:2]), "two")
    result = ctxleak.attack_membership(target, sentences[:2], non_members=sentences[2:],
                                       attacks=["interrogation"], questions=2,
                                       output=str(tmp_path / "q2"), progress=False)
    assert result.config["questions"] == 2 and len(result.records) == 4 * 2
    # one per sentence at most: three sentences, three questions
    counts = {n: len(membership_questions(sentences[:2], sentences[2:],
                                          attacks=["interrogation"], questions=n))
              for n in (1, 2, 3, 10)}
    assert counts == {1: 4, 2: 8, 3: 12, 10: 12}
    with pytest.raises(ConfigError, match="^questions must be a whole number") as info:
        ctxleak.attack_membership(target, sentences[:2], non_members=sentences[2:],
                                  attacks=["interrogation"], questions=0,
                                  output=str(tmp_path / "q0"), progress=False)
    assert info.value.param == "questions" and not (tmp_path / "q0").exists()
