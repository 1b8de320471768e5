"""The canary audit (auditing DP by membership inference with canaries: "Auditing
Differentially Private Machine Learning: How Private is Private SGD?"; its statistics by hand in
test_lower_bound.py): the law (the 95 % lower bound never exceeds a true guarantee) over
seeds on randomized response with a known ε, and a broken mechanism that claims less than it
spends, which the law must catch."""

from __future__ import annotations

import inspect
import json
import math
import random
from dataclasses import fields
from difflib import SequenceMatcher

import numpy as np
import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.canary import (
    attack_score,
    guarantee,
    plant_canaries,
    summarize_trials,
)
from ctxleak.methods.attacks.canary_method import trials_needed
from ctxleak.methods.attacks.lower_bound import HOLDS, NO_GUARANTEE, VIOLATED, audit_scores, law
from ctxleak.methods.influence.data import InfluenceExample, load_examples
from ctxleak.methods.influence.setting import Setting
from ctxleak.methods.tradeoff.frontier import frontier
from ctxleak.report.frontier import frontier_rows
from ctxleak.results import CanaryResult, InfluenceResult
from ctxleak.run.options import RunOptions

SEEDS = range(10)


def randomized_response(eps: float, n: int, seed: int) -> tuple[list[int], list[bool]]:
    """``n`` trials of randomized response, an ε-DP mechanism whose best test reaches ε exactly:
    it reports the coin with probability e^ε / (1 + e^ε), the other side otherwise."""
    rng = np.random.default_rng(seed)
    coins = rng.random(n) < 0.5
    truthful = rng.random(n) < math.exp(eps) / (1 + math.exp(eps))
    reports = np.where(truthful, coins, ~coins)
    return reports.astype(int).tolist(), coins.tolist()


def test_law_holds_over_seeds_on_randomized_response():
    eps = 1.0
    lowers = []
    for seed in SEEDS:
        scores, coins = randomized_response(eps, 600, seed)
        records = [{"score": s, "included": c, "composed_eps": eps}
                   for s, c in zip(scores, coins)]
        summary = summarize_trials(records, seed=seed)
        assert summary["eps_guarantee"] == eps
        assert summary["law"] == HOLDS, summary
        assert summary["eps_lower"] <= eps
        lowers.append(summary["eps_lower"])
    # the audit has power: on 300 measured trials it shows most of the true ε on average
    assert min(lowers) > 0 and np.mean(lowers) > 0.5


def test_a_broken_mechanism_is_caught():
    # claims ε = 0.2 per response, but reports the coin as randomized response at ε = 3 does
    for seed in SEEDS:
        scores, coins = randomized_response(3.0, 200, seed)
        records = [{"score": s, "included": c, "composed_eps": 0.2}
                   for s, c in zip(scores, coins)]
        summary = summarize_trials(records, seed=seed)
        assert summary["law"] == VIOLATED, summary
        assert summary["eps_lower"] > 0.2
        assert "not as private as it claims" in summary["reading"]


def test_guarantee():
    assert guarantee([2.0, 4.0, 3.0]) == 4.0
    assert guarantee([2.0, None]) is None


def test_attack_score_by_hand():
    assert attack_score("The account number 140891", "140891") == 6
    assert attack_score("The account number is 14089", "140891") == 5
    assert attack_score("Account 7", "140891") == 0
    assert attack_score("12342", "140891") == 2  # one 1 and the 4, in any order
    assert attack_score("Account 1 9 8 0 4 1", "140891") == 6  # shuffled and spread
    assert attack_score("111", "140891") == 2  # the canary holds two 1s, no more count


def test_a_mechanism_that_leaks_the_digits_shuffled_cannot_hide():
    """A lying mechanism claims ε = 0.5 nats per response and releases the planted canary's
    digits shuffled and spaced out: the longest shared substring is then 1 character whether
    the target was planted or not (the old score: the law "holds"), while the attacker's score
    counts all 6 digits when it was, and the split-threshold audit shows the lie."""
    rng = random.Random(7)

    def lying(planted: str) -> str:
        digits = list(planted)
        rng.shuffle(digits)
        return "The number is " + " ".join(digits)

    def longest_shared(response: str, canary: str) -> int:
        match = SequenceMatcher(None, response, canary, autojunk=False).find_longest_match(
            0, len(response), 0, len(canary))
        return int(match.size)

    canary = lambda: "".join(rng.choice("0123456789") for _ in range(6))  # noqa: E731
    trials = [(canary(), canary(), k % 2 == 0) for k in range(400)]
    responses = [lying(target if coin else other) for target, other, coin in trials]
    coins = [coin for _, _, coin in trials]
    new = audit_scores([attack_score(r, t) for r, (t, _, _) in zip(responses, trials)], coins,
                       seed=1)["eps_lower"]
    old = audit_scores([longest_shared(r, t) for r, (t, _, _) in zip(responses, trials)], coins,
                       seed=1)["eps_lower"]
    assert law(old, 0.5) == HOLDS and law(new, 0.5) == VIOLATED
    assert new > 2.0  # 6 of 6 digits on every planted trial, rarely on the others


def test_plant_canaries_recorded_and_seeded():
    docs = [InfluenceExample(f"d{i}", f"Document {i}.", "q", None, "qa") for i in range(3)]
    trials = plant_canaries(docs, 40, seed=7)
    assert trials == plant_canaries(docs, 40, seed=7)
    assert trials != plant_canaries(docs, 40, seed=8)
    assert [t.document_id for t in trials[:4]] == ["d0", "d1", "d2", "d0"]
    assert sum(t.included for t in trials) == 20
    assert sum(t.included for t in plant_canaries(docs, 5, seed=1)) == 3
    for t in trials:
        assert len(t.canary) == 6 and t.canary.isdigit() and t.canary != t.other
        assert t.planted in t.context and (t.other if t.included else t.canary) not in t.context
        assert t.context.endswith(t.document)
    with pytest.raises(ConfigError, match="trials must be >= 2"):
        plant_canaries(docs, 1, seed=0)
    with pytest.raises(ConfigError, match="digits"):
        plant_canaries(docs, 4, seed=0, digits=2)


DOCS = [{"id": f"d{i}", "context": c, "query": "who is it ?"} for i, c in enumerate((
    "the doctor said the news report was one page .",
    "rome is the capital of italy and a city ."))]


def test_canary_audit_on_a_tiny_model(llama_lm, tmp_path):
    result = ctxleak.canary_audit(llama_lm, DOCS, lambda_=1.0, bounded_eps=0.5, trials=6,
                                  max_new_tokens=3, seed=4, output=str(tmp_path / "run"))
    s = result.summary
    assert len(result.records) == 6 and s["n_trials"] == 6
    for r in result.records:  # every response releases max_new_tokens tokens: 3 x 0.5
        assert r["composed_eps"] == pytest.approx(1.5) and r["released_tokens"] == 3
        assert r["score"] == attack_score(r["response"], r["canary"])
        assert r["document_id"] in ("d0", "d1") and r["id"] == f"trial-{r['trial']}"
    assert s["eps_guarantee"] == pytest.approx(1.5) and s["eps_guarantee_ex_ante"] == 1.5
    assert (s["n_in"], s["n_out"]) == (2, 2) and s["law"] in (HOLDS, VIOLATED)
    assert s["law"] == law(s["eps_lower"], s["eps_guarantee"])
    # the trials and coins come from the seed, recorded in the run and read back
    planted = plant_canaries(load_examples(DOCS), 6, seed=4)
    assert [(r["canary"], r["other"], r["included"]) for r in result.records] == [
        (t.canary, t.other, t.included) for t in planted]
    page = (tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    assert "ε lower bound (95 %)" in page and "jagielski2020auditing" in page
    back = ctxleak.load_result(tmp_path / "run")
    assert isinstance(back, CanaryResult) and back.summary["eps_lower"] == s["eps_lower"]
    assert list(result.to_pandas()["score"]) == [r["score"] for r in result.records]
    # unbounded: no guarantee; the lower bound is what the attack demonstrates
    plain = ctxleak.canary_audit(llama_lm, DOCS, trials=4, max_new_tokens=2, seed=4,
                                 output=str(tmp_path / "plain"))
    assert plain.summary["eps_guarantee"] is None and plain.summary["law"] == NO_GUARANTEE
    assert "leak an attacker can demonstrate" in plain.summary["reading"]
    with pytest.raises(ConfigError, match="trials"):
        ctxleak.canary_audit(llama_lm, DOCS, trials=1)


def test_trials_needed():
    # a perfect attack: 11 heads (6 measure) and 10 tails (5 measure) give
    # 0.025^(1/6) = 0.54 > 1 - 0.025^(1/5) = 0.52; 20 trials (5 and 5) do not
    assert trials_needed(1.0, 0.0) == 21
    assert trials_needed(0.5, 0.5) is None
    assert trials_needed(0.6, 0.1) > trials_needed(0.9, 0.0)
    # the fewest, not a count within 2 % of it: no smaller count shows a bound (the criterion,
    # written out here by hand, is not monotone)
    from ctxleak.methods.attacks.lower_bound import eps_lower_bound

    def shows(n: int, tpr: float, fpr: float) -> bool:
        heads, tails = (n + 1) // 2, n // 2
        n_in, n_out = heads - heads // 2, tails - tails // 2
        return eps_lower_bound(round(tpr * n_in), n_in, round(fpr * n_out),
                               n_out)["eps_lower"] > 0

    for tpr, fpr in [(0.85, 0.25), (0.7, 0.3), (0.9, 0.05)]:
        n = trials_needed(tpr, fpr)
        assert shows(n, tpr, fpr) and not any(shows(m, tpr, fpr) for m in range(2, n))


def test_cli_canary(tiny_dir, tmp_path, capsys):
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    out = tmp_path / "run"
    code, stdout, err = run_cli(["canary", "--model", tiny_dir, "--data", str(data),
                                 "--bounded-eps", "0.25", "--trials", "4",
                                 "--max-new-tokens", "2", "--output", str(out)], capsys)
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["command"] == "canary" and results["config"]["trials"] == 4
    assert results["summary"]["eps_guarantee"] == pytest.approx(0.5)
    assert "ε lower bound (95 %)" in stdout and "law" in stdout
    assert "jagielski2020auditing" in results["cite"]["papers"]


def test_cli_frontier_puts_a_canary_audit_beside_its_setting(tiny_dir, tmp_path, capsys):
    """``ctxleak influence frontier RUN --audit CANARY``: the sweep's frontier with the audit's
    ε lower bound on the row of the audited setting; no model is loaded."""
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({**d, "reference": "paris"}) + "\n" for d in DOCS))
    sweep, audit = tmp_path / "sweep", tmp_path / "audit"
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data), "--lambda",
                            "0,1", "--max-new-tokens", "2", "--output", str(sweep)], capsys)
    assert code == 0, err
    code, _, err = run_cli(["canary", "--model", tiny_dir, "--data", str(data), "--trials", "4",
                            "--max-new-tokens", "2", "--output", str(audit)], capsys)
    assert code == 0, err
    bound = ctxleak.load_result(audit).summary["eps_lower"]
    code, stdout, err = run_cli(["--plain", "influence", "frontier", str(sweep), "--audit",
                                 str(audit)], capsys)
    assert code == 0, err
    lines = [line.split("\t") for line in stdout.splitlines() if "\t" in line]
    header, rows = lines[0], {row[0]: row for row in lines[1:]}
    column = header.index("attack ε ≥ (95%)")
    assert float(rows["λ = 1"][column]) == pytest.approx(bound)
    assert rows["λ = 0"][column] in ("", "—", "None")
    code, _, err = run_cli(["influence", "frontier", str(audit)], capsys)  # not a sweep
    assert code != 0 and "not an influence sweep" in err
    code, _, err = run_cli(["influence", "frontier", str(sweep), "--audit", str(sweep)], capsys)
    assert code != 0 and "is not a canary audit" in err


def test_the_lower_bound_on_the_frontier():
    def setting(lam, eps, privacy, f1):
        key = Setting.cid(lam, 0.8, None, eps).key
        return {"setting": key, "lambda": lam, "temperature": 0.8, "bounded_eps": eps,
                "control": {"above_control_per_token": {"mean": privacy}},
                "f1": {"mean": f1}, "composed_eps": {"mean": 16.0} if eps else None}

    settings = [setting(0.0, None, 0.0, 0.1), setting(1.0, None, 0.5, 0.6),
                setting(1.0, 2.0, 0.2, 0.5)]
    audit = CanaryResult(records=[], summary={"setting": settings[2]["setting"],
                                              "eps_lower": 0.7})
    frame = InfluenceResult(records=[], summary={"settings": settings}).frontier(
        audits=[audit])
    assert list(frame["eps_lower"].isna()) == [True, True, False]
    assert frame["eps_lower"].iloc[2] == 0.7 and frame["eps_guarantee"].iloc[2] == 16.0
    rows = frontier_rows(frontier(settings, audits={settings[2]["setting"]: 0.7}))
    assert [r["attack ε ≥ (95%)"] for r in rows] == [None, None, 0.7]
    assert "attack ε ≥ (95%)" not in frontier_rows(frontier(settings))[0]


def test_canary_audit_takes_the_run_options_and_documents_its_keywords():
    run = inspect.signature(ctxleak.canary_audit).parameters["run"]  # **run: Unpack[RunKeywords]
    assert run.kind is inspect.Parameter.VAR_KEYWORD
    for f in fields(RunOptions):
        if f.name != "model":
            assert f"{f.name} : " in ctxleak.canary_audit.__doc__, f.name
    for name in ("lambda_", "bounded_eps", "trials", "threshold", "confidence"):
        assert f"{name} : " in ctxleak.canary_audit.__doc__


def test_cli_frontier_joins_an_audit_on_its_model_length_and_server_too(tiny_dir, tmp_path,
                                                                         capsys):
    """An audit at the setting's λ, T and ε but of another response length is refused naming
    what differs (so is another model or server), two audits of one setting are refused, and a
    ``--keep`` outside (0, 1] is one line naming the flag, not a traceback."""
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({**d, "reference": "paris"}) + "\n" for d in DOCS))
    sweep, audit, other = tmp_path / "sweep", tmp_path / "audit", tmp_path / "other"
    for argv in (["influence", "--lambda", "0,1", "--max-new-tokens", "2", "--output",
                  str(sweep)],
                 ["canary", "--trials", "4", "--max-new-tokens", "2", "--output", str(audit)],
                 ["canary", "--trials", "4", "--max-new-tokens", "3", "--output", str(other)]):
        code, _, err = run_cli([*argv[:1], "--model", tiny_dir, "--data", str(data),
                                *argv[1:]], capsys)
        assert code == 0, err
    code, _, err = run_cli(["influence", "frontier", str(sweep), "--audit", str(other)], capsys)
    assert code != 0 and "another most new tokens (max_new_tokens 3)" in err
    assert "Traceback" not in err
    code, _, err = run_cli(["influence", "frontier", str(sweep), "--audit", str(audit),
                            "--audit", str(audit)], capsys)
    assert code != 0 and "both of the setting" in err
    for keep in ("0", "nan", "2"):
        code, _, err = run_cli(["influence", "frontier", str(sweep), "--keep", keep], capsys)
        assert code != 0 and "--keep must be a share of the best utility in (0, 1]" in err
        assert "Traceback" not in err


def test_trials_are_bounded_and_a_threshold_above_the_canary_is_warned(tiny_dir, tmp_path,
                                                                       capsys):
    """``--trials 100000000`` is refused at once, before any trial is planted or a run folder
    made; a fixed threshold no response can reach is said."""
    from ctxleak.errors import CtxleakWarning
    from ctxleak.methods.attacks.canary_method import MAX_TRIALS, CanaryParams

    with pytest.raises(ConfigError, match="trials must be from 2 to 100,000"):
        CanaryParams(trials=MAX_TRIALS + 1)
    out = tmp_path / "audit"
    code, _, err = run_cli(["canary", "--model", tiny_dir, "--trials", "100000000", "--output",
                            str(out)], capsys)
    assert code != 0 and "--trials must be from 2 to 100,000" in err and not out.exists()
    with pytest.warns(CtxleakWarning, match="above the canary's 6 digits"):
        CanaryParams(threshold=7)
