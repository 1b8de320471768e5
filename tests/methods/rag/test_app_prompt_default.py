"""The app's prompt on the default model's tokenizer (Def. 3.1 of "Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models" with S = one retrieved document, under the
messages the app sent): the prompt with every document, without each one and without any are
exactly the chat template's own tokens of those messages; tokenising the template's pieces and
the slots apart (ctxleak's own template's way) would not be."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from ctxleak.engine.chat_prompt import as_template, render_messages
from ctxleak.engine.prompts import build_prompt
from ctxleak.methods.influence.data import load_log, passage_spans, prompt_parts
from ctxleak.methods.rag.app_prompt import AppPromptChoice, load_prompt_messages

pytestmark = pytest.mark.integration

DOCS = [("hr-1", "Payroll record. Employee: Helena Wirth, ID NW-20417. Salary: $142,000."),
        ("it-2", "The VPN PIN for the lab is 4417 {rotate monthly}."),
        ("pub-3", "Book flights at least 14 days ahead. Hotels up to $180 a night.")]
#: Hand-made prompts: a space before the documents, a literal brace, the query after a colon.
PROMPTS = [
    [{"role": "system", "content": "You are Northwind's assistant {{internal}}."},
     {"role": "user", "content": "Context: {context}\n\nQuestion: {query}"}],
    [{"role": "user", "content": "Answer from these notes only.\n\n{context}\nQ: {query} A:"}],
]
QUERY = "What is Helena Wirth's salary?"
RAG_AUDIT = Path(str(resources.files("ctxleak") / "data" / "demo" / "rag_audit"))


def _ids(lm, messages):
    ids = lm.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def _filled(prompt, texts, query):
    return [{"role": m["role"], "content": m["content"].format(context="\n\n".join(texts),
                                                                query=query)} for m in prompt]


def _check_exact(lm, example, prompt):
    """Every prompt of ``example``: the chat template's ids of the messages it stands for."""
    parts = prompt_parts(lm, example)[0]
    texts = [d.text for d in example.documents]
    assert parts.full == _ids(lm, _filled(prompt, texts, example.query))
    assert parts.empty == _ids(lm, _filled(prompt, [], example.query))
    for j, (a, b) in enumerate(passage_spans(lm, example, len(parts.context))):
        rest = [t for k, t in enumerate(texts) if k != j]
        assert parts.without(a, b) == _ids(lm, _filled(prompt, rest, example.query)), j
    return parts


@pytest.mark.parametrize("prompt", PROMPTS)
def test_hand_made_prompts_are_the_chat_templates_own_ids(default_lm, tmp_path, prompt):
    rows = [{"id": f"t{k}", "query": QUERY, "response": "It is $142,000.",
             "documents": [{"id": i, "text": t} for i, t in DOCS[k:] + DOCS[:k]]}
            for k in range(3)]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples, _ = load_log(str(path), app=AppPromptChoice(load_prompt_messages(prompt)))
    apart = 0
    for example in examples:
        parts = _check_exact(default_lm, example, prompt)
        template = as_template(render_messages(default_lm, example.prompt.messages))
        piecewise = build_prompt(default_lm, template, {"context": example.context,
                                                        "query": example.query}, chat=False)
        apart += list(piecewise.ids) != parts.full
    assert apart == len(examples)  # the pieces apart split " What" at the query: not the app's


@pytest.mark.skipif(not (RAG_AUDIT / "spans.jsonl").is_file(),
                    reason="the bundled RAG audit example is not in this checkout")
def test_the_bundled_examples_prompts_by_both_routes(default_lm):
    prompt = json.loads((RAG_AUDIT / "prompt.json").read_text())
    spans, traces = load_log(str(RAG_AUDIT / "spans.jsonl"))
    rows, _ = load_log(str(RAG_AUDIT / "log.jsonl"),
                       app=AppPromptChoice(load_prompt_messages(prompt)))
    assert traces["retriever_only"] >= 6 and traces["answers"] == len(spans) == len(rows)
    for a, b in zip(spans, rows):
        assert (a.id, a.prompt.source, b.prompt.source) == (b.id, "app messages", "app template")
        pa, pb = _check_exact(default_lm, a, prompt), prompt_parts(default_lm, b)[0]
        assert (pa.full, pa.empty, pa.exact) == (pb.full, pb.empty, pb.exact)
