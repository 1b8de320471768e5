"""One sweep grammar for both mitigations of "Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models" (λ, and bounded CID's ε per token, App. B): ``none`` (plain CID),
``inf`` (no bound: the same), 0 (λ_t = 0, the no-context answer) and numbers in one ε list; the
unmitigated λ = 1 baseline added once where a sweep lacks it, so that every row has its utility
difference; settings paired by value in ``compare``; an audit of no setting refused by the
frontier; the report counting every setting measured."""

from __future__ import annotations

import json
import math

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.comparison import compare_rows, pair_runs
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.influence.setting import eps_list
from ctxleak.results import InfluenceResult
from ctxleak.results.methods import CanaryResult

DOCS = [{"id": "d0", "context": "rome is the capital of italy .", "query": "what is it ?",
         "reference": "rome"},
        {"id": "d1", "context": "berlin is in germany .", "query": "what is it ?",
         "reference": "germany"},
        {"id": "d2", "context": "paris is in france .", "query": "what is it ?",
         "reference": "paris"}]


@pytest.mark.parametrize("value, want", [
    ("none,0,2,8", [None, 0.0, 2.0, 8.0]),
    (" None , 2.5 ", [None, 2.5]),
    ("inf", [None]),                     # an infinite bound bounds nothing: plain CID
    ("8,INF", [8.0, None]),
    ([None, 0, "2"], [None, 0.0, 2.0]),
    (math.inf, [None]),
    (0, [0.0]),
    (None, []),
])
def test_the_eps_grammar(value, want):
    assert eps_list(value) == want


@pytest.mark.parametrize("value, says", [
    ("none,inf", "bounded_eps lists no bound (plain CID) twice ('none' and 'inf')"),
    ("2,2.0", "bounded_eps lists ε = 2 twice ('2' and '2.0')"),
    ("none,-1", "bounded_eps: '-1' is not an ε per token"),
    ("2,abc", "bounded_eps: 'abc' is not an ε per token"),
    ("nan", "bounded_eps: 'nan' is not an ε per token"),
    ([True], "bounded_eps: 'True' is not an ε per token"),
    (",", "bounded_eps needs at least one value"),
])
def test_bad_eps_lists_name_the_value_and_the_parameter(value, says):
    with pytest.raises(ConfigError) as err:
        InfluenceParams(bounded_eps=value)
    assert err.value.param == "bounded_eps" and str(err.value).startswith(says)


def test_none_alone_is_the_plain_run_and_zero_with_several_lambdas_says_they_are_one():
    assert InfluenceParams(bounded_eps="none") == InfluenceParams()
    assert InfluenceParams(bounded_eps="inf").to_config() == InfluenceParams().to_config()
    with pytest.warns(UserWarning, match="bounded_eps 0 forces λ_t = 0 .* 2 λ settings"):
        InfluenceParams(lambda_="0.5,1", bounded_eps="0,2")


def _keys(params):
    return [(s.key, s.added) for s in params.grid()]


def test_the_grid_adds_the_baseline_once_where_the_sweep_lacks_it():
    bounded = _keys(InfluenceParams(lambda_="0,0.5,1", bounded_eps="2,8"))
    assert bounded[0] == ("lambda=1,T=0.8,context=all", True)
    # λ = 0 is the no-context answer under every bound: measured once, at the first ε
    assert [k for k, _ in bounded[1:]] == [
        f"lambda={lam},T=0.8,context=all,eps={e}" for e in (2, 8) for lam in (0, 0.5, 1)
        if lam != 0 or e == 2]
    assert sum(added for _, added in bounded) == 1
    # asked for (plain λ = 1 in the grid): nothing added, the user's order kept; λ = 0 once,
    # without a bound
    mixed = _keys(InfluenceParams(lambda_="0,0.5,1", bounded_eps="none,2,8"))
    assert len(mixed) == 7 and not any(added for _, added in mixed)
    assert [k for k, _ in mixed if k.startswith("lambda=0,")] == ["lambda=0,T=0.8,context=all"]
    assert [k for k, _ in mixed[:3]] == [f"lambda={lam},T=0.8,context=all" for lam in (0, 0.5, 1)]
    # one baseline per temperature and context size
    grid = _keys(InfluenceParams(lambda_=0.5, temperature="0.5,1", context_sizes="4,8"))
    assert [k for k, added in grid if added] == [
        f"lambda=1,T={t},context={k}" for k in (4, 8) for t in (0.5, 1)]
    assert len(grid) == 8
    # nothing mitigated: no baseline to add; one setting: a run of that setting alone
    assert _keys(InfluenceParams(temperature="0.5,1")) == [
        ("lambda=1,T=0.5,context=all", False), ("lambda=1,T=1,context=all", False)]
    assert _keys(InfluenceParams(lambda_=0.5)) == [("lambda=0.5,T=0.8,context=all", False)]
    assert _keys(InfluenceParams(bounded_eps=2)) == [("lambda=1,T=0.8,context=all,eps=2",
                                                      False)]
    # a run's stored config gives its grid back (a resume measures the same settings)
    params = InfluenceParams(lambda_="0,0.5", bounded_eps="none,0,2")
    config = params.to_config()
    assert config["bounded_eps"] == [None, 0.0, 2.0]
    again = InfluenceParams(lambda_=config["lambda"], bounded_eps=config["bounded_eps"])
    assert _keys(again) == _keys(params)


def test_a_mixed_sweep_has_the_baseline_and_a_utility_difference_in_every_row(tiny_dir,
                                                                              tmp_path, capsys):
    data, out = tmp_path / "docs.jsonl", tmp_path / "run"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    code, stdout, err = run_cli(
        ["--plain", "influence", "--model", tiny_dir, "--data", str(data), "--limit", "2",
         "--lambda", "0,0.5", "--bounded-eps", "none,0,2", "--max-new-tokens", "3",
         "--min-new-tokens", "0", "--seed", "3", "--output", str(out)], capsys)
    assert code == 0, err
    result = ctxleak.load_result(str(out))
    settings = result.summary["settings"]
    assert [(s["lambda"], s.get("bounded_eps"), s.get("added_baseline", False))
            for s in settings] == [(1.0, None, True), (0.0, None, False), (0.5, None, False),
                                   (0.5, 0.0, False), (0.5, 2.0, False)]  # λ = 0 once
    rows = result.summary["frontier"]["rows"]
    assert rows[0]["baseline"] and rows[0]["added_baseline"]
    assert rows[0]["label"] == "λ = 1 (added baseline)"
    base = {r["id"]: r["f1"] for r in result.records if r["setting"] == rows[0]["setting"]}
    for row in rows[1:]:  # Δ F1 against the added baseline, paired by example, by hand
        mine = [r for r in result.records if r["setting"] == row["setting"]]
        assert row["difference_pairs"] == 2
        assert row["utility_difference"] == pytest.approx(
            sum(r["f1"] - base[r["id"]] for r in mine) / 2)
    # ε = 0 leaves λ_t = 0 at every token: the no-context answer, whatever λ_max
    by = {(r["lambda"], r.get("eps"), r["id"]): r["response_ids"] for r in result.records}
    for i in ("d0", "d1"):
        assert by[(0.5, 0.0, i)] == by[(0.0, None, i)]
    assert all(lam == 0 for r in result.records if r.get("eps") == 0 for lam in r["lambdas"])
    assert "baseline (added)" in stdout
    # plain and bounded rows under one header: every line of the table has its columns
    table = stdout.split("Expected context influence")[1].splitlines()[1:7]
    assert table[0].startswith("λ\t") and "composed ε" in table[0]
    assert len({len(line.split("\t")) for line in table}) == 1, table
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "5 (1 added: λ = 1 without a bound, the baseline)" in html  # the settings counted


def _records(lam, values, seed_offset=0.0, eps=None):
    key = f"lambda={lam:g},T=0.8,context=all" + ("" if eps is None else f",eps={eps:g}")
    return [{"id": f"e{i}", "key": f"e{i}|{key}", "setting": key, "lambda": lam,
             "temperature": 0.8, "context_limit": None, "eps": eps,
             "influence": v + seed_offset, "response_ids": [1, 2]}
            for i, v in enumerate(values)]


def _run(records, model="tiny"):
    return InfluenceResult(records=records, summary={"settings": []},
                           config={"command": "influence", "model": model, "data": "d.jsonl",
                                   "temperature": [0.8], "seed": 0},
                           provenance={"model": {"name": model}})


def test_compare_pairs_settings_by_value_in_any_order():
    # the same settings listed in another order (and another bound): paired by λ and ε
    a = _run(_records(0.5, [1, 2, 3]) + _records(1.0, [5, 6, 7]) + _records(1.0, [2, 2, 2], eps=2))
    b = _run(_records(1.0, [1, 1, 1], eps=2) + _records(1.0, [4, 4, 4]) + _records(0.5, [0, 0, 0]),
             model="other")
    contrasts, why = pair_runs("influence", [a, b])
    assert why == ""
    assert [c.left.setting == c.right.setting for c in contrasts] == [True] * 3
    diff = {(dict(c.left.setting)["λ"], dict(c.left.setting)["bounded ε"]):
            c.stats[0]["mean difference"] for c in contrasts}
    assert diff == {(0.5, "none"): pytest.approx(2.0), (1.0, "none"): pytest.approx(2.0),
                    (1.0, 2.0): pytest.approx(1.0)}
    # the summary tables too: rows matched by λ, T and ε, not by position
    rows = compare_rows("influence", [
        [{"λ": 0.5, "T": 0.8, "influence": 1.0}, {"λ": 1.0, "T": 0.8, "influence": 2.0}],
        [{"λ": 1.0, "T": 0.8, "influence": 3.0}, {"λ": 0.5, "T": 0.8, "influence": 4.0}]],
        ["a", "b"])
    assert {r["row"]: (r["a"], r["b"]) for r in rows} == {"λ=0.5, T=0.8": (1.0, 4.0),
                                                         "λ=1, T=0.8": (2.0, 3.0)}
    # runs at two temperatures share no row: matched by λ (T is what they differ by), never
    # the first row with the first
    rows = compare_rows("influence", [
        [{"λ": 0.5, "T": 0.8, "influence": 1.0}, {"λ": 1.0, "T": 0.8, "influence": 2.0}],
        [{"λ": 1.0, "T": 1.0, "influence": 3.0}, {"λ": 0.5, "T": 1.0, "influence": 4.0}]],
        ["a", "b"])
    assert {r["row"]: (r["a"], r["b"]) for r in rows} == {
        "λ=0.5, T=0.8 | λ=0.5, T=1": (1.0, 4.0), "λ=1, T=0.8 | λ=1, T=1": (2.0, 3.0)}


def test_settings_in_one_run_only_are_named_not_paired():
    a = _run(_records(0.5, [1, 2, 3]) + _records(1.0, [5, 6, 7]))
    b = _run(_records(1.0, [4, 4, 4]) + _records(0.7, [0, 0, 0]), model="other")
    with pytest.warns(UserWarning, match="settings in one run only, not paired") as caught:
        contrasts, why = pair_runs("influence", [a, b])
    assert [(dict(c.left.setting)["λ"], dict(c.right.setting)["λ"]) for c in contrasts] == [
        (1.0, 1.0)]
    assert "λ = 0.5" in why and "λ = 0.7" in why and "no setting of" in why
    assert why in str(caught[0].message)
    # no setting in common: nothing paired, and both runs' settings named
    c = _run(_records(0.7, [0, 0, 0]) + _records(0.2, [0, 0, 0]), model="other")
    with pytest.warns(UserWarning):
        none, why = pair_runs("influence", [a, c])
    assert none == [] and all(f"λ = {x}" in why for x in ("0.5", "1", "0.7", "0.2"))
    # runs that each hold λ fixed, at different values, differ by it: paired on the rest
    (one,), why = pair_runs("influence", [_run(_records(1.0, [1, 2, 3])),
                                          _run(_records(0.5, [0, 0, 0]))])
    assert why == "" and one.stats[0]["mean difference"] == pytest.approx(2.0)


def _summary(lam, eps=None):
    key = f"lambda={lam:g},T=0.8,context=all" + ("" if eps is None else f",eps={eps:g}")
    return {"setting": key, "lambda": lam, "temperature": 0.8, "bounded_eps": eps,
            "control": {"above_control_per_token": {"mean": 0.1}}, "f1": {"mean": 0.5}}


def test_the_frontier_refuses_an_audit_of_a_setting_it_lacks():
    run = InfluenceResult(records=[], summary={"settings": [_summary(1.0), _summary(0.0)]})
    audit = CanaryResult(records=[], summary={"setting": "lambda=0.5,T=0.8,context=all",
                                              "eps_lower": 0.3})
    with pytest.raises(ConfigError, match="is of the setting lambda=0.5,T=0.8,context=all, "
                                          "which this run did not measure") as err:
        run.frontier_summary(audits=[audit])
    assert err.value.param == "audits" and "lambda=0,T=0.8,context=all" in str(err.value)
    same = CanaryResult(records=[], summary={"setting": "lambda=0,T=0.8,context=all",
                                             "eps_lower": 0.3})
    with pytest.raises(ConfigError, match="both of the setting lambda=0,T=0.8,context=all"):
        run.frontier_summary(audits=[same, same])
    assert [r["eps_lower"] for r in run.frontier_summary(audits=[same])["rows"]] == [None, 0.3]


def test_cli_frontier_names_the_audit_that_matches_no_setting(tiny_dir, tmp_path, capsys):
    data, sweep, audit = tmp_path / "docs.jsonl", tmp_path / "sweep", tmp_path / "audit"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    common = ["--model", tiny_dir, "--data", str(data), "--max-new-tokens", "2"]
    code, _, err = run_cli(["influence", *common, "--limit", "2", "--lambda", "0,1",
                            "--output", str(sweep)], capsys)
    assert code == 0, err
    code, _, err = run_cli(["canary", *common, "--lambda", "0.5", "--trials", "2",
                            "--output", str(audit)], capsys)
    assert code == 0, err
    code, stdout, err = run_cli(["influence", "frontier", str(sweep), "--audit", str(audit)],
                                capsys)
    assert code == 2 and str(audit) in err and "lambda=0.5,T=0.8,context=all" in err
    assert "did not measure" in err and len(err.strip().splitlines()) == 1
    assert "Privacy–utility frontier" not in stdout


def test_the_added_baseline_never_fails_the_exposure_gate():
    asked, added = _summary(0.5), {**_summary(1.0), "added_baseline": True}
    run = InfluenceResult(records=[], summary={"settings": [
        {**added, "over_budget": ["payroll"]}, {**asked, "over_budget": []}]})
    assert run.over_budget() == []
    run.summary["settings"][1]["over_budget"] = ["payroll"]
    assert run.over_budget() == [("lambda=0.5,T=0.8,context=all", "payroll")]
