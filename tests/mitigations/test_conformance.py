"""``ctxleak.testing``, the conformance checks every mechanism must pass (as scikit-learn's
``check_estimator``): every bundled mechanism passes them, one case per mechanism and check
(``parametrize_with_checks``); each broken variant (its noisy step without noise,
:mod:`helpers.broken_dp`) fails the canary audit; a third party's mechanism (a minimal one that
answers without its documents, and its broken twin that reads them while claiming ε = 0) is
certified or caught the same way; and bad parameters found by the checks are refused in one
line (issue 83)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
from helpers.broken_dp import (
    NoNoiseAnswerVote,
    NoNoiseDPRAG,
    NoNoiseKSA,
    NoNoiseSparseVote,
    NoNoiseVote,
)

from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import Claim, Mechanism, MechanismAnswer
from ctxleak.mitigations.named import MECHANISMS, parse_mechanism
from ctxleak.testing import CheckFailed, check_mechanism, parametrize_with_checks

EPS = 0.05
SPARSE = {"eps": EPS, "shards": 3, "eps_token": EPS / 40, "eps_svt": EPS / 40}
#: One setting of every registered mechanism, at the audit's ε (a new mechanism in the
#: registry must be added here: test_every_registered_mechanism_is_checked).
BUNDLED = {
    "cid": ["cid:lam=1,bounded_eps=0.05", "cid:lam=0.5"],
    "dp-vote": ["dp-vote:eps=0.05,shards=3"],
    "dp-sparse-vote": ["dp-sparse-vote:eps=0.05,shards=3,eps_token=0.00125,eps_svt=0.00125"],
    "dp-rag": ["dp-rag:eps=0.05"],
    "dp-answer-vote": ["dp-answer-vote:eps=0.05,shards=3,answer_tokens=4"],
    "scrub": ["scrub"],
    "dp-ksa": ["dp-ksa:eps=0.05,shards=3,voter_tokens=4"],
}


def test_every_registered_mechanism_is_checked():
    # ctxleak's own: a test may register a toy of its own in the same process
    own = {name for name in MECHANISMS if MECHANISMS.get(name).__module__.startswith("ctxleak.")}
    assert set(BUNDLED) == own


@parametrize_with_checks([parse_mechanism(s) for specs in BUNDLED.values() for s in specs])
def test_bundled_mechanisms_pass_every_check(mechanism, check):
    check(mechanism)


@pytest.mark.parametrize("broken", [NoNoiseVote(eps=EPS, shards=3), NoNoiseSparseVote(**SPARSE),
                                    NoNoiseDPRAG(eps=EPS),
                                    NoNoiseKSA(eps=EPS, shards=3, voter_tokens=4),
                                    NoNoiseAnswerVote(eps=EPS, shards=3)],
                         ids=lambda m: type(m).__name__)
def test_a_mechanism_without_its_noise_fails_the_canary_audit(broken):
    found = check_mechanism(broken, checks=["canary_audit", "same_seed_same_answer"])
    assert [r.check for r in found.failed] == ["canary_audit"]
    assert "not as private as it claims" in found.failed[0].detail
    with pytest.raises(CheckFailed, match="canary_audit"):
        found.raise_if_failed()


@dataclass(frozen=True)
class NoRetrieval(Mechanism):
    """A third party's minimal mechanism: each answer drawn from the prompt without its
    documents, so it claims ε = 0 under the document relation."""

    name: ClassVar[str] = "no-retrieval"
    min_documents: ClassVar[int] = 1
    over_datastore: ClassVar[bool] = False
    temperature_floor: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.temperature_floor, bool) or not math.isfinite(
                self.temperature_floor) or self.temperature_floor < 0:
            raise ConfigError(f"temperature_floor: {self.temperature_floor} is not a finite "
                              "number >= 0", param="temperature_floor")

    def key(self) -> str:
        return "no-retrieval"

    def claim(self, decoding):
        return Claim(eps=0.0, delta=0.0, relation="document")

    def read(self, request):
        return request.prompt([])

    def answer(self, lm, requests, decoding):
        made = lm.sample([self.read(r) for r in requests], [r.seed for r in requests],
                         temperature=max(decoding.temperature, self.temperature_floor),
                         max_new_tokens=decoding.max_new_tokens,
                         min_new_tokens=decoding.min_new_tokens)
        return [MechanismAnswer(tuple(g.token_ids), g.stopped_on_eos, self.claim(decoding), 0,
                                steps=tuple({"token_id": t, "paid": False} for t in g.token_ids))
                for (g,) in made]


@dataclass(frozen=True)
class LeakyRetrieval(NoRetrieval):
    """Its broken twin: it reads the documents, still claiming ε = 0."""

    def read(self, request):
        return request.prompt(list(request.documents))


def test_a_third_party_mechanism_is_certified_and_its_leaky_twin_caught():
    ok = check_mechanism(NoRetrieval())
    assert ok.passed, ok.summary()
    leaky = check_mechanism(LeakyRetrieval())
    assert [r.check for r in leaky.failed] == ["canary_audit"], leaky.summary()
    table = leaky.to_pandas()
    assert list(table.columns) == ["check", "passed", "detail"] and len(table) == 6


@pytest.mark.parametrize(("make", "field"), [
    (lambda: DPRAG(eps=EPS, top_k=True), "top_k"), (lambda: DPRAG(eps=EPS, grid=2.5), "grid"),
    (lambda: DPVote(eps=EPS, shards=3, domain=True), "domain"),
    (lambda: DPSparseVote(eps=EPS, shards=3, threshold=True), "threshold"),
    (lambda: CID(lam=True), "lam")])
def test_bools_and_fractions_found_by_the_checks_are_refused_in_one_line(make, field):
    with pytest.raises(ConfigError) as caught:
        make()
    assert caught.value.param == field and "\n" not in str(caught.value)


def test_unknown_checks_are_refused():
    with pytest.raises(ConfigError, match="checks: nope not among"):
        check_mechanism(NoRetrieval(), checks=["nope"])


def test_the_served_view_check_sees_a_proxy_that_shows_the_operator_view(monkeypatch):
    """Not vacuous: with the proxy's client view replaced by the operator's (every field), the
    served answer names the datastore's documents and the check fails."""
    import ctxleak.proxy.app as app_module

    mechanism = DPRAG(eps=EPS)
    assert check_mechanism(mechanism, checks=["served_view"]).passed
    monkeypatch.setattr(app_module, "client_view", lambda info, request: dict(info),
                        raising=True)
    found = check_mechanism(mechanism, checks=["served_view"])
    assert not found.passed and "names or quotes the datastore's document" in \
        found.failed[0].detail
