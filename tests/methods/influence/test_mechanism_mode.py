"""Another mechanism than CID as a decoding mode of the influence run, on a tiny model with a
toy mechanism (:mod:`helpers.toy_mechanism`): its answer is the one it decodes, measured as CID
at λ = 1 measures an answer (recomputed here from the model's log-probs), every record carries
a claim (CID's included), the setting's key, grid and config name it, and bad input is refused
in one line before anything is decoded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli
from helpers.tiny_models import tiny_llama
from helpers.toy_mechanism import FirstDocuments, register_toy

import ctxleak
from ctxleak.engine.generation import derive_seed, sample
from ctxleak.engine.prompts import build_prompt
from ctxleak.engine.scoring import continuation_logprobs
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.data import TASK_TEMPLATES, load_log, prompt_parts
from ctxleak.methods.influence.mechanism_mode import (
    answer_request,
    cid_claim,
    claim_summary,
    mechanism_list,
    mechanism_streams,
    word_similarity,
)
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.influence.pipeline import Job
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.methods.rag.app_prompt import AppPromptChoice, load_prompt_messages
from ctxleak.methods.rag.passages import LIST_SEPARATOR
from ctxleak.mitigations.cid import CID

ROWS = [{"id": f"q{i}", "query": q, "reference": r,
         "documents": [{"id": f"q{i}-d{j}", "text": t} for j, t in enumerate(docs)]}
        for i, (q, r, docs) in enumerate((
            ("where is rome ?", "italy", ["rome is in italy .", "paris is in france ."]),
            ("who is the doctor ?", "anna", ["the doctor is anna .", "berlin is big .",
                                             "one page ."]),
            ("what is the news ?", "rain", ["the news is rain .", "the city is old ."])))]
KW = dict(max_new_tokens=4, min_new_tokens=0, temperature=1.0, seed=3, progress=False)


@pytest.fixture(autouse=True)
def _toy():
    register_toy()


def test_the_setting_key_grid_and_config_name_the_mechanism():
    toy = FirstDocuments(eps=2.0)
    params = InfluenceParams(lambda_="0,1", mechanisms=[toy, "toy-first:eps=1,k=2"])
    grid = params.grid()
    assert [s.key for s in grid] == [
        "lambda=0,T=0.8,context=all", "lambda=1,T=0.8,context=all",
        "lambda=1,T=0.8,context=all,mechanism=toy-first(eps=2,k=1)",
        "lambda=1,T=0.8,context=all,mechanism=toy-first(eps=1,k=2)"]
    assert [s.is_baseline for s in grid] == [False, True, False, False]
    assert params.to_config()["mechanisms"] == ["toy-first(eps=2,k=1)", "toy-first(eps=1,k=2)"]
    assert "mechanisms" not in InfluenceParams().to_config()  # old run folders still resume
    # a mechanism alone: the unmitigated baseline leads (λ = 1 is the default λ)
    alone = InfluenceParams(mechanisms="toy-first;toy-first:eps=3").grid()
    assert [s.mechanism for s in alone] == [CID(), FirstDocuments(), FirstDocuments(eps=3.0)]
    assert [s.decoded_by_cid for s in alone] == [True, False, False]


@pytest.mark.parametrize("kw, says", [
    ({"mechanisms": ["toy-first", "toy-first:eps=1"]}, "lists toy-first(eps=1,k=1) twice"),
    ({"mechanisms": "toy-first", "context_sizes": "8"}, "leave out context_sizes"),
    ({"mechanisms": "nope"}, "no mechanism named 'nope'"),
])
def test_options_a_mechanism_cannot_honour_are_refused(kw, says):
    with pytest.raises(ConfigError) as err:
        InfluenceParams(**kw)
    assert err.value.param == "mechanisms" and says in str(err.value)


def test_the_answer_is_the_mechanisms_and_its_influence_is_cids_at_lambda_1(llama_lm, tmp_path):
    toy = FirstDocuments(eps=0.5)
    result = ctxleak.influence(llama_lm, ROWS, mechanisms=[toy], output=str(tmp_path / "r"),
                               **KW)
    mine = [r for r in result.records if r.get("mechanism") == toy.key()]
    assert len(mine) == 3 and len(result.records) == 6  # λ = 1 and the toy
    template = TASK_TEMPLATES["qa"]
    for k, (row, rec) in enumerate(zip(ROWS, mine)):
        texts = [d["text"] for d in row["documents"]]
        # what the toy was given: the first document alone, under the run's template
        first = build_prompt(llama_lm, template, {"context": texts[0],
                                                  "query": row["query"]}).ids
        (g,), = sample(llama_lm, [list(first)], [derive_seed(3, k)], temperature=1.0,
                       max_new_tokens=4)
        assert rec["response_ids"] == list(g.token_ids)
        # scored with every document (the very prompt the toy builds for all of them)
        context = [t for j, x in enumerate(texts)
                   for t in llama_lm.encode(x if j == 0 else LIST_SEPARATOR + x)]
        full = build_prompt(llama_lm, template, {"context": context, "query": row["query"]}).ids
        empty = build_prompt(llama_lm, template, {"context": [], "query": row["query"]}).ids
        lc, le = continuation_logprobs(llama_lm, [list(full), list(empty)], list(g.token_ids))
        assert rec["context_tokens"] == len(context)
        assert rec["logp_context"] == pytest.approx(lc.tolist(), abs=1e-5)
        assert rec["influence"] == pytest.approx(float(np.sum(np.abs(lc - le))), abs=1e-4)
        released = len(g.token_ids) + int(g.stopped_on_eos)
        assert (rec["claim_eps"], rec["claim_delta"], rec["claim_relation"]) == (
            pytest.approx(0.5 * released), 0.0, "document")
        assert rec["tokens_paid"] == released and rec["documents_used"] == [0]
        assert [s["token_id"] for s in rec["mechanism_steps"]] == rec["response_ids"]
        assert rec["lambda"] == 1.0 and len(rec["passage_influence"]) == len(texts)
    plain = [r for r in result.records if "mechanism" not in r]
    assert all((r["claim_eps"], r["claim_relation"], r["tokens_paid"]) == (None, "none", 0)
               for r in plain)
    setting = next(s for s in result.summary["settings"] if s.get("mechanism"))
    assert setting["claim"]["relation"] == "document"
    assert setting["claim"]["eps"]["mean"] == pytest.approx(np.mean([r["claim_eps"]
                                                                     for r in mine]))
    assert setting["tokens_paid"]["mean"] == pytest.approx(np.mean([r["tokens_paid"]
                                                                    for r in mine]))
    # its influence is the model's under plain decoding, not the toy's loss: never read as ε
    claim = setting["claim"]["eps_max"]
    assert setting["dp_reading"].startswith("not an ε: its answers are scored as plain decoding")
    assert f"{toy.key()}'s own privacy loss is what its claim bounds, ε = {claim:.3g} per " \
        "response (document)" in setting["dp_reading"]
    assert "budget" not in setting["dp_reading"]
    cid_setting = next(s for s in result.summary["settings"] if not s.get("mechanism"))
    assert cid_setting["dp_reading"].startswith("ε = ")  # CID's: the ex-post ε it reads
    row = result.summary["frontier"]["rows"][1]
    assert row["label"] == toy.key() and row["relation"] == "document"
    assert row["eps_guarantee"] == pytest.approx(setting["claim"]["eps"]["mean"])


def test_cid_claims_by_hand():
    assert cid_claim(Setting.cid(0.0, 1.0), {})["claim_eps"] == 0.0  # λ = 0 reads no context
    bounded = cid_claim(Setting.cid(1.0, 1.0, None, 2.0), {"composed_eps": 10.0,
                                                        "response_ids": [1, 2, 3, 4],
                                                        "stopped_on_eos": True})
    assert bounded == {"claim_eps": 10.0, "claim_delta": 0.0, "claim_relation": "context",
                       "tokens_paid": 5}
    assert cid_claim(Setting.cid(0.5, 1.0), {})["claim_relation"] == "none"
    assert cid_claim(Setting.cid(0.0, 1.0, None, 2.0), {"composed_eps": 10.0})["claim_eps"] == 0.0
    assert claim_summary([{"claim_eps": None, "claim_relation": "none", "tokens_paid": 0}] * 2
                         )["claim"]["eps"] is None


def test_too_few_documents_or_a_logged_answer_is_refused_before_decoding(llama_lm, tmp_path):
    one = [{"id": "a", "context": "rome is in italy .", "query": "where ?"}]
    with pytest.raises(ConfigError) as err:
        ctxleak.influence(llama_lm, one, mechanisms="toy-first", output=str(tmp_path / "a"),
                          **KW)
    assert str(err.value).startswith("mechanisms: toy-first(eps=1,k=1) needs at least 2 "
                                     "documents per question, and example a has 1")
    with pytest.raises(ConfigError, match=r"dp-vote\(eps=2,shards=4,delta=0.0001\) needs at "
                                          r"least 4 documents per question, and example q0 "
                                          r"has 2"):
        ctxleak.influence(llama_lm, ROWS, mechanisms="dp-vote:eps=2,shards=4",
                          datastore="retrieved", output=str(tmp_path / "c"), **KW)
    # over the pooled datastore (7 documents), a vote needs no more shards than documents
    with pytest.raises(ConfigError, match=r"shards=8,delta=0.0001\) has more shards than a "
                                          r"datastore of 7 documents: at most 7"):
        ctxleak.influence(llama_lm, ROWS, mechanisms="dp-vote:eps=2,shards=8",
                          output=str(tmp_path / "d"), **KW)
    with pytest.raises(ConfigError, match="datastore is read by the mechanisms only"):
        ctxleak.influence(llama_lm, ROWS, datastore="retrieved", output=str(tmp_path / "e"),
                          **KW)
    logged = [{**ROWS[0], "response": "italy"}]
    with pytest.raises(ConfigError, match="carries a logged answer"):
        ctxleak.influence(llama_lm, logged, mechanisms="toy-first", output=str(tmp_path / "b"),
                          **KW)


def test_the_cli_flag_is_repeatable_and_errors_name_it(tiny_dir, tmp_path, capsys):
    data, out = tmp_path / "rows.jsonl", tmp_path / "run"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    argv = ["influence", "--model", tiny_dir, "--data", str(data), "--max-new-tokens", "3",
            "--min-new-tokens", "0", "--output", str(out), "--mechanism", "toy-first",
            "--mechanism", "toy-first:eps=2,k=2"]
    code, stdout, err = run_cli(argv, capsys)
    assert code == 0, err
    saved = json.loads((out / "results.json").read_text())["summary"]
    assert [s.get("mechanism") for s in saved["settings"]] == [
        None, "toy-first(eps=1,k=1)", "toy-first(eps=2,k=2)"]
    assert "Privacy–utility frontier" in stdout and "covers" in stdout
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                            "--mechanism", "toy-first:eps=-1", "--output",
                            str(tmp_path / "bad")], capsys)
    assert code != 0 and "--mechanism: 'toy-first:eps=-1': eps: -1.0 is not > 0" in err


def test_mechanism_lists():
    assert mechanism_list(None) == ()
    assert mechanism_list("toy-first:eps=2;toy-first") == (FirstDocuments(eps=2.0),
                                                           FirstDocuments())


def test_requests_carry_the_retrievers_scores_else_the_word_similarity_to_the_query(llama_lm):
    # {where, is, rome} . {rome, is, in, italy} = 2 shared words; norms sqrt(3) and sqrt(4)
    assert word_similarity("Where is Rome?", "rome is in italy .") == pytest.approx(2 / 12 ** 0.5)
    assert word_similarity("", "rome") == 0.0 and word_similarity("a a", "a") == 1.0
    scored = [{**ROWS[0], "documents": [{**d, "score": 0.9 - j / 10}
                                        for j, d in enumerate(ROWS[0]["documents"])]}]
    (given,), _ = load_log(scored)
    (plain,), _ = load_log(ROWS[:1])
    job = Job(given, Setting.cid(1.0, 1.0), 7)
    request = answer_request(llama_lm, job, InfluenceOptions())
    assert request.scores == (0.9, 0.8) and request.ids == ("q0-d0", "q0-d1")
    assert request.seed == 7 and request.documents == ("rome is in italy .",
                                                       "paris is in france .")
    assert request.prompt([]) != request.prompt(list(request.documents))
    bare = answer_request(llama_lm, Job(plain, Setting.cid(1.0, 1.0), 7), InfluenceOptions())
    assert bare.scores == (pytest.approx(2 / 12 ** 0.5), pytest.approx(1 / 12 ** 0.5))


def test_a_mechanism_asks_the_apps_own_prompt_through_the_chat_template():
    """Under the app's messages, a mechanism's prompt for any document texts is the chat
    template's rendering of the messages with those texts (joined by a blank line) as
    {context}; the named ``short-answer`` prompt is such messages."""
    lm = tiny_llama()
    lm.tokenizer.chat_template = (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}summary"
        "{% else %}question{% endif %} : {{ m['content'] }} \n{% endfor %}"
        "{% if add_generation_prompt %}answer :{% endif %}")
    prompt = [{"role": "system", "content": "answer the question ."},
              {"role": "user", "content": "document : {context} \n question : {query}"}]
    (example,), _ = load_log(ROWS[1:2], app=AppPromptChoice(load_prompt_messages(prompt)))
    request = answer_request(lm, Job(example, Setting.cid(1.0, 1.0), 5), InfluenceOptions())

    def chat_ids(context):
        messages = [{"role": m["role"], "content": m["content"].format(
            context=context, query=example.query)} for m in prompt]
        ids = lm.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    texts = list(request.documents[:2])
    assert request.prompt(texts) == chat_ids(LIST_SEPARATOR.join(texts))
    assert request.prompt([]) == chat_ids("")
    # with every document: the very prompt the answer is scored under
    assert request.prompt(list(request.documents)) == prompt_parts(lm, example)[0].full
    named = load_prompt_messages("short-answer")
    assert [role for role, _ in named] == ["system", "user"]
    assert "{context}" in named[1][1] and "{query}" in named[1][1]


def test_a_mechanisms_streams_size_its_batch():
    """What an answer keeps in flight: a vote's voters and the no-retrieval stream, DP-RAG's
    aim over a datastore, else every document of the example and the prior."""
    from ctxleak.mitigations.datastore import Datastore
    from ctxleak.mitigations.dp_rag import DPRAG
    from ctxleak.mitigations.dp_vote import DPVote

    (example,), _ = load_log(ROWS[1:2])
    store = Datastore((("a", "x"), ("b", "y")))
    assert mechanism_streams(DPVote(eps=10, shards=32), example, store) == 33
    assert mechanism_streams(DPVote(eps=10, shards=3), example, None) == 4
    assert mechanism_streams(DPRAG(eps=5, top_k=8), example, store) == 9
    assert mechanism_streams(DPRAG(eps=5, top_k=8), example, None) == 4


def test_a_mechanisms_influence_is_read_beside_its_claim_never_as_its_epsilon():
    """The reading of a mechanism's influence names its claim (or that it has none) and, first,
    a document its answers copied; it never places the nats on the DP budget scale."""
    from ctxleak.methods.influence.summary import mechanism_reading

    dp = {"mechanism": "dp-rag(eps=5)", "claim": {"eps_max": 5.0, "relation": "document"}}
    assert mechanism_reading(dp) == (
        "not an ε: its answers are scored as plain decoding would score them (the documents' "
        "influence on the model); dp-rag(eps=5)'s own privacy loss is what its claim bounds, "
        "ε = 5 per response (document); the canary audit tests that claim")
    scrub = {"mechanism": "scrub", "claim": {"eps_max": None, "relation": "none"}}
    assert mechanism_reading(scrub).endswith("; scrub claims no DP guarantee")
    copied = {**dp, "document_control": {"copying_answers": ["q1"], "leaks": [
        {"id": "q1", "document": "d7", "copied": True}]}}
    first, rest = mechanism_reading(copied).split("; not an ε", 1)
    assert first == ("1 answer(s) copy a document verbatim or repeat its secret or PII value "
                     "(e.g. q1 copies d7): the claim still bounds how much more likely that "
                     "document made the answer")
    first, rest = mechanism_reading({**copied, **scrub}).split("; not an ε", 1)
    assert first.startswith("not within any DP budget: 1 answer(s) copy") and "d7" in first
    # with the mechanism's own loss of the examples' documents, the reading gives it
    spent = {**dp, "document_loss": {"documents": 3, "median": 0.25, "max": 6.5,
                                     "within_claim": 2}}
    assert mechanism_reading(spent).endswith(
        "ε = 5 per response (document); recomputed from its recorded steps, it spent 0.25 nats "
        "(median; largest 6.5) on each example's own document, 2 of 3 within the claim; the "
        "canary audit tests that claim")
    powered = {**dp, "document_loss": {"documents": 148, "answers": 148, "median": 0.06,
                                       "max": 0.7, "within_claim": 148,
                                       "beyond_at_most": 0.02004}}
    assert "148 of 148 within the claim (148 answers show a loss beyond it happens in at most " \
           "2 % of answers, at 95 % confidence; the rarer losses its δ allows need more)" in \
        mechanism_reading(powered)


def test_the_own_loss_summary_by_hand():
    from ctxleak.methods.influence.mechanism_mode import spent_summary

    records = [{"document_loss": {"a": 0.5, "b": -3.0}, "claim_eps": 2.0},
               {"document_loss": {"c": 1.0}, "claim_eps": 2.0}, {"claim_eps": 2.0}]
    assert spent_summary(records) == {"document_loss": {
        "documents": 3, "answers": 2, "median": 1.0, "max": 3.0, "within_claim": 2,
        "beyond_at_most": None}}
    # all within: none of 1 answer beyond, so beyond in at most 1 − 0.05^(1/1) = 95 % of them
    inside = spent_summary(records[1:])["document_loss"]
    assert inside["within_claim"] == 1 and inside["beyond_at_most"] == pytest.approx(0.95)
    # the answers are the trials, however many documents each holds
    many = spent_summary([{"document_loss": {f"d{i}": 0.1, f"e{i}": 0.2}, "claim_eps": 2.0}
                          for i in range(148)])["document_loss"]
    assert many["documents"] == 296 and many["answers"] == 148
    assert many["beyond_at_most"] == pytest.approx(0.02004, abs=1e-5)
    assert spent_summary([{"claim_eps": 2.0}]) == {}


def test_a_dp_mechanism_over_the_datastore_records_its_own_loss_per_document(llama_lm,
                                                                             tmp_path):
    """Over the pooled datastore, each record holds the mechanism's own ex-post loss of each of
    its example's documents, and the setting's summary and reading count them."""
    result = ctxleak.influence(llama_lm, ROWS, mechanisms="dp-sparse-vote:eps=6,shards=3",
                               output=str(tmp_path / "run"), **KW)
    mech = [r for r in result.records if (r.get("mechanism") or "").startswith("dp-sparse")]
    assert len(mech) == len(ROWS)
    for record, row in zip(mech, ROWS):
        assert list(record["document_loss"]) == [d["id"] for d in row["documents"]]
        assert all(abs(v) <= record["claim_eps"] + 1e-9 for v in record["document_loss"].values())
    setting = next(s for s in result.summary["settings"] if s.get("mechanism"))
    assert setting["document_loss"]["documents"] == 7
    assert setting["document_loss"]["within_claim"] == 7
    assert "recomputed from its recorded steps" in setting["dp_reading"]


def test_the_answer_vote_is_a_setting_of_the_sweep(llama_lm, tmp_path):
    """The answer vote over the pooled datastore (issue 82): one paid vote per answer, its
    claim ε per response over the datastore's documents, and its own loss of each of the
    example's documents within it."""
    result = ctxleak.influence(llama_lm, ROWS, mechanisms="dp-answer-vote:eps=4,shards=3",
                               output=str(tmp_path / "run"), **KW)
    mech = [r for r in result.records if (r.get("mechanism") or "").startswith("dp-answer")]
    assert len(mech) == len(ROWS)
    for record, row in zip(mech, ROWS):
        assert (record["claim_eps"], record["claim_relation"], record["tokens_paid"]) == \
            (4.0, "document", 1)
        [step] = record["mechanism_steps"]
        assert step["source"] in ("vote", "abstained") and len(step["answers"]) == 3
        assert set(record["document_loss"]) <= {d["id"] for d in row["documents"]}
        assert all(abs(v) <= 4.0 + 1e-9 for v in record["document_loss"].values())
