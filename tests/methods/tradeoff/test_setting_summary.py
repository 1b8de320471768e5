"""A setting's summary and the frontier's rows, typed ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models": the frontier of λ and bounded ε against utility):
a summary read once is the same plain data written back, byte for byte, a tiny model's sweep
included; a key renamed or missing is an error that names it, not an empty column; a row read
back from plain data is the row."""

from __future__ import annotations

import json

import pytest

import ctxleak
from ctxleak.errors import InputError
from ctxleak.methods.influence.metrics import mean_with_ci
from ctxleak.methods.tradeoff.facts import FACT_UTILITIES, fact_groups
from ctxleak.methods.tradeoff.frontier import (
    ALL_UTILITIES,
    COLUMNS,
    closest,
    frontier,
    mark_pareto,
    pareto_flags,
)
from ctxleak.methods.tradeoff.rows import FrontierRow
from ctxleak.methods.tradeoff.setting_summary import Estimate, SettingSummary

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


def test_a_summary_read_and_written_back_is_the_same_bytes():
    for s in _settings(facts=True):
        read = SettingSummary.from_dict(s)
        assert read.to_dict() == s
        assert json.dumps(read.to_dict()) == json.dumps(s)  # the keys in their order too
    # read by attribute
    bounded = SettingSummary.from_dict(_settings(facts=True)[2])
    assert bounded.f1 is not None and bounded.f1.mean == pytest.approx(0.7)
    assert bounded.above_control is not None and bounded.above_control.mean == pytest.approx(0.3)
    assert bounded.claim is not None and bounded.claim.relation == "context"
    assert bounded.bounded_eps == 2.0 and bounded.fact_groups is not None
    assert bounded.fact_groups.private.n == 4
    # a summary with only what a hand-made test gives, and None values, stays as it is
    bare = {"setting": KEYS[0], "f1": None, "control": {"enabled": False, "reason": "off"},
            "composed_eps": None, "added_baseline": True}
    assert SettingSummary.from_dict(bare).to_dict() == bare
    assert list(SettingSummary.from_dict(bare).to_dict()) == list(bare)


def test_a_summary_built_directly_writes_only_what_it_holds():
    built = SettingSummary(setting=KEYS[1], lambda_=1.0, f1=Estimate(0.5, 0.4, 0.6))
    assert built.to_dict() == {"setting": KEYS[1], "lambda": 1.0,
                               "f1": {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6}}
    assert SettingSummary.from_dict(built.to_dict()) == built


def test_a_sweep_s_summaries_read_back_byte_for_byte_from_results_json(llama_lm, tmp_path):
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
        assert json.dumps(read.to_dict()) == json.dumps(s)
        # what the run writes is what the frontier reads: no field it reads comes back empty
        assert None not in (read.lambda_, read.temperature, read.n, read.f1, read.rouge_l,
                            read.exact_match, read.match, read.influence_per_token,
                            read.above_control, read.claim, read.tokens_paid)
    assert SettingSummary.from_dict(saved["settings"][1]).composed_eps is not None
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


def test_a_row_read_back_from_plain_data_is_the_row():
    front = frontier(_settings())
    assert [k for k, _ in ALL_UTILITIES] == list(FACT_UTILITIES)
    for i, row in enumerate(front["rows"]):
        assert set(row) == set(COLUMNS)
        typed = FrontierRow.from_dict(row, f"rows[{i}]")
        assert typed.to_dict() == row and list(typed.to_dict()) == list(row)
        assert typed.privacy.mean == row["privacy"] and typed.guarantee.eps == \
            row["eps_guarantee"]
    assert closest(front["rows"]) == closest([FrontierRow.from_dict(r) for r in front["rows"]])
    gone = dict(front["rows"][1])
    del gone["utility_kept"]
    with pytest.raises(InputError, match=r"rows\[1\] has no 'utility_kept'"):
        closest([front["rows"][0], gone])


def test_the_pareto_flags_of_points_are_those_marked_on_rows():
    points = [(1.0, 0.5), (1.0, 0.5), (1.0, 0.4), None, (-0.5, 0.1)]
    rows = [{"privacy": None, "utility": 0.9} if p is None else
            {"privacy": p[0], "utility": p[1]} for p in points]
    mark_pareto(rows)
    assert pareto_flags(points) == [r["pareto"] for r in rows] == [True, True, False, None, True]
