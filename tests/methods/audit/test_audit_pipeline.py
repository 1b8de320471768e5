"""Audit data loading, calibration plan, summaries (paper 001 App. C.3, Tables 4-6)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.audit import (
    TEMPLATE,
    AuditConfig,
    check_template,
    load_private_data,
    one_shot_prompt,
    plan_audit,
    setting_row,
)
from ctxleak.methods.audit.data import PrivateExample
from ctxleak.mitigations.accounting import DPTokenEvent, empirical_epsilon
from ctxleak.report.audit import figure6, table_rows, token_rdp_plot
from ctxleak.report.plots import PNG_SIGNATURE


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


# --- data --------------------------------------------------------------------------------------

def test_demo_data_and_labels():
    sports = load_private_data("demo")
    assert len(sports) == 30 and {e.label for e in sports} == {"Sports"}
    assert all(e.text.strip() and e.line >= 1 for e in sports)
    assert len(load_private_data("demo", label="all")) == 120
    assert {e.label for e in load_private_data("demo", label="World")} == {"World"}


def test_unlabelled_csv_and_renamed_fields(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("body,kind\nfirst text,x\nsecond text,y\n", encoding="utf-8")
    rows = load_private_data(str(csv), text_field="body", label_field="topic")
    assert [r.text for r in rows] == ["first text", "second text"]
    assert all(r.label is None for r in rows) and [r.line for r in rows] == [2, 3]
    labelled = load_private_data(str(csv), text_field="body", label_field="kind", label="y")
    assert [r.text for r in labelled] == ["second text"]
    ints = write(tmp_path / "i.jsonl", ['{"text": "a", "label": 1}', '{"text": "b", "label": 2}'])
    assert [r.text for r in load_private_data(ints, label="2")] == ["b"]
    with pytest.raises(ConfigError, match="label='all' needs"):
        load_private_data(str(csv), text_field="body", label_field="topic", label="all")


@pytest.mark.parametrize("lines, match", [
    (['{"text": "ok", "label": "Sports"}', '{"text": "  ", "label": "Sports"}'],
     r"d.jsonl:2, field 'text': is empty"),
    (['{"text": "ok", "label": "Sports"}', '{"text": "ok", "label": "Spo'],
     r"d.jsonl:2: not valid JSON"),
    (['{"text": "ok", "label": "Sports"}', '{"body": "x", "label": "Sports"}'],
     r"d.jsonl:2, field 'text': missing field"),
    (['{"text": "ok", "label": "Sports"}', '{"text": "x"}'],
     r"d.jsonl:2, field 'label': missing field"),
    (['{"text": 5, "label": "Sports"}'], r"d.jsonl:1, field 'text': must be a string"),
    (['{"text": "ok", "label": "World"}'], r"no example has the label 'Sports'"),
    (['[1, 2]'], r"d.jsonl:1: each line must be a JSON object"),
])
def test_bad_data_names_file_line_field(tmp_path, lines, match):
    path = write(tmp_path / "d.jsonl", lines)
    with pytest.raises(InputError, match=match):
        load_private_data(path)


def test_templates():
    assert check_template("Write like this: {text}\n{label}:") and check_template(TEMPLATE)
    with pytest.raises(ConfigError, match="{text}"):
        check_template("no slot {label}")
    with pytest.raises(ConfigError, match="{query}"):
        check_template("{text} {query}")


def test_one_shot_prompt_holds_the_example_and_fits_the_window(llama_lm):
    ex = PrivateExample("the capital of france is paris", "yes", "f", 1)
    prompt, cut = one_shot_prompt(llama_lm, ex, template="document : {text} . {label} :")
    assert cut == 0 and prompt.slot("text") == tuple(llama_lm.encode(ex.text))
    assert prompt.slot("label") == tuple(llama_lm.encode("Sports"))  # the fixed label
    prompt, _ = one_shot_prompt(llama_lm, ex, label="all", template="{text} {label}")
    assert prompt.slot("label") == tuple(llama_lm.encode("yes"))  # 'all': its own label
    long = PrivateExample(" ".join(["paris"] * 400), None, "f", 7)
    with pytest.warns(UserWarning, match="f:7"):
        prompt, cut = one_shot_prompt(llama_lm, long, template="{text} :", reserve=10)
    assert len(prompt) + 10 == llama_lm.max_length and cut > 0


# --- calibration and summaries -----------------------------------------------------------------

def test_plan_reproduces_table_4_temperatures():
    config = AuditConfig(target_eps=(1, 5, 10), deltas=(1e-5, 1e-6), subset_size=50, clip=10,
                         n_gen=50, max_tokens=40)
    plan = plan_audit(config)
    first = plan[:3]
    assert [round(s.calibration.temperature, 2) for s in first] == [36.18, 8.53, 4.80]
    assert [s.calibration.alpha for s in first] == [18, 5, 3]
    assert [s.delta for s in plan] == [1e-5] * 3 + [1e-6] * 3
    assert len({s.key for s in plan}) == 6
    by_size = plan_audit(AuditConfig(target_eps=(5, 10, 50), search="subset_size", clip=10,
                                     temperature=2, n_gen=50, max_tokens=40))
    assert [s.subset_size for s in by_size] == [214, 121, 36]


def fake_records(setting, rdps):
    return [{"setting": setting.key, "delta": setting.delta,
             "target_eps": setting.target_eps, "token_rdp": list(r)} for r in rdps]


@settings(max_examples=examples(50), deadline=None)
@given(rdps=st.lists(st.lists(st.floats(0, 0.05), min_size=0, max_size=6), min_size=1,
                     max_size=4))
def test_summary_sums_all_tokens_and_converts(rdps):
    setting = plan_audit(AuditConfig(target_eps=(10,), n_gen=4, max_tokens=6))[0]
    row = setting_row(setting, fake_records(setting, rdps), 4, 6)
    total = sum(sum(r) for r in rdps)
    cal = setting.calibration
    assert row["rdp_total"] == pytest.approx(total)
    assert row["eps_empirical"] == pytest.approx(empirical_epsilon(total, cal.alpha, 1e-5))
    assert row["ratio"] == pytest.approx(row["eps_empirical"] / 10)
    zero = empirical_epsilon(0.0, cal.alpha, 1e-5)
    assert row["eps_empirical_zero_loss"] == pytest.approx(zero)
    assert zero <= row["eps_empirical"] + 1e-12
    assert row["tokens"] == sum(len(r) for r in rdps)
    assert row["sequences"] == len(rdps) and row["complete"] == (len(rdps) >= 4)
    bigger = setting_row(setting, fake_records(setting, rdps + [[0.5]]), 4, 6)
    assert bigger["eps_empirical"] >= row["eps_empirical"]


def test_summary_reports_losses_over_the_paper_bound_unclamped():
    setting = plan_audit(AuditConfig(target_eps=(5,), n_gen=2, max_tokens=3))[0]
    cal = setting.calibration
    event = DPTokenEvent(cal.clip, cal.subset_size, cal.temperature)
    paper = event.rdp(np.array([cal.alpha]))[0]
    records = fake_records(setting, [[paper * 3, 0.0], [paper / 2]])
    row = setting_row(setting, records, 2, 3)
    assert row["tokens_over_paper_bound"] == 1
    assert row["token_rdp_max"] == pytest.approx(paper * 3)  # not clamped
    assert row["paper_token_bound"] == pytest.approx(paper)
    assert row["sure_token_bound"] > row["paper_token_bound"]
    empty = setting_row(setting, [], 2, 3)
    assert math.isnan(empty["eps_empirical"]) and empty["sequences"] == 0


def test_table_rows_and_plots():
    config = AuditConfig(target_eps=(1, 100), deltas=(1e-5, 1e-6), n_gen=1, max_tokens=2)
    plan = plan_audit(config)
    records = [r for s in plan for r in fake_records(s, [[0.01, 0.02]])]
    rows = [setting_row(s, records, 1, 2) for s in plan]
    headers, cells = table_rows(rows, "temperature")
    assert headers[:7] == ["δ", "ε_target", "Temperature", "α*", "ε_theoretical",
                           "ε_empirical", "Ratio"]
    assert len(cells) == 4 and cells[0][0] == "1e-05" and cells[2][0] == "1e-06"
    assert figure6(rows).startswith(PNG_SIGNATURE)
    assert token_rdp_plot(records, rows).startswith(PNG_SIGNATURE)


# --- library end to end ------------------------------------------------------------------------

def test_audit_api_on_tiny_model_is_seeded(llama_lm, tmp_path):
    import ctxleak

    rows = [{"text": t, "label": "yes"} for t in
            ["the capital of france is paris", "rome is in italy", "the doctor said no",
             "berlin is the capital of germany", "one two three", "the news report said yes"]]
    kw = dict(target_eps=[2, 50], delta=1e-5, subset_size=3, n_gen=2, max_tokens=5,
              label="yes", template="document : {text} . {label} :", seed=3, progress=False)
    a = ctxleak.audit(llama_lm, rows, output=str(tmp_path / "a"), **kw)
    b = ctxleak.audit(llama_lm, rows, output=str(tmp_path / "b"), **kw)
    assert [r["token_ids"] for r in a.records] == [r["token_ids"] for r in b.records]
    assert json.dumps(a.summary["rows"]) == json.dumps(b.summary["rows"])
    assert len(a.records) == 4 and [r["target_eps"] for r in a.summary["rows"]] == [2, 50]
    # the same sequence index draws the same private subset for every target
    assert a.records[0]["subset_lines"] == a.records[2]["subset_lines"]
    assert all(len(set(r["subset_lines"])) == 3 for r in a.records)
    assert all(r["ratio"] > 0 for r in a.summary["rows"])
    # rows in memory are numbered from 1 like file lines
    assert set(a.records[0]["subset_lines"]) <= set(range(1, 7))


def test_min_tokens_keeps_sequences_long_and_names_the_output_set(llama_lm, tmp_path):
    """min_tokens (paper 001, App. C.1 mechanism): no sequence ends before it, and the
    accounting rows say which output set the sampler and the per-token divergences share."""
    import ctxleak

    rows = [{"text": t, "label": "yes"} for t in
            ["the capital of france is paris", "rome is in italy", "the doctor said no",
             "berlin is the capital of germany"]]
    kw = dict(label="yes", template="document : {text} . {label} :", delta=1e-5,
              subset_size=3, seed=0, progress=False)
    res = ctxleak.audit(llama_lm, rows, target_eps=[200], n_gen=6, max_tokens=5, min_tokens=5,
                        clip=0.5, output=str(tmp_path / "a"), **kw)
    assert all(len(r["token_ids"]) == 5 and not r["stopped_on_eos"] for r in res.records)
    (row,) = res.summary["rows"]
    assert row["min_tokens"] == 5 and "without EOS for the first 5 tokens" in row["output_set"]
    assert "same set" in row["output_set"]
    plain = ctxleak.audit(llama_lm, rows, target_eps=[200], n_gen=1, max_tokens=2,
                          output=str(tmp_path / "b"), **kw)
    assert plain.summary["rows"][0]["output_set"] == "full vocabulary at every step"
