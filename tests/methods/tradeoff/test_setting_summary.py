"""A setting's summary and the frontier's rows, typed ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models": the frontier of λ and bounded ε against utility):
a summary is read once by attribute, a tiny model's sweep included, with nothing the frontier
reads empty; a key renamed or missing is an error that names it, not an empty column; a row
has every column."""

from __future__ import annotations

import json

import pytest

import ctxleak
from ctxleak.errors import InputError
from ctxleak.methods.influence.metrics import mean_with_ci
from ctxleak.methods.tradeoff.facts import FACT_UTILITIES, fact_groups
from ctxleak.methods.tradeoff.frontier import COLUMNS, frontier
from ctxleak.methods.tradeoff.setting_summary import Guarantee, Measured, SettingSummary

KEYS = ("lambda=0,T=0.8,context=all", "lambda=1,T=0.8,context=all",
        "lambda=1,T=0.8,context=all,eps=2")


def _settings(facts=False):
    """Three settings' summaries as a run writes them: figures with their intervals, a
    control, claims (none for plain CID, bounded CID's per context); with ``facts``, the
    fact groups."""
    out = []
    for i, key in enumerate(KEYS):
        records = [{"fact": "common" if q < 4 else "private", "f1": float(q % 2),
                    "influence_above_control_per_token": 0.1 * (i + q),
                    "influence_per_token": 0.2 * (i + q)} for q in range(8)]
        bounded = key.endswith("eps=2")
        out.append({
            "setting": key, "lambda": 1.0 if i else 0.0, "temperature": 0.8, "n": 8,
            "influence": mean_with_ci([1.0, 2.0]), "rouge_l": mean_with_ci([0.5] * 8),
            "exact_match": mean_with_ci([0.0, 1.0] * 4), "f1": mean_with_ci([0.5 + i / 10] * 8),
            "units": {"influence": "nats"}, **({"bounded_eps": 2.0} if bounded else {}),
            "influence_per_token": mean_with_ci([0.2 * (i + 1)] * 8),
            "control": {"enabled": True, "n": 8, "flagged": ["e1"],
                        "above_control_per_token": mean_with_ci([0.1 * (i + 1)] * 8)},
            **({"fact_groups": fact_groups(records)} if facts else {}),
            **({"composed_eps": mean_with_ci([24.0] * 8)} if bounded else {}),
            "mechanism": None,
            "claim": {"relation": "context" if bounded else "none", "covers": "words",
                      "eps": mean_with_ci([24.0] * 8) if bounded else None,
                      "eps_max": 24.0 if bounded else None, "delta": 0.0},
            "tokens_paid": mean_with_ci([3.0] * 8), "quality": {"bertscore": None}})
    return out


def test_a_summary_is_read_by_attribute():
    bounded = SettingSummary.from_dict(_settings(facts=True)[2])
    assert bounded.measured.f1 is not None and bounded.measured.f1.mean == pytest.approx(0.7)
    above = bounded.measured.above_control_per_token
    assert above is not None and above.mean == pytest.approx(0.3)
    assert bounded.guarantee == Guarantee(24.0, 0.0, "context", 3.0)
    assert bounded.bounded_eps == 2.0 and bounded.fact_groups is not None
    assert bounded.fact_groups.private.n == 4
    # a summary with only what a hand-made test gives, and None values
    bare = SettingSummary.from_dict({"setting": KEYS[0], "f1": None, "added_baseline": True,
                                     "control": {"enabled": False, "reason": "off"}})
    assert bare.measured == Measured() and bare.no_control == "off" and bare.added_baseline
    assert bare.guarantee == Guarantee() and "f1" in bare.keys


def test_what_a_sweep_saves_is_what_the_frontier_reads(llama_lm, tmp_path):
    docs = [{"id": f"d{i}", "context": c, "query": "what is it ?", "reference": r}
            for i, (c, r) in enumerate((("rome is the capital of italy .", "rome"),
                                        ("berlin is in germany .", "germany"),
                                        ("paris is in france .", "paris")))]
    out = tmp_path / "sweep"
    ctxleak.influence(llama_lm, docs, lambda_=1, bounded_eps="none,2", max_new_tokens=3,
                      min_new_tokens=0, progress=False, output=str(out))
    saved = json.loads((out / "results.json").read_text(encoding="utf-8"))["summary"]
    for s in saved["settings"]:
        read = SettingSummary.from_dict(s)
        # what the run writes is what the frontier reads: no field it reads comes back empty
        got = read.measured
        assert None not in (read.lambda_, read.temperature, got.n, got.f1, got.rouge_l,
                            got.exact_match, got.match, got.influence_per_token,
                            got.above_control_per_token, read.guarantee.relation,
                            read.guarantee.tokens_paid)
    assert SettingSummary.from_dict(saved["settings"][1]).guarantee.eps is not None
    again = frontier(saved["settings"])  # old results: recomputed from the saved summaries
    assert [r["privacy"] for r in again["rows"]] == [r["privacy"] for r in saved["frontier"]["rows"]]


def _refused(settings, *words):
    with pytest.raises(InputError) as err:
        frontier(settings)
    for word in words:
        assert word in str(err.value), str(err.value)


def test_a_renamed_utility_is_an_error_naming_it_not_an_empty_column():
    settings = _settings()
    settings[1]["f_1"] = settings[1].pop("f1")
    _refused(settings, "settings[1]", KEYS[1], "'f1'", "renamed? it has 'f_1'")
    nothing = [{k: v for k, v in s.items() if k not in FACT_UTILITIES} for s in _settings()]
    _refused(nothing, "records none of the utilities", "match, exact_match, f1, rouge_l")


def test_a_figure_without_its_mean_is_an_error_naming_where():
    settings = _settings()
    settings[2]["control"]["above_control_per_token"] = {"avg": 0.3, "ci_low": 0.1}
    _refused(settings, "settings[2]", "control.above_control_per_token has no 'mean'", "avg")
    settings = _settings()
    settings[0]["f1"] = [0.5]
    _refused(settings, "settings[0]", ".f1 must be a mapping, got list")


def test_a_renamed_influence_per_token_is_an_error_where_the_frontier_falls_back_to_it():
    settings = _settings()
    settings[0]["control"] = {"enabled": False, "reason": "turned off"}
    settings[0]["influence_per_tok"] = settings[0].pop("influence_per_token")
    _refused(settings, "settings[0]", "'influence_per_token'", "it has 'influence_per_tok'")
    # with every setting's control the frontier does not read it: no error
    settings = _settings()
    settings[0]["influence_per_tok"] = settings[0].pop("influence_per_token")
    assert frontier(settings)["rows"][0]["privacy"] == pytest.approx(0.1)


def test_a_claim_a_fact_group_or_a_setting_missing_its_key_is_an_error():
    settings = _settings()
    settings[2]["claim"]["relations"] = settings[2]["claim"].pop("relation")
    _refused(settings, "settings[2]", "claim has no 'relation'", "it has 'relations'")
    settings = _settings(facts=True)
    settings[1]["fact_groups"]["privates"] = settings[1]["fact_groups"].pop("private")
    _refused(settings, "fact_groups has no 'private'", "it has 'privates'")
    settings = _settings(facts=True)
    settings[1]["fact_groups"]["common"].pop("n")
    _refused(settings, "fact_groups.common has no 'n'")
    settings = _settings()
    settings[0]["key"] = settings[0].pop("setting")
    _refused(settings, "settings[0] has no 'setting'")


def test_a_row_has_every_column():
    front = frontier(_settings())
    assert all(set(row) == set(COLUMNS) for row in front["rows"])
