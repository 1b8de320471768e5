"""Logged answers scored under the app's own prompt (Def. 3.1-3.2 of "Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models", measured on the deployed answer under the
messages the app sent): span logs keep only traces with an LLM span, the LLM span's messages are
the prompt, the JSONL route with the same messages gives the same ids and numbers, and one
answer's influence is recomputed by hand from ``apply_chat_template``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.tiny_bpe import tiny_bpe_llama
from helpers.tiny_models import tiny_llama

import ctxleak
from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.influence.data import load_log, passage_spans, prompt_parts
from ctxleak.methods.rag.app_prompt import AppPromptChoice, load_prompt_messages

#: A chat template in the tiny word tokenizer's words ("summary" a system turn, "question" a user
#: turn, "answer :" the assistant header), with its BOS.
CHAT = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}summary"
        "{% else %}question{% endif %} : {{ m['content'] }} \n{% endfor %}"
        "{% if add_generation_prompt %}answer :{% endif %}")
PROMPT = [{"role": "system", "content": "answer the question . {{ yes }}"},
          {"role": "user", "content": "document : {context} \n question : {query}"}]
DOCS = [("kb-1", "the capital of france is paris ."), ("kb-2", "berlin is in germany ."),
        ("kb-3", "rome is in italy .")]
TURNS = [("t1", "the capital of france ?", "paris is the capital", [0, 1]),
         ("t2", "the city in italy ?", "rome", [2, 0, 1])]


@pytest.fixture(scope="module")
def chat_lm():
    """A tiny Llama whose tokenizer has a chat template (its own copy: the shared one has none)."""
    lm = tiny_llama()
    lm.tokenizer.chat_template = CHAT
    return lm


def _messages(context, query):
    return [{"role": m["role"], "content": m["content"].format(context=context, query=query)}
            for m in PROMPT]


def _chat_ids(lm, messages):
    """``apply_chat_template(messages, add_generation_prompt=True)``'s token ids."""
    ids = lm.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def _span(trace, span_id, parent, kind, attributes):
    return {"name": kind.lower(), "context": {"trace_id": trace, "span_id": span_id},
            "parent_id": parent, "attributes": {"openinference.span.kind": kind, **attributes}}


def _trace(trace, query, answer, docs, messages=True):
    retrieval = {f"retrieval.documents.{n}.document.{k}": v for n, j in enumerate(docs)
                 for k, v in (("id", DOCS[j][0]), ("content", DOCS[j][1]))}
    llm = {"llm.output_messages.0.message.role": "assistant",
           "llm.output_messages.0.message.content": answer,
           "llm.invocation_parameters": json.dumps({"temperature": 0.0, "max_tokens": 8})}
    if messages:
        sent = _messages("\n\n".join(DOCS[j][1] for j in docs), query)
        llm.update({f"llm.input_messages.{n}.message.{k}": m[k]
                    for n, m in enumerate(sent) for k in ("role", "content")})
    # the root's output differs from the LLM's message: the message is the answer
    return [_span(trace, "r", None, "CHAIN", {"input.value": query, "output.value": "other"}),
            _span(trace, "a", "r", "RETRIEVER", {"input.value": query, **retrieval}),
            _span(trace, "b", "r", "LLM", llm)]


def _shown(trace, query, docs):
    """A retriever-only trace: the app showing sources, no answer."""
    retrieval = {f"retrieval.documents.{n}.document.content": DOCS[j][1]
                 for n, j in enumerate(docs)}
    return [_span(trace, "s", None, "RETRIEVER", {"input.value": query, **retrieval})]


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture
def logs(tmp_path):
    """The same turns as a span log (a retriever-only trace between them) and as JSONL rows,
    with the app's prompt as a JSON file."""
    spans = [*_trace(*TURNS[0]), *_shown("s1", "rome ?", [2]), *_trace(*TURNS[1])]
    rows = [{"id": t, "query": q, "response": a,
             "documents": [{"id": DOCS[j][0], "text": DOCS[j][1]} for j in docs]}
            for t, q, a, docs in TURNS]
    prompt = tmp_path / "prompt.json"
    prompt.write_text(json.dumps(PROMPT))
    return _write(tmp_path / "spans.jsonl", spans), _write(tmp_path / "log.jsonl", rows), prompt


def test_only_answers_are_rows_and_the_trace_gives_prompt_ids_and_temperature(logs):
    spans, _, _ = logs
    examples, traces = load_log(str(spans))
    assert traces == {"answers": 2, "retriever_only": 1}
    assert [ex.id for ex in examples] == ["t1", "t2"]
    first = examples[0]
    assert first.response == "paris is the capital" and first.logged_temperature == 0.0
    assert [d.id for d in first.documents] == ["kb-1", "kb-2"]
    assert first.prompt.source == "app messages"
    # the documents became the {context} slot and the query the {query} slot; the app's
    # literal braces stay literal
    assert first.prompt.messages == (
        ("system", "answer the question . {{ yes }}"),
        ("user", "document : {context} \n question : {query}"))
    assert first.passages == (DOCS[0][1], "\n\n" + DOCS[1][1])


def test_the_same_prompt_gives_the_same_ids_and_the_same_numbers(chat_lm, logs, tmp_path):
    spans, rows, prompt = logs
    from_spans, _ = load_log(str(spans))
    from_rows, traces = load_log(str(rows), app=AppPromptChoice(load_prompt_messages(prompt)))
    assert traces is None and [ex.prompt.source for ex in from_rows] == ["app template"] * 2
    for a, b in zip(from_spans, from_rows):
        pa, pb = prompt_parts(chat_lm, a)[0], prompt_parts(chat_lm, b)[0]
        assert (pa.full, pa.empty, pa.context) == (pb.full, pb.empty, pb.context)
        assert passage_spans(chat_lm, a, len(pa.context)) == \
            passage_spans(chat_lm, b, len(pb.context))
        # the app's ids: its messages through the chat template, tokenised whole
        context = "\n\n".join(d.text for d in a.documents)
        assert pa.full == _chat_ids(chat_lm, _messages(context, a.query))
    kw = dict(temperature=1.0, min_new_tokens=0, max_new_tokens=4, progress=False)
    by_spans = ctxleak.influence(chat_lm, str(spans), output=str(tmp_path / "a"), **kw)
    by_rows = ctxleak.influence(chat_lm, str(rows), prompt_messages=str(prompt),
                                output=str(tmp_path / "b"), **kw)
    assert by_spans.summary["traces"] == {"answers": 2, "retriever_only": 1}
    assert [r["passage_ids"] for r in by_spans.records] == [["kb-1", "kb-2"],
                                                            ["kb-3", "kb-1", "kb-2"]]
    assert "traces" not in by_rows.summary
    # one app prompt, as scored: the chat template's text with the slots
    (template,) = by_spans.provenance["app_prompt_templates"]
    assert by_rows.provenance["app_prompt_templates"] == [template]
    assert template.startswith("<bos>summary : answer the question . {{ yes }} \nquestion : "
                               "document : {context} \n question : {query}")
    for r, s in zip(by_spans.records, by_rows.records):
        assert (r["prompt_source"], s["prompt_source"]) == ("app messages", "app template")
        assert r["passage_ids"] == s["passage_ids"]  # the spans' document.id
        assert r["response_ids"] == s["response_ids"]
        assert abs(r["influence"] - s["influence"]) < 1e-6
        assert np.allclose(r["passage_influence"], s["passage_influence"], atol=1e-6, rtol=0)
        assert np.allclose(r["token_influence"], s["token_influence"], atol=1e-6, rtol=0)


def _logp(lm, prompt, response):
    """log p(y_t | prompt, y_<t) for each response token, forwarded in float64 from scratch."""
    model = lm.model.double() if next(lm.model.parameters()).dtype != torch.float64 \
        else lm.model
    ids = torch.tensor([list(prompt) + list(response)])
    with torch.no_grad():
        logits = model(ids).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    n = len(prompt)
    return np.array([float(logp[n - 1 + t, tok]) for t, tok in enumerate(response)])


def test_one_answer_recomputed_by_hand_under_the_apps_messages(logs, tmp_path):
    lm = tiny_llama()
    lm.tokenizer.chat_template = CHAT
    spans, _, _ = logs
    res = ctxleak.influence(lm, str(spans), lambda_=1.0, temperature=1.0, min_new_tokens=0,
                            max_new_tokens=4, control=False, progress=False,
                            output=str(tmp_path / "run"))
    record = next(r for r in res.records if r["id"] == "t2")
    assert record["logged_temperature"] == 0.0 and record["prompt_source"] == "app messages"
    query, answer, docs = TURNS[1][1], TURNS[1][2], [DOCS[j][1] for j in TURNS[1][3]]
    response = lm.encode(answer)
    assert record["response_ids"] == response

    def under(texts):
        return _logp(lm, _chat_ids(lm, _messages("\n\n".join(texts), query)), response)

    full = under(docs)
    assert abs(record["influence"] - np.abs(full - under([])).sum()) < 1e-6
    for j in range(len(docs)):
        without = under([d for k, d in enumerate(docs) if k != j])
        assert abs(record["passage_influence"][j] - np.abs(full - without).sum()) < 1e-6


def test_a_log_of_retriever_traces_only_is_one_line_naming_the_file(tmp_path):
    path = _write(tmp_path / "shown.jsonl", [*_shown("s1", "rome ?", [2]),
                                             *_shown("s2", "paris ?", [0])])
    with pytest.raises(InputError) as info:
        load_log(str(path), log_format="openinference")
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "2 retriever-only traces" in message and "no trace has an LLM span" in message


def test_app_prompt_required_and_a_span_without_messages_names_the_trace(tmp_path):
    path = _write(tmp_path / "spans.jsonl", _trace(*TURNS[0], messages=False))
    (plain,), _ = load_log(str(path))  # by default: ctxleak's template, said in the record
    assert plain.prompt.source == "ctxleak template" and plain.prompt.messages is None
    with pytest.raises(InputError) as info:
        load_log(str(path), app=AppPromptChoice(use=True))
    message = str(info.value)
    assert "\n" not in message and "'t1'" in message and "llm.input_messages" in message
    assert info.value.field == "llm.input_messages"
    # --no-app-prompt: the trace's messages are not used
    (off,), _ = load_log(str(path), app=AppPromptChoice(use=False))
    assert off.prompt.source == "ctxleak template"


def test_a_document_not_in_the_messages_names_the_trace_document_and_field(tmp_path):
    spans = _trace(*TURNS[0])
    spans[1]["attributes"]["retrieval.documents.1.document.content"] = "madrid is in spain ."
    path = _write(tmp_path / "spans.jsonl", spans)
    with pytest.raises(InputError) as info:
        load_log(str(path))
    message = str(info.value)
    assert "\n" not in message and "'t1'" in message and "'kb-2'" in message
    assert info.value.field == "llm.input_messages.N.message.content"


def test_system_prompt_alone_wraps_the_run_template(chat_lm, logs):
    _, rows, _ = logs
    examples, _ = load_log(str(rows), app=AppPromptChoice(system_prompt="answer {briefly}"))
    assert examples[0].prompt.messages == (("system", "answer {{briefly}}"),
                                           ("user", "Document: {context}. {query}"))
    parts = prompt_parts(chat_lm, examples[0])[0]
    context = "\n\n".join(d.text for d in examples[0].documents)
    expected = _chat_ids(chat_lm, [
        {"role": "system", "content": "answer {briefly}"},
        {"role": "user", "content": f"Document: {context}. {examples[0].query}"}])
    assert parts.full == expected


@pytest.mark.parametrize("value, field, words", [
    ([{"role": "user"}], "[0].content", "missing"),
    ([{"role": "user", "content": "no slot"}], None, "{context} exactly once"),
    ([{"role": "user", "content": "{context} {other}"}], "[0].content", "unknown slot {other}"),
    ("{}", None, "non-empty list"),
])
def test_a_bad_prompt_file_names_the_file_and_field(tmp_path, value, field, words):
    path = tmp_path / "prompt.json"
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    with pytest.raises(InputError) as info:
        load_prompt_messages(str(path))
    assert info.value.file == str(path) and info.value.field == field
    assert words in str(info.value) and "\n" not in str(info.value)


def test_the_options_are_checked_and_without_them_nothing_changes(llama_lm, logs):
    with pytest.raises(ConfigError, match="app_prompt=False"):
        ctxleak.influence(llama_lm, "demo", app_prompt=False, system_prompt="x")
    _, rows, _ = logs
    examples, traces = load_log(str(rows))
    assert traces is None and all(ex.prompt is None for ex in examples)
    with pytest.raises(ConfigError, match="has no chat template"):
        prompt_parts(llama_lm, load_log(str(rows), app=AppPromptChoice(
            system_prompt="be brief"))[0][0])


def test_a_greedy_log_is_scored_at_t1_unless_a_temperature_is_given(chat_lm, logs, tmp_path):
    spans, _, _ = logs
    with pytest.warns(UserWarning, match="drawn greedily"):
        res = ctxleak.influence(chat_lm, str(spans), max_new_tokens=2, min_new_tokens=0,
                                control=False, progress=False, output=str(tmp_path / "a"))
    assert {r["temperature"] for r in res.records} == {1.0}
    assert res.summary["temperature_note"].startswith("2 answers logged at T = 0 (greedy); "
                                                      "scored at T = 1")
    given = ctxleak.influence(chat_lm, str(spans), temperature=0.5, max_new_tokens=2,
                              min_new_tokens=0, control=False, progress=False,
                              output=str(tmp_path / "b"))
    assert {r["temperature"] for r in given.records} == {0.5}
    assert "scored at T = 0.5:" in given.records[0]["temperature_note"]


def test_cli_flags(tiny_dir, logs, tmp_path, capsys):
    from conftest import run_cli

    spans, rows, _ = logs
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "user", "content": 3}]))
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(rows),
                            "--prompt-messages", str(bad)], capsys)
    assert code != 0 and str(bad) in err and "[0].content" in err
    no_messages = _write(tmp_path / "plain.jsonl", _trace(*TURNS[0], messages=False))
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(no_messages),
                            "--app-prompt", "--output", str(tmp_path / "x")], capsys)
    assert code != 0 and "'t1'" in err and "llm.input_messages" in err
    # the tiny model has no chat template: --no-app-prompt scores under ctxleak's template
    out = tmp_path / "run"
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(spans),
                            "--no-app-prompt", "--max-new-tokens", "2", "--temperature", "1",
                            "--output", str(out)], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert {r["prompt_source"] for r in records} == {"ctxleak template"}
    assert json.loads((out / "results.json").read_text())["summary"]["traces"] == {
        "answers": 2, "retriever_only": 1}


def test_the_report_and_console_say_what_the_log_was(chat_lm, logs, tmp_path, capsys):
    spans, _, _ = logs
    res = ctxleak.influence(chat_lm, str(spans), temperature=1.0, max_new_tokens=2,
                            min_new_tokens=0, control=False, progress=False,
                            output=str(tmp_path / "run"))
    capsys.readouterr()
    res.show(plain=True)
    out = capsys.readouterr().out
    assert "traces: 2 answers scored (traces with an LLM span); 1 retriever-only" in out
    assert "prompt: 2 answers scored under the messages the app sent" in out
    assert "temperature: 2 answers logged at T = 0 (greedy); scored at T = 1" in out
    page = (tmp_path / "run" / "report.html").read_text()
    assert "1 retriever-only traces" in page and "the messages the app sent" in page


BPE_CHAT = ("{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>"
            "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


def test_by_hand_under_a_tokenizer_that_merges_across_the_documents_edges(logs, tmp_path):
    """The same recomputation with a byte-pair tokenizer whose tokens run across a document's
    end and the text after it: each prompt without a document is its own text tokenised whole,
    not the full prompt's ids with some removed."""
    texts = []
    for _, query, answer, docs in TURNS:
        sent = _messages("\n\n".join(DOCS[j][1] for j in docs), query)
        texts.append("".join(f"<{m['role']}>{m['content']}</s>" for m in sent) + answer)
    lm = tiny_bpe_llama(texts, BPE_CHAT, vocab_size=90, alphabet="".join(texts))
    spans, _, _ = logs
    res = ctxleak.influence(lm, str(spans), lambda_=1.0, temperature=1.0, min_new_tokens=0,
                            max_new_tokens=4, control=False, progress=False,
                            output=str(tmp_path / "run"))
    (example,) = [ex for ex in load_log(str(spans))[0] if ex.id == "t2"]
    parts = prompt_parts(lm, example)[0]
    spans_of = passage_spans(lm, example, len(parts.context))
    record = next(r for r in res.records if r["id"] == "t2")
    query, answer, docs = TURNS[1][1], TURNS[1][2], [DOCS[j][1] for j in TURNS[1][3]]
    response = lm.encode(answer)
    assert record["response_ids"] == response and record["prompt_source"] == "app messages"

    def ids(texts):
        return _chat_ids(lm, _messages("\n\n".join(texts), query))

    full = _logp(lm, ids(docs), response)
    assert parts.full == ids(docs) and parts.empty == ids([])
    merged = 0
    for j, (a, b) in enumerate(spans_of):
        without = ids([d for k, d in enumerate(docs) if k != j])
        merged += without != parts.with_context(parts.context[:a] + parts.context[b:])
        assert abs(record["passage_influence"][j]
                   - np.abs(full - _logp(lm, without, response)).sum()) < 1e-6
    assert merged  # this tokenizer does merge across an edge: removing ids would not do
    assert abs(record["influence"] - np.abs(full - _logp(lm, ids([]), response)).sum()) < 1e-6


def test_a_decoy_under_the_apps_messages_by_hand(logs, tmp_path):
    """The per-document control under the app's prompt, with a byte-pair tokenizer that merges
    across a document's edges: the decoy put in passage j's place gives Σ_t |log p(y_t | the
    app's messages with the decoy) − log p(y_t | without passage j)|, both tokenised whole."""
    texts = []
    for _, query, answer, docs in TURNS:
        sent = _messages("\n\n".join(DOCS[j][1] for j in docs), query)
        texts.append("".join(f"<{m['role']}>{m['content']}</s>" for m in sent) + answer)
    lm = tiny_bpe_llama(texts, BPE_CHAT, vocab_size=90, alphabet="".join(texts))
    spans, _, _ = logs
    res = ctxleak.influence(lm, str(spans), lambda_=1.0, temperature=1.0, min_new_tokens=0,
                            max_new_tokens=4, progress=False, output=str(tmp_path / "run"))
    record = next(r for r in res.records if r["id"] == "t1")  # kb-3 is the only other document
    query, docs = TURNS[0][1], [DOCS[j][1] for j in TURNS[0][3]]
    response = record["response_ids"]

    def under(texts):
        return _logp(lm, _chat_ids(lm, _messages("\n\n".join(texts), query)), response)

    assert record["passage_decoy_ids"] == ["kb-3", "kb-3"]
    for j in range(len(docs)):
        placed = [DOCS[2][1] if k == j else d for k, d in enumerate(docs)]
        without = [d for k, d in enumerate(docs) if k != j]
        by_hand = np.abs(under(placed) - under(without)).sum()
        # the record keeps 6 decimals (up to 5e-7 of rounding) of float32 forward passes
        # batched otherwise than these (measured: 1.15e-6 apart on this 2-core CPU)
        assert abs(record["passage_decoy_influence"][j] - by_hand) < 2e-6
