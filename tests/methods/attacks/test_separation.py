"""The membership verdict leads with the separation when no ε bound is shown (issue 85):
AUC with its interval and p-value, members found with no false positive, then why no bound."""

from __future__ import annotations

from ctxleak.methods.attacks.roc import roc_summary
from ctxleak.methods.attacks.separation import (
    lead_with_separation,
    members_at_zero_fp,
    separation_sentence,
)
from ctxleak.methods.verdict import make_verdict

OLD = "Not shown: a bound of 0 means the attack did not show a leak, not that there is none."


def summary(low: float, eps_lower: float = 0.0) -> dict:
    roc = [{"tp": 0, "fp": 0}, {"tp": 10, "fp": 0}, {"tp": 12, "fp": 3}, {"tp": 20, "fp": 20}]
    mask = {"auc": 0.75, "auc_ci": {"low": low, "high": 0.85}, "auc_test": {"p_value": 0.0002},
            "n_members": 20, "n_non_members": 20, "roc": roc,
            "eps": {"eps_lower": eps_lower, "confidence": 0.975, "documents_needed": 96}}
    direct = {**mask, "auc": 0.55, "auc_ci": {"low": 0.4, "high": 0.7}}
    return {"attacks": {"direct": direct, "mask": mask}, "eps_lower": eps_lower,
            "eps_max_showable": 2.1, "verdict": make_verdict(OLD, "the rule")}


def test_a_separation_without_a_bound_is_the_first_sentence():
    out = lead_with_separation(summary(0.65))
    first = out["verdict"]["text"].split(". ")[0]
    assert first == ("The mask attack separates members from non-members: AUC 0.75 "
                     "[0.65, 0.85], p = 0.0002, 10 of 20 members found with no false positive")
    assert "40 documents are too few" in out["verdict"]["text"]
    assert "needs about 96 (half members)" in out["verdict"]["text"]
    assert out["verdict"]["rule"] == "the rule" and "Not shown" not in out["verdict"]["text"]


def test_no_separation_or_a_bound_leaves_the_verdict():
    assert lead_with_separation(summary(0.45))["verdict"]["text"] == OLD  # interval covers 0.5
    assert lead_with_separation(summary(0.65, eps_lower=0.3))["verdict"]["text"] == OLD


def test_members_found_at_zero_fp_from_real_scores():
    # 10 members above every non-member, 10 among them: AUC = (200 + 100) / 400 = 0.75
    non = [0.1 * i for i in range(20)]
    members = [10 + i for i in range(10)] + [0.2 * j + 0.05 for j in range(10)]
    attack = roc_summary(members + non, [True] * 20 + [False] * 20, resamples=200)
    assert abs(attack["auc"] - 0.75) < 1e-12
    assert members_at_zero_fp(attack) == 10
    assert "AUC 0.75 [" in separation_sentence("mask", attack)
    assert "10 of 20 members found with no false positive" in separation_sentence("mask", attack)
