"""One frontier across mechanisms (CID, bounded CID, a shard vote, scrubbing) on hand-made
settings: every utility with its paired difference recomputed by hand, the claim with its
relation beside the measured leak, the recommendation naming what the claim covers, and no
recommendation where fewer than 30 questions cannot resolve utility differences."""

from __future__ import annotations

import pytest

from ctxleak.methods.influence.metrics import mean_with_ci
from ctxleak.methods.tradeoff.frontier import COLUMNS, MIN_QUESTIONS, frontier
from ctxleak.report.frontier import frontier_rows, setting_columns

N = 30
BASE = "lambda=1,T=0.8,context=all"
VOTE = "lambda=1,T=0.8,context=all,mechanism=dp-vote(eps=2,shards=4)"
SCRUB = "lambda=1,T=0.8,context=all,mechanism=scrub(operator=replace)"
# per-question exact match, F1 and ROUGE-L; privacy (above control per token); the claim
CASES = {
    BASE: ([1] * 20 + [0] * 10, [1] * 20 + [0.5] * 10, [0.8] * 30, 1.0,
           (None, "none", 0.0, None)),
    VOTE: ([1] * 19 + [0] * 11, [1] * 19 + [0.5] * 11, [0.7] * 30, 0.2,
           (12.0, "shard", 0.0, 6.0)),
    SCRUB: ([1] * 10 + [0] * 20, [1] * 10 + [0.2] * 20, [0.5] * 30, 0.5,
            (None, "none", 0.0, 0.0)),
}


def _settings(n=N):
    out = []
    for key, (em, f1, rl, privacy, (eps, relation, delta, paid)) in CASES.items():
        mech = key.split("mechanism=")[1] if "mechanism=" in key else None
        out.append({
            "setting": key, "lambda": 1.0, "temperature": 0.8, "n": n, "mechanism": mech,
            "exact_match": mean_with_ci(em[:n]), "f1": mean_with_ci(f1[:n]),
            "rouge_l": mean_with_ci(rl[:n]),
            "control": {"above_control_per_token": {"mean": privacy, "ci_low": None,
                                                    "ci_high": None}},
            "claim": {"relation": relation, "delta": delta,
                      "eps": None if eps is None else {"mean": eps}},
            "tokens_paid": None if paid is None else {"mean": paid}})
    return out


def _records(n=N):
    return [{"id": f"q{i}", "setting": key, "exact_match": em[i], "f1": f1[i], "rouge_l": rl[i]}
            for key, (em, f1, rl, *_) in CASES.items() for i in range(n)]


def test_every_utility_and_its_paired_difference_by_hand():
    front = frontier(_settings(), _records())
    rows = {r["setting"]: r for r in front["rows"]}
    assert set(COLUMNS) <= set(rows[VOTE])
    vote, scrub = rows[VOTE], rows[SCRUB]
    assert vote["exact_match"] == pytest.approx(19 / 30)
    assert vote["exact_match_difference"] == pytest.approx(-1 / 30)
    assert vote["f1_difference"] == pytest.approx((19 + 5.5 - 25) / 30)
    assert vote["rouge_l_difference"] == pytest.approx(-0.1)
    assert scrub["exact_match_difference"] == pytest.approx(-10 / 30)
    low, high = scrub["exact_match_difference_ci_low"], scrub["exact_match_difference_ci_high"]
    assert low <= -10 / 30 <= high < 0  # the paired interval excludes no change
    assert rows[BASE]["f1_difference"] is None and rows[BASE]["baseline"]
    assert [r["label"] for r in front["rows"]] == ["λ = 1", "dp-vote(eps=2,shards=4)",
                                                   "scrub(operator=replace)"]
    assert (vote["eps_guarantee"], vote["relation"], vote["tokens_paid"]) == (12.0, "shard", 6.0)
    assert scrub["eps_guarantee"] is None and scrub["relation"] == "none"


def test_the_recommendation_names_what_the_claim_covers_and_the_attack_beside_it():
    front = frontier(_settings(), _records(), audits={VOTE: 3.5})
    assert front["resolved"] and front["questions"] == N
    # F1: base 0.8333, vote 0.8167 (98 %), scrub 0.4667; the vote leaks least of those keeping 90 %
    assert front["recommended"] == VOTE
    sentence = front["recommendation"]
    assert sentence.startswith("dp-vote(eps=2,shards=4) keeps 98 % of the best F1 at 20 % of "
                               "its influence above control per token")
    assert "Its claim: ε = 12 per response, shard-level over the dealt list: adding or " \
           "removing one document shifts every later document's shard, so a document-level ε " \
           "does not follow." in sentence
    assert "A canary attack demonstrated ε ≥ 3.5 (95 %)." in sentence
    shown = frontier_rows(front)
    assert shown[1]["covers"] == "shard" and shown[1]["paid tokens"] == 6.0
    assert shown[1]["attack ε ≥ (95%)"] == 3.5
    assert shown[2]["Δ EM (95% CI)"].startswith("-0.333 [")


def test_fewer_than_30_questions_leave_utility_differences_unresolved():
    n = MIN_QUESTIONS - 1
    front = frontier(_settings(n), _records(n))
    assert not front["resolved"] and front["questions"] == n and front["recommended"] is None
    # on 29 questions: base F1 (20 + 9 × 0.5) / 29 = 0.845, the vote's (19 + 10 × 0.5) / 29
    # = 0.828, 98 % of it, with 1.0 − 0.2 = 0.8 nats per token less leak: indicative only
    assert front["recommendation"] == (
        f"No recommendation: utility differences not resolved with {n} question(s) (fewer "
        f"than 30); measure at least 30 questions to choose between settings. Indicative "
        f"only, on these questions: dp-vote(eps=2,shards=4) keeps 98 % of the best F1 (F1 "
        f"0.83 vs 0.84) with 0.8 nats per token less leak.")
    assert all(r["utility"] is not None for r in front["rows"])  # the table still shows them
    assert frontier(_settings(n), _records(n), min_questions=n)["recommended"] == VOTE


def test_the_reports_setting_table_names_the_mode_only_where_a_run_has_mechanisms():
    settings = _settings()
    assert [setting_columns(s, settings) for s in settings] == [
        {"mode": "CID", "λ": 1.0, "T": 0.8},
        {"mode": "dp-vote(eps=2,shards=4)", "λ": "—", "T": 0.8},
        {"mode": "scrub(operator=replace)", "λ": "—", "T": 0.8}]
    assert setting_columns(settings[0], settings[:1]) == {"λ": 1.0, "T": 0.8}  # as before
