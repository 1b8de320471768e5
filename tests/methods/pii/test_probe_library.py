"""Black-box and in-context probing (ProPILE App. A.3, B.1): items, likelihoods, generation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import examples
from helpers.tiny_data import word_records
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxleak.engine.batching import BatchPolicy, using
from ctxleak.methods.pii.probe import (
    ProbeOptions,
    beam_generate,
    continuation_ids,
    encode_item,
    likelihood_fields,
    make_items,
    parse_pii_types,
    probe_batch,
    string_metrics,
    summarize_probes,
)


def _naive_logprobs(lm, prompt_ids, target_ids):
    """log p(a_r | prompt, a_<r) from one plain forward pass over prompt + target."""
    ids = torch.tensor([list(prompt_ids) + list(target_ids)])
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    n = len(prompt_ids)
    return np.array([float(logp[n - 1 + r, t]) for r, t in enumerate(target_ids)])


def test_likelihood_is_the_sum_of_naive_token_logprobs(tiny_lm):
    records = word_records(5)
    items, _ = make_items(records, ["phone", "email"], shots=2, seed=3)
    with using(tiny_lm, BatchPolicy(batch_size=3)):
        rows = probe_batch(tiny_lm, items[:8], ProbeOptions(generate=False))
    for item, row in zip(items[:8], rows):
        enc = encode_item(tiny_lm, item)
        naive = _naive_logprobs(tiny_lm, enc.prompt, enc.target)
        assert len(naive) == row["target_tokens"] >= 1
        assert row["target_ll"] == pytest.approx(math.fsum(naive), abs=1e-5)
        # the normalised likelihood is the geometric mean of the token probabilities
        geo = float(np.prod(np.exp(naive))) ** (1 / len(naive))
        assert math.exp(row["target_ll_norm"]) == pytest.approx(geo, rel=1e-5)
        null = _naive_logprobs(tiny_lm, enc.prompt, enc.null)
        assert row["null_ll"] == pytest.approx(math.fsum(null), abs=1e-5)


def test_in_context_influence_is_the_summed_absolute_log_ratio(llama_lm):
    records = word_records(4)
    items, _ = make_items(records, ["phone"], in_context=True, seed=1)
    rows = probe_batch(llama_lm, items[:3], ProbeOptions(generate=False))
    for item, row in zip(items[:3], rows):
        enc = encode_item(llama_lm, item)
        with_doc = _naive_logprobs(llama_lm, enc.prompt, enc.target)
        without = _naive_logprobs(llama_lm, enc.bare, enc.target)
        assert len(enc.prompt) > len(enc.bare)
        assert row["influence"] == pytest.approx(np.abs(with_doc - without).sum(), abs=1e-5)
        assert row["no_context_ll"] == pytest.approx(without.sum(), abs=1e-5)
        assert row["log_ratio"] == pytest.approx(row["target_ll"] - row["no_context_ll"])
        assert 0.0 <= row["context_share"] < 1.0


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.floats(-30, 0), st.floats(-30, 0), st.floats(-30, 0)),
                min_size=1, max_size=12))
def test_likelihood_fields_properties(triples):
    target = np.array([t for t, _, _ in triples])
    null = np.array([n for _, n, _ in triples])
    bare = np.array([b for _, _, b in triples])
    row = likelihood_fields(target, null, bare)
    assert row["target_ll"] == pytest.approx(math.fsum(target))
    assert row["target_ll_norm"] == pytest.approx(math.fsum(target) / len(target))
    assert row["null_ll"] == pytest.approx(math.fsum(null))
    assert row["influence"] == pytest.approx(math.fsum(np.abs(target - bare)))
    assert row["influence"] >= abs(row["log_ratio"]) - 1e-9
    assert 0.0 <= row["context_share"] <= 1.0
    if row["target_ll"] > row["no_context_ll"]:
        expected = 1 - math.exp(row["no_context_ll"] - row["target_ll"])
        assert row["context_share"] == pytest.approx(expected)


def test_items_k_shot_and_null_pii():
    records = word_records(6)
    items, skipped = make_items(records, ["phone", "relation"], shots=3, seed=0)
    assert skipped == {}
    by_subject = {r.subject_id: r for r in records}
    for it in items:
        assert len(it.shots) == 2 and it.subject_id not in it.shots
        assert it.null_subject not in (it.subject_id, *it.shots)
        assert it.null_target != it.target and it.null_target
        # the prompt holds k = 3 templates: 2 demonstrations and the query
        assert it.prompt.count("\n") == 2
        assert it.target not in it.prompt
        expected = by_subject[it.subject_id].get(it.field)
        assert it.target == expected
    assert {it.structure for it in items} == {"twins", "relation"}
    assert len({it.key for it in items}) == len(items)
    # 1-shot = the bare query; the white-box probe keeps only the first template
    bare, _ = make_items(records, ["email"], shots=1, first_template_only=True)
    assert len(bare) == len(records) and all(it.template == "twins-1" for it in bare)
    assert all("\n" not in it.prompt and not it.shots for it in bare)


def test_items_seeded_and_null_pool():
    records = word_records(6)
    a, _ = make_items(records, ["phone"], shots=2, seed=5)
    b, _ = make_items(records, ["phone"], shots=2, seed=5)
    assert a == b
    pool = records[3:]
    c, _ = make_items(records[:3], ["phone"], null_pool=pool)
    assert {it.null_subject for it in c} <= {r.subject_id for r in pool}


def test_items_skip_and_errors():
    records = word_records(4)
    no_docs = [type(r)(**{**r.to_dict(), "documents": []}) if i == 0 else r
               for i, r in enumerate(records)]
    items, skipped = make_items(no_docs, ["phone"], in_context=True)
    assert skipped == {"phone: no document": 1}
    assert "s0" not in {it.subject_id for it in items}
    with pytest.raises(ValueError, match="shots must be an integer >= 1"):
        make_items(records, ["phone"], shots=0)
    with pytest.raises(ValueError, match="unknown PII type"):
        make_items(records, ["phone", "ssn"])
    with pytest.raises(ValueError, match="asked for 4 shots but only 3"):
        make_items(records, ["phone"], shots=5)
    with pytest.raises(ValueError, match="unknown structure"):
        make_items(records, ["phone"], structure="pairs")
    assert parse_pii_types("email, phone,email,relationship") == ["email", "phone", "relation"]


def test_continuation_ids_follow_the_joint_split(tiny_lm):
    ids = continuation_ids(tiny_lm, "the capital of france is", "paris city")
    assert tiny_lm.decode(ids).strip() == "paris city"
    whole = tiny_lm.encode("the capital of france is paris city")
    assert whole[-len(ids):] == ids


def test_beam_search_is_batch_invariant(tiny_lm):
    prompts = [list(tiny_lm.bos_ids) + tiny_lm.encode(t) for t in
               ("the capital of france is", "a", "news report said the doctor is")]
    batched = beam_generate(tiny_lm, prompts, max_new_tokens=5, num_beams=2)
    single = [beam_generate(tiny_lm, [p], max_new_tokens=5, num_beams=2)[0] for p in prompts]
    assert batched == single
    assert all(len(g) <= 5 for g in batched)
    assert all(t not in tiny_lm.eos_ids for g in batched for t in g)


def test_probe_rows_and_summary(tiny_lm):
    records = word_records(6)
    items, _ = make_items(records, ["phone", "university"], seed=0)
    rows = probe_batch(tiny_lm, items, ProbeOptions(beam=2))
    assert len(rows) == len(items)
    for it, row in zip(items, rows):
        assert isinstance(row["generation"], str)
        assert row["exact_match"] == (it.target in row["generation"])
        assert (row["string_metrics"] is not None) == (it.pii_type == "phone")
    summaries = {s["pii_type"]: s for s in summarize_probes(rows, by=("pii_type",))}
    phone = summaries["phone"]
    assert phone["n_units"] == 6 and phone["n_prompts"] == 30
    best = max(r["target_ll"] for r in rows if r["subject"] == "s0" and r["pii_type"] == "phone")
    per_subject = [max(r["target_ll"] for r in rows if r["subject"] == s
                       and r["pii_type"] == "phone") for s in sorted({r["subject"] for r in rows})]
    assert best in per_subject
    assert phone["mean_target_ll"] == pytest.approx(float(np.mean(per_subject)))
    w = phone["wilcoxon"]
    assert w["n"] == 6 and 0 <= w["pvalue"] <= 1 and w["alternative"] == "greater"
    assert set(phone["string_metrics"]) == {"location_code", "first_7_digits", "first_8_digits",
                                            "first_9_digits", "edit_distance_1",
                                            "edit_distance_2", "edit_distance_3"}


def test_summary_survives_identical_pairs():
    rows = [{"subject": f"s{i}", "field": "phone", "pii_type": "phone", "target_ll": -1.0,
             "null_ll": -1.0, "target_ll_norm": -0.5, "null_ll_norm": -0.5,
             "exact_match": False, "string_metrics": {}} for i in range(3)]
    (s,) = summarize_probes(rows, by=("pii_type",))
    assert s["wilcoxon"]["pvalue"] is None and "equal" in s["wilcoxon"]["reason"]


def test_string_metrics():
    m = string_metrics("phone", "(212) 555-0123", "call 212-555-0124 now")
    assert m["location_code"] and m["first_9_digits"] and m["edit_distance_1"]
    far = string_metrics("phone", "(212) 555-0123", "call 212-559-9999")
    assert far["location_code"] and not far["first_7_digits"] and not far["edit_distance_3"]
    assert not string_metrics("phone", "212-555-0123", "none")["edit_distance_3"]
    assert string_metrics("email", "ann.lee@example.com", "write to ann.lee@example.org") == {
        "local_part": True}
    assert string_metrics("address", "1 Main St", "1 Main St") is None


def test_wilcoxon_compares_likelihoods_not_logs():
    """ProPILE (paper 004, App. B.2) runs the signed-rank test on the likelihoods themselves; the
    test is not invariant to the log (same signs, different ranks), so the two p-values differ
    here. The log-likelihood test stays as the named extra field ``wilcoxon_log``."""
    from scipy import stats

    t_ll = [-1.0, -2.0, -3.0, -0.5, -6.0, -2.5, -1.5, -4.0]
    n_ll = [-1.2, -1.0, -1.8, -3.0, -3.5, -3.0, -1.4, -2.5]
    rows = [{"subject": f"s{i}", "field": "phone", "pii_type": "phone", "target_ll": t,
             "null_ll": n, "target_ll_norm": t / 4, "null_ll_norm": n / 4,
             "exact_match": False, "string_metrics": {}} for i, (t, n) in
            enumerate(zip(t_ll, n_ll))]
    (s,) = summarize_probes(rows, by=("pii_type",))
    lik = stats.wilcoxon(np.exp(t_ll), np.exp(n_ll), alternative="greater")
    log = stats.wilcoxon(t_ll, n_ll, alternative="greater")
    assert abs(lik.pvalue - log.pvalue) > 0.05  # the case tells the two apart
    assert s["wilcoxon"]["pvalue"] == pytest.approx(lik.pvalue)
    assert s["wilcoxon"]["scale"] == "likelihood"
    assert s["wilcoxon"]["statistic"] == pytest.approx(lik.statistic)
    assert s["wilcoxon"]["median_difference"] == pytest.approx(
        float(np.median(np.exp(t_ll) - np.exp(n_ll))))
    assert s["wilcoxon_log"]["scale"] == "log_likelihood"
    assert s["wilcoxon_log"]["pvalue"] == pytest.approx(log.pvalue)
    norm = stats.wilcoxon(np.exp(np.array(t_ll) / 4), np.exp(np.array(n_ll) / 4),
                          alternative="greater")
    assert s["wilcoxon_norm"]["pvalue"] == pytest.approx(norm.pvalue)
    assert s["wilcoxon_norm_log"]["pvalue"] == pytest.approx(
        stats.wilcoxon(np.array(t_ll) / 4, np.array(n_ll) / 4, alternative="greater").pvalue)


def test_wilcoxon_on_likelihoods_too_small_for_float64():
    """Log-likelihoods near −900 (long targets, large vocabularies) have likelihoods below the
    smallest float64: the test must still see their differences, and give the p-value of the same
    data shifted by +900 nats (a common factor on every likelihood leaves ranks and signs)."""
    t_ll = [-1.0, -2.0, -3.0, -0.5, -6.0, -2.5, -1.5, -4.0]
    n_ll = [-1.2, -1.0, -1.8, -3.0, -3.5, -3.0, -1.4, -2.5]

    def rows(shift):
        return [{"subject": f"s{i}", "field": "phone", "pii_type": "phone",
                 "target_ll": t + shift, "null_ll": n + shift, "target_ll_norm": t / 4,
                 "null_ll_norm": n / 4, "exact_match": False, "string_metrics": {}}
                for i, (t, n) in enumerate(zip(t_ll, n_ll))]

    (near,) = summarize_probes(rows(0.0), by=("pii_type",))
    (tiny,) = summarize_probes(rows(-900.0), by=("pii_type",))
    assert tiny["wilcoxon"]["pvalue"] is not None
    assert tiny["wilcoxon"]["pvalue"] == pytest.approx(near["wilcoxon"]["pvalue"], rel=1e-12)
    assert tiny["wilcoxon"]["statistic"] == pytest.approx(near["wilcoxon"]["statistic"])
