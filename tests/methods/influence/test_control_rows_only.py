"""The control and the per-document decoys of answers drawn elsewhere (a RAG log), scored
in-process ("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models",
Def. 3.1-3.2): only the prompt with the other context goes through the model, since each
answer's no-context log-probs are its record's already. The rows are bit for bit those of the
straightforward scoring, which also computed each answer's no-context logits and threw them
away; the control's cost counts one pass per control or decoy prompt (and, at λ ≠ 1, one
no-context pass per answer, which the mixture needs)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import ctxleak
from ctxleak.methods.influence import ngrams
from ctxleak.methods.influence.answers import AnswersToScore
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import (
    Job,
    _score_in_process,
    _score_under,
    example_parts,
)
from ctxleak.methods.influence.setting import InfluenceOptions, Setting

#: Word-level texts the tiny tokenizer knows (others would all read as one unknown token).
DOCS = ["the capital of france is paris and the capital of italy is rome .",
        "the doctor said the patient was in berlin with a report .",
        "the email address of the patient is in the document .",
        "madrid is the capital city of spain , the news said ."]
ANSWERS = ["paris is the capital of france .", "the patient was in berlin .",
           "it is in the document .", "madrid , spain ."]
QUERIES = ["what is the capital of france ?", "where was the patient ?",
           "where is the email address ?", "what is the capital of spain ?"]
LOG = [{"id": f"t{k}", "query": QUERIES[k], "response": ANSWERS[k],
        "documents": [{"id": f"d{k}", "text": DOCS[k]},
                      {"id": f"d{(k + 1) % 4}", "text": DOCS[(k + 1) % 4]}]}
       for k in range(4)]


def _scored_prompts(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The prompts every scoring call of :mod:`ngrams` forwards from now on."""
    seen: list[list[int]] = []
    real = ngrams.continuation_logits

    def spy(lm, prompts, *args, **kwargs):
        seen.extend(list(p) for p in prompts)
        return real(lm, prompts, *args, **kwargs)

    monkeypatch.setattr(ngrams, "continuation_logits", spy)
    return seen


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_control_rows_are_the_straightforward_ones_without_the_no_context_pass(
        llama_lm, lam, monkeypatch) -> None:
    examples = load_examples(LOG)
    options = InfluenceOptions(min_new_tokens=1)
    jobs = [Job(ex, Setting.cid(lam, 0.8), 0) for ex in examples]
    answers = [ex.logged_ids(llama_lm) for ex in examples]
    owners = [0, 0, 1, 2, 3]  # answer 0 under two other contexts
    placed = [replace(examples[k], context=examples[c].context, passages=examples[c].passages,
                      documents=examples[c].documents)  # its query, another's documents
              for k, c in zip(owners, [1, 2, 3, 0, 1])]
    others = [example_parts(llama_lm, ex, jobs[0][1], options)[0] for ex in placed]
    straightforward = _score_in_process(llama_lm, AnswersToScore(
        others, [(answers[k], False) for k in owners], lam=[lam] * len(owners),
        temperature=[0.8] * len(owners), min_new_tokens=1, ngram=None, stride=None,
        ids=[examples[k].id for k in owners]))
    seen = _scored_prompts(monkeypatch)
    rows, requests = _score_under(llama_lm, jobs, answers, owners, others, options,
                                  _score_in_process)
    assert len(requests) == len(owners)
    for row, ledger in zip(rows, straightforward.ledgers):
        expected = np.array([e.logp_context for e in ledger.entries], dtype=np.float64)
        assert row.dtype == np.float64 and np.array_equal(row, expected)  # bit for bit
    empties = [p.empty for p in others]
    no_context = [p for p in seen if p in empties]
    # λ = 1: the mixture never reads z(·|∅); λ < 1: one pass per distinct answer needs it
    assert len(no_context) == (0 if lam == 1 else len(set(owners)))


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_the_control_cost_counts_the_passes_it_runs(llama_lm, lam, tmp_path) -> None:
    res = ctxleak.influence(llama_lm, LOG, lambda_=lam, temperature=1.0, min_new_tokens=0,
                            max_new_tokens=8, progress=False, output=tmp_path / "run")
    cost = res.summary["settings"][0]["control"]["cost"]
    controls = sum(len(r["control_ids"]) for r in res.records)
    decoys = sum(v is not None for r in res.records for v in r["passage_decoy_influence"])
    assert cost["decoy_forward_passes"] == decoys == 8
    assert cost["forward_passes"] == controls + decoys + (0 if lam == 1 else len(LOG))
