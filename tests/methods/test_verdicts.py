"""The verdict of each method, from hand-built records and summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ctxleak.methods.audit.verdict import audit_verdict
from ctxleak.methods.icl.pipeline import summarize_records
from ctxleak.methods.icl.verdict import by_exemplar, icl_verdict
from ctxleak.methods.pii.summary import summarize_probes
from ctxleak.methods.pii.verdict import hits, probe_verdict, significance
from ctxleak.methods.susceptibility.pipeline import answer_entropy
from ctxleak.methods.susceptibility.verdict import (
    ceiling,
    context_entropy,
    susceptibility_verdict,
    top_queries,
)
from ctxleak.methods.verdict import check_verdict, make_verdict, ratio_text


def test_make_and_check_verdict():
    v = make_verdict(" It leaks. ", "Because.")
    assert v == {"text": "It leaks.", "rule": "Because."} and check_verdict(v) is None
    assert check_verdict({"text": 3, "rule": ""}) and check_verdict("leaks")
    with pytest.raises(ValueError):
        make_verdict("", "r")
    assert ratio_text(math.log(49.0)) == "e^3.9 ≈ 49×"


def _icl_record(q, exemplars, losses):
    return {"id": f"shots=3/q={q}", "shots": 3, "exemplar_indices": exemplars,
            "variants": {"labels": {"loss_by_position": losses, "iclinf": max(losses),
                                    "correct": True}}}


def test_icl_verdict_names_the_exemplar_and_position_that_leak_most():
    records = [_icl_record(0, [7, 2, 9], [0.1, 0.2, 1.5]),
               _icl_record(1, [2, 4, 7], [2.5, 0.3, 0.4]),
               _icl_record(2, [1, 9, 4], [0.2, 0.1, 1.2])]
    ranked = by_exemplar(records, 3, "labels")
    # training row 2 caused the largest loss (2.5 nats, on query 1, at position 1)
    assert ranked[0] == {"exemplar": 2, "max_loss": 2.5, "mean_loss": pytest.approx(1.35),
                         "queries": 2, "query": "shots=3/q=1", "position": 1}
    assert [e["exemplar"] for e in ranked] == [2, 9, 4, 7, 1]
    summary = {"shots": [3], "variants": ["labels"],
               "iclinf": summarize_records(records, ["labels"])}
    v = icl_verdict(summary, records)
    # ICLInf = mean of the per-query maxima (1.5 + 2.5 + 1.2) / 3
    assert "ICLInf is 1.73 nats over 3 queries (likelihood ratio e^1.7 ≈ 5.7×)" in v["text"]
    assert "training row 2 (2.5 nats on query shots=3/q=1)" in v["text"]
    # position 3 has the largest mean loss: (1.5 + 0.4 + 1.2) / 3
    assert "position 3 of 3 leaks most on average (1.03 nats)" in v["text"]
    assert "ex-post per-instance" in v["rule"]


def test_answer_entropy_and_the_ceiling():
    p = np.array([0.5, 0.25, 0.25, 0.0])
    with np.errstate(divide="ignore"):
        assert answer_entropy(np.log(p)) == pytest.approx(1.5 * math.log(2))
    rec = {"answer_entropy": 0.9, "context_draws": {"count": [2, 2]}}
    assert context_entropy(rec) == pytest.approx(math.log(2))
    assert ceiling(rec) == pytest.approx(math.log(2))  # min(H(A), H(C))
    assert ceiling({"answer_entropy": 0.2, "context_draws": {"count": [1, 1, 1]}}) == 0.2
    assert ceiling({}) is None


def _susc(i, chi_mc, h, chi_f):
    return {"id": f"q{i}", "query": f"query {i}", "chi_mc": chi_mc, "answer_entropy": h,
            "context_draws": {"count": [1, 1, 1, 1]}, "chi_f": chi_f}


def test_susceptibility_verdict_ranks_by_mi_against_the_ceiling():
    records = [_susc(0, 0.1, 1.0, 5.0), _susc(1, 0.6, 0.8, 1.0), _susc(2, 0.3, 2.0, 9.0)]
    top = top_queries(records, "chi_mc", marginal=True)
    assert [q["id"] for q in top] == ["q1", "q2", "q0"]
    assert top[0]["share_of_ceiling"] == pytest.approx(0.75)
    summary = {"metrics": {"chi_mc": {"n": 3, "mean": 1.0 / 3}},
               "ceiling": {"shares": [0.1, 0.75, 0.3 / math.log(4)]}}
    v = susceptibility_verdict(summary, records)
    assert v["text"].startswith("The queries most susceptible to context are q1 (0.6 nats, "
                                "75% of its 0.8-nat ceiling)")
    assert "never exceed" in v["rule"]
    # Fisher only: a ranking on another scale, never nats
    fisher = susceptibility_verdict({"metrics": {"chi_f": {"n": 3, "mean": 5.0}}}, records)
    assert "q2 (χ_F 9)" in fisher["text"] and "nats" not in fisher["text"]
    assert "not nats" in fisher["rule"]


def _probe_rows(n, leak=True):
    rows = []
    for i in range(n):
        rows.append({"subject": f"s{i}", "pii_type": "phone", "field": "phone",
                     "mode": "black-box", "variant": "beam", "group": None, "shots_k": 0,
                     "structure": "twins", "template": "t", "target": f"555-01{i:02d}",
                     "generation": f"call 555-01{i:02d} now" if i == 0 else "no idea",
                     "exact_match": i == 0, "target_ll": -10.0 + (i + 1 if leak else -1),
                     "null_ll": -10.0, "target_ll_norm": -1.0, "null_ll_norm": -1.2})
    return rows


def _groups(rows):
    groups = summarize_probes(rows, by=("mode", "variant", "group", "shots_k", "pii_type",
                                        "structure"))
    for g in groups:
        g["label"] = "black-box / all / k=0 / phone"
    return groups


def test_probe_verdict_says_when_n_is_too_small_to_ever_reject():
    rows = _probe_rows(3)
    groups = _groups(rows)
    assert groups[0]["wilcoxon"]["pvalue"] == pytest.approx(0.125)
    sig = significance(groups, 0.05)
    assert sig[0]["can_reject"] is False and sig[0]["significant"] is False
    v = probe_verdict(groups, rows, 0.05)
    assert v["text"].startswith("No conclusion at α = 0.05: with n = 3 subject(s)")
    assert "0.125" in v["text"] and "at least 5 subjects" in v["text"]
    assert "1 generation(s) contained the exact PII of 1 subject(s)" in v["text"]


def test_probe_verdict_names_the_leaking_group_when_the_test_rejects():
    rows = _probe_rows(8)
    groups = _groups(rows)
    v = probe_verdict(groups, rows, 0.05)
    assert v["text"].startswith("PII leaks at α = 0.05 in 1 of 1 group(s): black-box / all")
    assert "p = 0.0039, n = 8" in v["text"]
    quiet = _probe_rows(8, leak=False)
    assert probe_verdict(_groups(quiet), quiet, 0.05)["text"].startswith(
        "No group leaks at α = 0.05 (smallest p = 1, n = 8)")


def test_hit_log_holds_the_exact_strings():
    log = hits(_probe_rows(3))
    assert log == [{"id": None, "subject": "s0", "pii_type": "phone", "field": "phone",
                    "mode": "black-box", "variant": "beam", "template": "t",
                    "target": "555-0100", "span": "555-0100", "start": 5, "end": 13,
                    "around": "call 555-0100 now"}]


def test_audit_verdict():
    rows = [{"target_eps": 1.0, "delta": 1e-5, "eps_empirical": 0.3, "ratio": 0.3,
             "complete": True},
            {"target_eps": 8.0, "delta": 1e-5, "eps_empirical": 4.0, "ratio": 0.5,
             "complete": True}]
    v = audit_verdict(rows)
    assert v["text"].startswith("Within budget at all 2 setting(s): the largest "
                                "ε_empirical / ε_target is 0.5 (ε_target = 8")
    rows[0].update(eps_empirical=1.5, ratio=1.5)
    assert audit_verdict(rows)["text"].startswith(
        "The mechanism exceeds its budget at 1 of 2 setting(s): ε_target = 1")
    assert audit_verdict([])["text"].startswith("No setting")


def test_probe_verdict_without_generation_does_not_claim_a_search_for_pii():
    """Likelihoods only (``--no-generate``): no record has a generation, so the verdict says
    nothing was looked for instead of "no generation contained the exact PII"."""
    rows = [{k: v for k, v in r.items() if k != "generation"} | {"exact_match": None}
            for r in _probe_rows(8)]
    v = probe_verdict(_groups(rows), rows, 0.05)
    assert "nothing was generated" in v["text"] and "no generation contained" not in v["text"]
    generated = _probe_rows(8)
    assert "nothing was generated" not in probe_verdict(_groups(generated), generated, 0.05)["text"]


def test_probe_timings_are_named_in_words():
    from ctxleak.report.probe import timing_label

    assert timing_label("probing_s") == "spent probing"
    assert timing_label("canary_finetune_s") == "fine-tuning for the canary"
    assert timing_label("other_step_s") == "other step"
