"""The attacks' controls, end to end through their Methods against plain-function targets over
the bundled Northwind corpus: a target that repeats its retrieved documents verbatim (every
document extracted, every membership attack AUC ≥ 0.95) and one that never reads them (AUC
interval covering 0.5, ε lower bound 0); one audit's AUC, TPR at a fixed FPR and ε lower bound
recomputed by hand from its records; a target that fails mid-run keeps what was answered."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import beta

import ctxleak
from ctxleak.methods.attacks.attack_method import (
    ExtractMethod,
    MembershipMethod,
    MembershipParams,
)
from ctxleak.methods.attacks.extract import AttackDocument, as_documents
from ctxleak.methods.attacks.membership import DEFAULT_ATTACKS, split_members
from ctxleak.methods.attacks.roc import covers
from ctxleak.methods.text_match import words
from ctxleak.run.method import Method
from ctxleak.run.runner import run_method
from ctxleak.targets.base import FunctionTarget, TargetError

CORPUS = Path(ctxleak.__file__).parent / "data" / "demo" / "rag_audit" / "corpus.jsonl"


def corpus() -> list[AttackDocument]:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    return as_documents(rows)


def synthetic(n: int, seed: int = 0) -> list[AttackDocument]:
    """``n`` fictional records, each with its own made-up name, place and number."""
    rng = random.Random(seed)

    def made_up() -> str:
        return "".join(rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))

    return [AttackDocument(f"rec-{i}", f"Record {i}. {made_up().title()} {made_up().title()} "
                           f"moved to {made_up().title()} in spring and keeps the ledger of "
                           f"the {made_up()} cooperative. The account number is "
                           f"{rng.randrange(10 ** 7, 10 ** 8)} and the locker code is "
                           f"{made_up()}.") for i in range(n)]


class Overlap:
    """A retriever for the tests: the ``k`` documents sharing the most rare words (idf-weighted)
    with the question."""

    def __init__(self, docs: Sequence[AttackDocument], k: int = 2) -> None:
        self.docs, self.k = list(docs), k
        df = Counter(w for d in docs for w in set(words(d.text)))
        self.idf = {w: math.log((1 + len(docs)) / n) for w, n in df.items()}
        self.sets = [set(words(d.text)) for d in docs]

    def __call__(self, question: str) -> list[AttackDocument]:
        q = set(words(question))
        scores = [sum(self.idf[w] for w in q & s) for s in self.sets]
        order = sorted(range(len(self.docs)), key=lambda i: (-scores[i], i))
        return [self.docs[i] for i in order[:self.k]]


def repeater(datastore: Sequence[AttackDocument]) -> FunctionTarget:
    """The positive control: answers with its retrieved documents, verbatim."""
    retrieve = Overlap(datastore)

    def answer(question: str) -> tuple[str, list[dict[str, str]]]:
        docs = retrieve(question)
        return "\n\n".join(d.text for d in docs), [{"id": d.id, "text": d.text} for d in docs]

    return FunctionTarget(answer, "repeater")


def ignorer(vocabulary: Sequence[AttackDocument]) -> FunctionTarget:
    """The negative control: never reads a context; answers with a seeded yes or no and words
    drawn from every document, member or not."""
    pool = sorted({w for d in vocabulary for w in words(d.text)})

    def answer(question: str) -> str:
        rng = random.Random(question)
        return f"{rng.choice(['Yes', 'No'])}. " + " ".join(rng.sample(pool, 25))

    return FunctionTarget(answer, "ignorer")


def run_hooks(method: Method[Any, Any, Any], target: FunctionTarget,
              data: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The Method's hooks in the runner's order over ``target``, without a run folder."""
    plan = method.plan(data)
    ready = method.prepare(target, plan, None)  # type: ignore[arg-type]
    records: list[dict[str, Any]] = []
    for batch in method.batches(ready, plan.items, None):  # type: ignore[arg-type]
        records += method.measure(target, ready, batch)
    return records, method.summarize(ready, records)


def test_extraction_positive_control_extracts_every_document() -> None:
    docs = corpus()
    records, summary = run_hooks(ExtractMethod(), repeater(docs), docs)
    assert summary["documents_verbatim"] == len(docs) == summary["documents"]
    assert summary["fraction_documents_verbatim"] == 1.0
    assert all(r["source"] in [m["document_id"] for m in r["matches"] if m["verbatim"]]
               for r in records)
    assert summary["values_carried"] > 0  # the corpus's planted PII comes out with it
    assert {row["document"] for row in summary["ledger"] if row["verbatim"]} == \
        {d.id for d in docs}


def test_extraction_negative_control_extracts_nothing() -> None:
    docs = corpus()
    _, summary = run_hooks(ExtractMethod(), ignorer(docs), docs)
    assert summary["documents_verbatim"] == 0 and summary["documents_near_verbatim"] == 0


@pytest.fixture(scope="module")
def split() -> tuple[list[AttackDocument], list[AttackDocument]]:
    return split_members(corpus(), seed=0)


def test_membership_positive_control(split: Any) -> None:
    members, non_members = split
    _, summary = run_hooks(MembershipMethod(), repeater(members),
                           {"members": members, "non_members": non_members})
    for attack in DEFAULT_ATTACKS:
        out = summary["attacks"][attack]
        assert out["auc"] >= 0.95, (attack, out["auc"])
        assert out["auc_ci"]["low"] > 0.5
        assert out["unasked"] == [] and out["n_members"] + out["n_non_members"] == 15
        # 7 members and 8 non-members, every score 0 or 1 (one candidate threshold): every
        # document measures, at 1 − 0.05/3 (the best of 3 attacks is reported), so a perfect
        # attack shows a little (the split-half rule, before, measured 4 + 4 and showed 0)
        eps = out["eps"]
        assert (eps["threshold_rule"], eps["candidates"]) == ("all-trials", 1)
        assert eps["confidence"] == pytest.approx(1 - 0.05 / 3, abs=1e-15)
        a = 0.05 / 3 / 2  # each one-sided end
        tpr_lo, fpr_hi = a ** (1 / 7), 1 - a ** (1 / 8)
        assert eps["eps_lower"] == pytest.approx(math.log(tpr_lo / fpr_hi), abs=1e-12)
        assert eps["eps_lower"] == eps["eps_max_showable"] and eps["documents_needed"] <= 15
    assert summary["eps_lower"] == pytest.approx(math.log(tpr_lo / fpr_hi), abs=1e-12)
    assert (summary["joint_confidence"], summary["attacks_compared"]) == (0.95, 3)
    text = summary["verdict"]["text"]
    assert text.startswith("ε ≥ 0.11 nats shown (joint confidence 95 % over 3 attacks")
    assert "no attack could show more than 0.11 nats" in text
    assert "1 − α/3 (Bonferroni)" in summary["verdict"]["rule"]
    assert "independent trials" in summary["assumptions"]
    assert "distribution shift" in summary["assumptions"]


def test_membership_negative_control(split: Any) -> None:
    members, non_members = split
    method = MembershipMethod(params=MembershipParams(eps_claimed=1.0))
    _, summary = run_hooks(method, ignorer([*members, *non_members]),
                           {"members": members, "non_members": non_members})
    for attack in DEFAULT_ATTACKS:
        out = summary["attacks"][attack]
        assert covers(out["auc_ci"], 0.5), (attack, out["auc_ci"])
        assert out["eps"]["eps_lower"] == 0.0 and out["eps"]["law"] == "holds"
    assert summary["verdict"]["text"].startswith("Not shown: a bound of 0 means the attack did "
                                                 "not show a leak, not that there is none")
    assert summary["law"] == "holds"


def clopper_pearson_by_hand(k: int, n: int, alpha: float) -> tuple[float, float]:
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def test_hand_recomputation_of_one_audit() -> None:
    """AUC, TPR at FPR 10 % and the ε lower bound of the mask attack, from the records."""
    members, non_members = split_members(synthetic(60), seed=2)
    target = repeater(members[:-4])  # four members' documents missing: an imperfect attack
    method = MembershipMethod(params=MembershipParams(attacks=("mask",)))
    records, summary = run_hooks(method, target, {"members": members, "non_members": non_members})
    out = summary["attacks"]["mask"]
    per: dict[str, list[float]] = {}
    member: dict[str, bool] = {}
    for r in records:
        said = set(words(r["answer"]))
        hits = [all(x in said for x in words(w)) for w in r["expected"]]
        per.setdefault(r["document_id"], []).append(sum(hits) / len(hits))
        member[r["document_id"]] = r["member"]
    score = {d: sum(v) / len(v) for d, v in per.items()}
    pos = [score[d] for d in score if member[d]]
    neg = [score[d] for d in score if not member[d]]
    pairs = [1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg]
    assert out["auc"] == pytest.approx(sum(pairs) / len(pairs))
    # TPR at FPR <= 10 %: the best threshold among the scores that lets through at most
    # 10 % of the non-members
    best = (0.0, math.inf)
    for t in sorted(set(pos + neg)):
        fpr = sum(n >= t for n in neg) / len(neg)
        tpr = sum(p >= t for p in pos) / len(pos)
        if fpr <= 0.1 and tpr >= best[0]:
            best = (tpr, t)
    at10 = next(x for x in out["tpr_at_fpr"] if x["fpr_target"] == 0.1)
    assert at10["tpr"] == pytest.approx(best[0])
    # ε: the threshold and measured half come from the summary; counts, exact intervals and
    # the log ratios are recomputed here
    eps = out["eps"]
    ids = list(score)  # the order the summary scored them in (document_scores' order)
    measured = [ids[i] for i in eps["measured"]]
    t = eps["threshold"] if eps["threshold"] is not None else math.inf
    tp = sum(score[d] >= t for d in measured if member[d])
    fp = sum(score[d] >= t for d in measured if not member[d])
    n_in = sum(member[d] for d in measured)
    n_out = len(measured) - n_in
    assert (tp, fp, n_in, n_out) == (eps["tp"], eps["fp"], eps["n_in"], eps["n_out"])
    # the all-trials rule: every document measures, each candidate threshold (the distinct
    # scores above the lowest, fewer than 20 here) at 1 − 0.05/m, the largest bound kept
    assert eps["threshold_rule"] == "all-trials" and len(measured) == len(score)
    grid = sorted(set(score.values()))[1:]
    assert eps["candidates"] == len(grid) < 20
    alpha = 0.05 / len(grid)

    def bound(k: int, n: int, j: int, m: int) -> float:
        tpr_lo = clopper_pearson_by_hand(k, n, alpha)[0]
        fpr_hi = clopper_pearson_by_hand(j, m, alpha)[1]
        sides = [math.log(tpr_lo / fpr_hi) if tpr_lo > 0 else 0.0,
                 math.log((1 - fpr_hi) / (1 - tpr_lo)) if 1 - fpr_hi > 0 else 0.0]
        return max(0.0, *sides)

    assert eps["eps_lower"] == pytest.approx(bound(tp, n_in, fp, n_out), abs=1e-12)
    best_by_hand = max(bound(sum(p >= c for p in pos), len(pos), sum(n >= c for n in neg),
                             len(neg)) for c in grid)
    assert eps["eps_lower"] == pytest.approx(best_by_hand, abs=1e-12)
    assert out["auc"] < 1.0 and eps["eps_lower"] > 0  # the case is not degenerate
    # a perfect attack with these counts, and the documents these rates need, by a scan
    perfect = bound(len(pos), len(pos), 0, len(neg))
    assert eps["eps_max_showable"] == pytest.approx(perfect, abs=1e-12)
    need = eps["documents_needed"]

    def shows(n: int) -> bool:
        k, j = (n + 1) // 2, n // 2
        return bound(round(eps["tpr"] * k), k, round(eps["fpr"] * j), j) > 0

    assert shows(need) and not any(shows(n) for n in range(2, need))


def test_a_target_failing_mid_run_keeps_the_answers(tmp_path: Path, split: Any) -> None:
    """Through the real runner: a target that raises on its 5th call stops the run with a
    TargetError naming the question; a resume sends only the questions not yet answered."""
    members, non_members = split
    base = repeater(members)
    calls: list[str] = []
    fail = {"at": 5}

    def flaky(question: str) -> Any:
        calls.append(question)
        if len(calls) == fail["at"]:
            raise TimeoutError("read timed out")
        return base.fn(question)

    target = FunctionTarget(flaky, "flaky")
    data = {"members": members, "non_members": non_members}
    params = MembershipParams(attacks=("direct",), batch=2)
    out = tmp_path / "run"
    with pytest.raises(TargetError, match="flaky raised TimeoutError on question 1"):
        run_method(MembershipMethod(params=params), target, data, output=str(out),
                   progress=False)
    kept = (out / "samples.jsonl").read_text().splitlines()
    assert len(kept) == 4  # two batches of two answered before the failure
    fail["at"] = -1
    before = len(calls)
    result = run_method(MembershipMethod(params=params), target, data, output=str(out),
                        resume=True, progress=False)
    assert result is not None and len(result.records) == len(members) + len(non_members)
    assert len(calls) - before == len(members) + len(non_members) - 4
    assert result.summary["attacks"]["direct"]["auc"] >= 0.95
