"""Sweeps over both mitigations of "Estimating Privacy Leakage of Augmented Contextual Knowledge
in Language Models": λ and bounded CID's ε per token, combined, from Python and the CLI. Each
setting of the sweep is the run of that setting alone (the same seeds, the same records)."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.params import InfluenceParams

DOCS = [{"id": f"d{i}", "context": c, "query": "who is it ?"} for i, c in enumerate((
    "the doctor said the news report was one page .",
    "rome is the capital of italy and a city .",
    "berlin is in germany . paris is in france ."))]


def test_the_grid_combines_every_lambda_with_every_eps_and_plain_cid_keeps_its_keys():
    grid = InfluenceParams(lambda_="0.5,1", bounded_eps="2,8").grid()
    assert [s.key for s in grid] == [
        "lambda=1,T=0.8,context=all",  # the baseline the sweep lacks, added first
        "lambda=0.5,T=0.8,context=all,eps=2", "lambda=1,T=0.8,context=all,eps=2",
        "lambda=0.5,T=0.8,context=all,eps=8", "lambda=1,T=0.8,context=all,eps=8"]
    assert [s.key for s in InfluenceParams(lambda_=[0.5, 1]).grid()] == [
        "lambda=0.5,T=0.8,context=all", "lambda=1,T=0.8,context=all"]  # as before sweeps
    assert InfluenceParams(bounded_eps=2).to_config()["bounded_eps"] == 2.0
    assert InfluenceParams(bounded_eps=(2, 8)).to_config()["bounded_eps"] == [2.0, 8.0]


@pytest.mark.parametrize("value, says", [
    ("", "at least one value"), ("2,2", "bounded_eps"), ("-1", "bounded_eps"),
    ("x", "bounded_eps"), (float("nan"), "bounded_eps")])
def test_bad_eps_lists_name_the_parameter(value, says):
    with pytest.raises(ConfigError) as err:
        InfluenceParams(bounded_eps=value)
    assert err.value.param == "bounded_eps" and says in str(err.value)


def test_each_setting_of_a_sweep_equals_its_own_run(llama_lm, tmp_path):
    kw = dict(max_new_tokens=4, min_new_tokens=0, seed=5, progress=False, temperature=1.0)
    swept = ctxleak.influence(llama_lm, DOCS, lambda_=[0.5, 1.5], bounded_eps=[1.0, 4.0],
                              output=str(tmp_path / "sweep"), **kw)
    settings = swept.summary["settings"]
    assert [(s["lambda"], s.get("bounded_eps")) for s in settings] == [
        (1.0, None), (0.5, 1.0), (1.5, 1.0), (0.5, 4.0), (1.5, 4.0)]  # the baseline added
    for lam, eps in ((1.5, 1.0), (0.5, 4.0)):
        alone = ctxleak.influence(llama_lm, DOCS, lambda_=lam, bounded_eps=eps,
                                  output=str(tmp_path / f"alone-{lam}-{eps}"), **kw)
        key = alone.records[0]["setting"]
        assert [r for r in swept.records if r["setting"] == key] == alone.records
        for r in alone.records:  # the guarantee of its own ε: ε per token x tokens
            assert r["eps"] == eps
            assert r["composed_eps"] == pytest.approx(eps * len(r["response_ids"]))
    # a smaller ε bounds every token's λ_t lower: less influence at ε = 1 than at ε = 4
    mean = {(s["lambda"], s.get("bounded_eps")): s["influence"]["mean"] for s in settings}
    assert mean[(1.5, 1.0)] <= mean[(1.5, 4.0)] + 1e-9


def test_cli_takes_an_eps_list(tiny_dir, tmp_path, capsys):
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    out = tmp_path / "run"
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                            "--bounded-eps", "1,4", "--lambda", "1", "--max-new-tokens", "3",
                            "--temperature", "1", "--output", str(out)],
                           capsys)
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert [s.get("bounded_eps") for s in results["summary"]["settings"]] == [None, 1.0, 4.0]
