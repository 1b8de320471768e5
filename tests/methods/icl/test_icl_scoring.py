"""ICLInf on tiny models against a brute-force computation: one full forward pass per prompt,
prompts built as plain strings, losses by explicit loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.tiny_models import tiny_llama

from ctxleak.engine.batching import BatchPolicy, using
from ctxleak.errors import ConfigError
from ctxleak.methods.icl import (
    ICLConfig,
    ICLTask,
    LabeledExample,
    LabelScorer,
    PromptBuilder,
    draw_exemplars,
    get_format,
    measure_query,
    query_prompts,
    run_iclinf,
    summarize_records,
)

FMT = get_format("custom", instruction="answer the question : {labels} .\n",
                 exemplar="question : {text} answer : {label}\n",
                 query="question : {text} answer :")
TRAIN_TEXTS = ["the capital of france is paris", "rome is in italy", "berlin is a city",
               "the doctor said yes", "a patient of the doctor", "madrid is the capital of spain",
               "the news report was one page", "two and three is four", "email the document",
               "phone the patient at the address"]
TEST_TEXTS = ["the capital of italy is rome", "the doctor and the patient", "one two three"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread (and do not stall on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_task(labels=("yes", "no", "one")) -> ICLTask:
    k = len(labels)
    train = [LabeledExample(t, labels[i % k], i % k, "train.jsonl", i + 1)
             for i, t in enumerate(TRAIN_TEXTS)]
    test = [LabeledExample(t, labels[i % k], i % k, "test.jsonl", i + 1)
            for i, t in enumerate(TEST_TEXTS)]
    return ICLTask(train=train, test=test, labels=tuple(labels), fmt=FMT)


# --- brute force -------------------------------------------------------------------------------

_NAIVE: dict[tuple, object] = {}


def naive_next_logp(lm, text: str) -> torch.Tensor:
    """Full forward pass on the tokenised string (the tokenizer adds its own BOS); memoised so
    that the loops below stay cheap."""
    key = (id(lm), text)
    if key not in _NAIVE:
        ids = lm.tokenizer(text)["input_ids"]
        with torch.no_grad():
            logits = lm.model(torch.tensor([ids])).logits[0, -1].double()
        _NAIVE[key] = torch.log_softmax(logits, -1)
    return _NAIVE[key]


def naive_sequence_logp(lm, text: str, label_ids: list[int]) -> float:
    key = (id(lm), text, tuple(label_ids))
    if key not in _NAIVE:
        ids = lm.tokenizer(text)["input_ids"] + label_ids
        with torch.no_grad():
            logp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].double(), -1)
        n = len(ids) - len(label_ids)
        _NAIVE[key] = sum(logp[n - 1 + t, tok].item() for t, tok in enumerate(label_ids))
    return _NAIVE[key]


def prompt_text(task, exemplars, query_text):
    text = FMT.instruction_text(task.labels)
    for e in exemplars:
        text += FMT.exemplar.format(text=e.text, label=e.label)
    return text + FMT.query.format(text=query_text)


def naive_distributions(lm, task, exemplars, query_text, mode, vocab=False):
    """log A (labels, renormalised) or the full vocabulary distribution, by loops."""
    text = prompt_text(task, exemplars, query_text)
    if vocab:
        return naive_next_logp(lm, text).numpy()
    scores = []
    for label in task.labels:
        ids = lm.tokenizer(" " + label, add_special_tokens=False)["input_ids"]
        if mode == "first-token":
            scores.append(naive_next_logp(lm, text)[ids[0]].item())
        else:
            scores.append(naive_sequence_logp(lm, text, ids))
    total = math.log(sum(math.exp(s) for s in scores))
    return np.array([s - total for s in scores])


def naive_calibrated(lm, task, exemplars, query_text, mode, vocab, eps):
    p = np.exp(naive_distributions(lm, task, exemplars, query_text, mode, vocab))
    cfs = [np.exp(naive_distributions(lm, task, exemplars, cf, mode, vocab))
           for cf in ("N/A", "", "[MASK]")]
    p_cf = sum(cfs) / 3
    q = np.array([p[y] / (p_cf[y] + eps) for y in range(len(p))])
    return np.log(q / q.sum())


def brute_force_query(lm, task, n_shots, j, seed, mode, space, calibrated, eps):
    picked = draw_exemplars(len(task.train), n_shots, seed, j)
    exemplars = [task.train[i] for i in picked]
    query_text = task.test[j].text

    def A(ex):
        if calibrated:
            return naive_calibrated(lm, task, ex, query_text, mode, space == "vocab", eps)
        return naive_distributions(lm, task, ex, query_text, mode, space == "vocab")

    full = A(exemplars)
    losses = []
    for i in range(n_shots):
        loo = A(exemplars[:i] + exemplars[i + 1:])
        worst = 0.0
        for y in range(len(full)):
            worst = max(worst, abs(full[y] - loo[y]))
        losses.append(worst)
    best = 0.0
    for v in losses:
        best = max(best, v)
    return full, losses, best


@pytest.mark.parametrize("mode", ["first-token", "full"])
def test_matches_brute_force_on_every_variant(tiny_lm, mode):
    labels = ("yes", "no", "one") if mode == "first-token" else ("capital city", "capital of "
                                                                  "france", "no")
    task = make_task(labels)
    eps = 1e-3
    config = ICLConfig(output_spaces=("labels", "vocab"), calibration=(False, True),
                       label_scoring=mode, calibration_eps=eps)
    records = run_iclinf(tiny_lm, task, [3], config=config, queries=2, seed=7)
    assert [r["query_index"] for r in records] == [0, 1]
    for r in records:
        for space in ("labels", "vocab"):
            for cal in (False, True):
                key = space + ("_calibrated" if cal else "")
                full, losses, best = brute_force_query(tiny_lm, task, 3, r["query_index"], 7,
                                                       mode, space, cal, eps)
                v = r["variants"][key]
                np.testing.assert_allclose(v["loss_by_position"], losses, atol=2e-4)
                assert v["iclinf"] == pytest.approx(best, abs=2e-4)
                assert v["iclinf"] == max(v["loss_by_position"])
                if space == "labels":
                    np.testing.assert_allclose(v["dist"], np.exp(full), rtol=1e-3, atol=1e-6)
                    assert v["prediction"] == task.labels[int(np.argmax(full))]
                    assert v["correct"] == (v["prediction"] == r["label"])
    summary = summarize_records(records)["3"]
    assert set(summary) == {"labels", "labels_calibrated", "vocab", "vocab_calibrated"}
    assert summary["labels"]["iclinf_mean"] == pytest.approx(
        np.mean([r["variants"]["labels"]["iclinf"] for r in records]))


def test_leave_one_out_prompts_are_exact_deletions(tiny_lm):
    task = make_task()
    builder = PromptBuilder(tiny_lm, FMT, task.labels)
    exemplars = [(i, task.train[i].text, task.train[i].label) for i in (4, 0, 7)]
    qp = query_prompts(builder, exemplars, task.test[0].text, calibrate=True)
    blocks = [builder.exemplar_ids(i, t, lab)[0] for i, t, lab in exemplars]
    head = list(tiny_lm.bos_ids) + builder.instruction_ids()
    query = builder.query_ids(task.test[0].text)[0]
    assert qp.full == head + blocks[0] + blocks[1] + blocks[2] + query
    assert qp.loo[1] == head + blocks[0] + blocks[2] + query
    assert len(qp.content_free) == 4 and all(len(g) == 3 for g in qp.content_free)
    assert qp.content_free[2][0] == head + blocks[0] + blocks[2] + builder.query_ids("N/A")[0]
    assert qp.ordered()[0] == qp.full


def test_prefix_reuse_does_not_change_the_numbers(tiny_lm):
    task = make_task()
    kwargs = dict(output_spaces=("labels", "vocab"), calibration=(False, True))
    a = run_iclinf(tiny_lm, task, [4], config=ICLConfig(**kwargs), queries=2, seed=1)
    b = run_iclinf(tiny_lm, task, [4], config=ICLConfig(reuse_prefix=False, **kwargs),
                   queries=2, seed=1)
    for ra, rb in zip(a, b):
        for key in ra["variants"]:
            np.testing.assert_allclose(ra["variants"][key]["loss_by_position"],
                                       rb["variants"][key]["loss_by_position"], atol=1e-5)


def context_blind_llama():
    """A tiny Llama whose attention and MLP outputs are zero: each next-token distribution
    depends only on the last token, so removing an exemplar changes nothing."""
    lm = tiny_llama(seed=3)
    with torch.no_grad():
        for layer in lm.model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return lm


def test_exemplar_that_changes_nothing_has_zero_loss():
    lm = context_blind_llama()
    task = make_task()
    config = ICLConfig(output_spaces=("labels", "vocab"), calibration=(False, True))
    for r in run_iclinf(lm, task, [1, 3], config=config, queries=3, seed=0):
        for v in r["variants"].values():
            assert v["loss_by_position"] == [0.0] * r["shots"]
            assert v["iclinf"] == 0.0


def test_labels_sharing_a_first_token_stop_with_a_clear_error(tiny_lm):
    with pytest.raises(ConfigError) as err:
        LabelScorer(tiny_lm, ["capital city", "capital country", "no"], "first-token")
    message = str(err.value)
    assert "'capital city'" in message and "'capital country'" in message
    assert "label_scoring='full'" in message
    scorer = LabelScorer(tiny_lm, ["capital city", "capital country", "no"], "full")
    assert scorer.max_label_tokens == 2
    with pytest.raises(ConfigError, match="same tokens"):
        LabelScorer(tiny_lm, ["capital city", "capital  city"], "full")


def test_records_hold_the_per_query_fields(gpt2_lm):
    task = make_task()
    builder = PromptBuilder(gpt2_lm, FMT, task.labels)
    scorer = LabelScorer(gpt2_lm, task.labels)
    rec = measure_query(gpt2_lm, task, builder, scorer, ICLConfig(calibration=(True,)), 2, 1, 0)
    assert rec["exemplar_indices"] == draw_exemplars(len(task.train), 2, 0, 1)
    v = rec["variants"]["labels_calibrated"]
    assert len(v["loo_dists"]) == 2 and len(v["dist"]) == 3 and len(v["content_free"]) == 3
    assert sum(v["dist"]) == pytest.approx(1.0, abs=1e-5)
    assert rec["label"] == task.test[1].label and rec["source"] == "test.jsonl:2"
    assert set(v) >= {"loss_by_position", "iclinf", "prediction", "correct", "max_at_label"}


def test_prompt_longer_than_the_window_is_refused(gpt2_lm):
    task = make_task()
    long_train = [LabeledExample(" ".join(["the"] * 120), "yes", 0, "train.jsonl", i + 1)
                  for i in range(3)]
    task = ICLTask(train=long_train, test=task.test, labels=task.labels, fmt=FMT)
    builder = PromptBuilder(gpt2_lm, FMT, task.labels, max_text_tokens=None)
    scorer = LabelScorer(gpt2_lm, task.labels)
    with pytest.raises(ConfigError, match="window"):
        measure_query(gpt2_lm, task, builder, scorer, ICLConfig(), 3, 0, 0)
    builder = PromptBuilder(gpt2_lm, FMT, task.labels, max_text_tokens=40)
    rec = measure_query(gpt2_lm, task, builder, scorer, ICLConfig(), 3, 0, 0)
    assert rec["truncated_texts"] == 3


@pytest.mark.parametrize("mode", ["first-token", "full"])
def test_queries_measured_together_equal_one_at_a_time(tiny_lm, mode):
    """Issue 13: the full and leave-one-out prompts of several queries (different shots, their
    own exemplars) in one engine call give each query's own record."""
    from ctxleak.methods.icl.pipeline import measure_queries

    labels = ("yes", "no", "one") if mode == "first-token" else ("capital city", "no", "one")
    task = make_task(labels)
    config = ICLConfig(output_spaces=("labels", "vocab"), calibration=(False, True),
                       label_scoring=mode)
    builder = PromptBuilder(tiny_lm, FMT, task.labels)
    scorer = LabelScorer(tiny_lm, task.labels, mode, builder.label_prefix)
    items = [(3, 0), (2, 1), (4, 2), (3, 1)]
    with using(tiny_lm, BatchPolicy(batch_size=3)):
        together = measure_queries(tiny_lm, task, builder, scorer, config, items, 5)
    for (n, j), got in zip(items, together):
        alone = measure_query(tiny_lm, task, builder, scorer, config, n, j, 5)
        assert (got["shots"], got["query_index"]) == (n, j)
        assert got["exemplar_indices"] == alone["exemplar_indices"]
        for key, v in alone["variants"].items():
            np.testing.assert_allclose(got["variants"][key]["loss_by_position"],
                                       v["loss_by_position"], atol=1e-5)
            assert got["variants"][key]["prediction"] == v["prediction"]
