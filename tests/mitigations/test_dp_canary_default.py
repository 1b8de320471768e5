"""The canary audit of the DP mechanisms on the real default model ("Auditing Differentially
Private Machine Learning: How Private is Private SGD?"): a broken variant of each (a test-only
subclass whose noisy step adds no noise) gives a lower bound above its claim, and the honest
mechanism's lower bound stays under it.

The neighbours: a trial's context holds the target or the other canary. For the votes the
context is every shard's document, so the two datasets differ in all ``SHARDS`` shards: the
shard-level claim ε becomes SHARDS·ε by group privacy (δ: SHARDS·e^{(SHARDS−1)ε}·δ). For DP-RAG
the context is the one document, replaced: two add/remove steps, 2ε (δ: (1 + e^ε)·δ). The
lower bound is the canary audit's, with the claim's δ taken off the true-positive rate
(an (ε, δ)-DP test has TPR ≤ e^ε·FPR + δ)."""

from __future__ import annotations

import copy
import math

import pytest
from helpers.broken_dp import NoNoiseDPRAG, NoNoiseKSA, NoNoiseSparseVote, NoNoiseVote

from ctxleak.methods.attacks.canary import (
    CANARY_QUERY,
    attack_score,
    plant_canaries,
    summarize_trials,
)
from ctxleak.methods.influence.data import InfluenceExample, load_examples, prompt_parts
from ctxleak.mitigations.dp_ksa import DPKSA
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding

DOCS = [{"id": f"d{i}", "context": c} for i, c in enumerate((
    "Customer file.", "Billing record.", "Support ticket.", "Bank letter."))]
# as the canary audit's own test: 4 of the 6 digits repeated, any order
TRIALS, TOKENS, T, THRESHOLD, SHARDS, EPS = 16, 10, 0.5, 4, 3, 0.05
DECODING = Decoding(temperature=T, max_new_tokens=TOKENS, min_new_tokens=TOKENS)


@pytest.fixture
def prefilled_once(monkeypatch):
    """Each distinct prefill (the same prompts, padding and options) computed once in a test:
    the broken variant and the honest mechanism decode from the same prompts (the two votes
    from the same voters), so each after the first starts from a copy of the first's prefill,
    the very numbers a prefill of its own gives (one process, the same shapes: the answers
    were compared token for token). The repeated prefills were about a third of the time of
    these tests (84 s against 57 s on a busy 2-core CPU)."""
    from ctxleak.engine.local import generation

    real, done = generation.prefill, {}

    def once(lm, seqs, pad, *, share_prefix=True, longest_new=0, alone=None):
        key = (id(lm), tuple(map(tuple, seqs)), pad, share_prefix, longest_new,
               None if alone is None else tuple(sorted(alone)))
        if key not in done:
            own = None if alone is None else dict(alone)
            done[key] = (real(lm, seqs, pad, share_prefix=share_prefix,
                              longest_new=longest_new, alone=own), own)
        out, own = done[key]
        if alone is not None:  # the prompts' own caches, as a prefill fills them in
            alone.update(copy.deepcopy(own))
        return copy.deepcopy(out)  # decoding extends the cache in place

    monkeypatch.setattr(generation, "prefill", once)


def _requests(lm, trials, copies):
    def prompt_for(trial):
        def prompt(texts):
            ex = InfluenceExample(trial.key, "\n".join(texts), CANARY_QUERY, None, "qa")
            parts = prompt_parts(lm, ex, reserve=TOKENS)[0]
            return parts.full if texts else parts.empty
        return prompt

    return [AnswerRequest(documents=(t.context,) * copies, prompt=prompt_for(t), seed=t.trial)
            for t in trials]


def _audit(lm, mech, trials, requests, group_eps, group_delta):
    answers = mech.answer(lm, requests, DECODING)
    records = [{"score": attack_score(lm.decode(list(a.response_ids)), t.canary),
                "included": t.included, "composed_eps": group_eps}
               for t, a in zip(trials, answers)]
    out = summarize_trials(records, threshold=THRESHOLD)
    tpr_lo, fpr_hi = out["tpr_ci"][0], out["fpr_ci"][1]
    lower = max(math.log(max(tpr_lo - group_delta, 1e-300) / fpr_hi) if fpr_hi > 0 else math.inf,
                math.log(max(1 - fpr_hi - group_delta, 1e-300) / (1 - tpr_lo)) if tpr_lo < 1
                else math.inf, 0.0)
    return lower, out


@pytest.mark.integration
def test_broken_dp_mechanisms_are_caught_and_honest_ones_hold(default_lm, prefilled_once):
    trials = plant_canaries(load_examples(DOCS, task="summarization"), TRIALS, seed=0)
    votes = _requests(default_lm, trials, SHARDS)
    single = _requests(default_lm, trials, 1)
    cases = [
        (DPVote, NoNoiseVote, {"eps": EPS, "shards": SHARDS}, votes, "shard"),
        # a paid vote for every step (the default of three would cap what even a broken
        # mechanism releases)
        (DPSparseVote, NoNoiseSparseVote, {"eps": EPS, "shards": SHARDS, "eps_token": EPS / 40,
                                           "eps_svt": EPS / 40}, votes, "shard"),
        (DPRAG, NoNoiseDPRAG, {"eps": EPS}, single, "document"),
    ]
    for honest_cls, broken_cls, kwargs, requests, relation in cases:
        claim = honest_cls(**kwargs).claim(DECODING)
        assert claim.relation == relation and claim.eps <= EPS
        if relation == "shard":  # every shard holds the canary: group privacy over them
            k, d = SHARDS, SHARDS * math.exp((SHARDS - 1) * claim.eps) * claim.delta
        else:  # one document replaced: removed, then added
            k, d = 2, (1 + math.exp(claim.eps)) * claim.delta
        group_eps = k * claim.eps
        broken, b_out = _audit(default_lm, broken_cls(**kwargs), trials, requests, group_eps, d)
        honest, h_out = _audit(default_lm, honest_cls(**kwargs), trials, requests, group_eps, d)
        print(f"{honest_cls.name}: claim {group_eps:.3g} for the canary's neighbours; lower bound "
              f"broken {broken:.3g} (TP {b_out['tp']}/{b_out['n_in']}, FP {b_out['fp']}/"
              f"{b_out['n_out']}), honest {honest:.3g} (TP {h_out['tp']}/{h_out['n_in']}, FP "
              f"{h_out['fp']}/{h_out['n_out']})")
        assert broken > group_eps, (honest_cls.name, b_out)
        assert honest <= group_eps, (honest_cls.name, h_out)


@pytest.mark.integration
def test_broken_dp_ksa_is_caught_and_the_honest_one_holds(default_lm, prefilled_once):
    """DP-KSA ("Differentially Private Retrieval-Augmented Generation", Tang, Flemings, Wang and
    Annavaram) over the same shards as the votes: its broken variant releases the voters' top
    keyword (the canary's digits) untested; the honest test at ε = 0.05 needs a noisy distance
    above ln(1/(2δ))/ε ≈ 170 voters and releases nothing."""
    trials = plant_canaries(load_examples(DOCS, task="summarization"), TRIALS, seed=0)
    requests = _requests(default_lm, trials, SHARDS)
    # The release is what is audited; the final step only post-processes it. Opened with the
    # released keyword (the default), the answers' continuations carried digits that scored one
    # of 8 trials without the canary as a hit (TP 7/8, FP 1/8: no bound from 16 trials), so
    # the release is read here through the plain final step; tests/proxy/test_proxy_canary.py
    # audits the defaults (tiny model, through the proxy).
    kwargs = {"eps": EPS, "shards": SHARDS, "voter_tokens": TOKENS, "keyword_first": False}
    claim = DPKSA(**kwargs).claim(DECODING)
    group_eps = SHARDS * claim.eps
    d = SHARDS * math.exp((SHARDS - 1) * claim.eps) * claim.delta
    broken, b_out = _audit(default_lm, NoNoiseKSA(**kwargs), trials, requests, group_eps, d)
    honest, h_out = _audit(default_lm, DPKSA(**kwargs), trials, requests, group_eps, d)
    print(f"dp-ksa: claim {group_eps:.3g}; lower bound broken {broken:.3g} (TP {b_out['tp']}/"
          f"{b_out['n_in']}, FP {b_out['fp']}/{b_out['n_out']}), honest {honest:.3g}")
    assert broken > group_eps, b_out
    assert honest <= group_eps, h_out
