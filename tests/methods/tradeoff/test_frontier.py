"""The privacy–utility frontier of an influence sweep ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models": lowering λ or bounding ε per token, and what each
costs in utility): rows per setting, the Pareto front, the paired utility difference to λ = 1
and the recommendation, on hand-made settings; then from a tiny model's sweep, in the summary,
as a frame, on the console and in the HTML report."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.metrics import mean_with_ci
from ctxleak.methods.influence.summary import fact_groups
from ctxleak.methods.tradeoff.frontier import (
    ABOVE_CONTROL,
    PER_TOKEN,
    frontier,
    pareto_flags,
    setting_labels,
)
from ctxleak.methods.tradeoff.setting_summary import read_summaries
from ctxleak.report import Report, plots
from ctxleak.report.frontier import (
    compact_rows,
    frontier_plots,
    frontier_rows,
    frontier_section,
    notes,
)

IDS = [f"e{i}" for i in range(10)]
# per-example F1 of each setting; the λ = 1 baseline answers e0-e5
F1 = {"lambda=0,T=0.8,context=all": [1, 1] + [0] * 8,                       # 0.2, Δ -0.4
      "lambda=0.5,T=0.8,context=all": [1] * 5 + [0.6] + [0] * 4,            # 0.56, Δ -0.04
      "lambda=1,T=0.8,context=all": [1] * 6 + [0] * 4,                      # 0.6
      "lambda=1,T=0.8,context=all,eps=2": [1] * 5 + [0] * 5}                # 0.5, Δ -0.1
PRIVACY = {"lambda=0,T=0.8,context=all": 0.1, "lambda=0.5,T=0.8,context=all": 0.4,
           "lambda=1,T=0.8,context=all": 1.0, "lambda=1,T=0.8,context=all,eps=2": 0.5}


def _setting(key, privacy=None, control=True):
    lam = float(key.split(",")[0].split("=")[1])
    eps = 2.0 if key.endswith("eps=2") else None
    f1 = F1[key]
    s = {"setting": key, "lambda": lam, "temperature": 0.8, "f1": mean_with_ci(f1),
         "rouge_l": mean_with_ci([0.5] * 10),
         "influence_per_token": {"mean": 2 * PRIVACY[key], "ci_low": None, "ci_high": None},
         "control": {"enabled": True, "above_control_per_token": {
             "mean": PRIVACY[key] if privacy is None else privacy, "ci_low": 0.0,
             "ci_high": 2.0}} if control else {"enabled": False, "reason": "turned off"}}
    if eps is not None:
        s["bounded_eps"], s["composed_eps"] = eps, {"mean": 24.0}
    return s


def _records():
    return [{"id": i, "setting": key, "f1": v} for key, values in F1.items()
            for i, v in zip(IDS, values)]


def test_rows_pareto_differences_and_the_recommendation_by_hand():
    front = frontier([_setting(k) for k in F1], _records())
    rows = {r["setting"]: r for r in front["rows"]}
    assert front["privacy"] == ABOVE_CONTROL and front["privacy_note"] is None
    assert front["utility"] == "F1" and front["keep"] == 0.9
    assert [r["label"] for r in front["rows"]] == ["λ = 0", "λ = 0.5", "λ = 1", "λ = 1, ε = 2"]
    # λ = 1, ε = 2 is beaten by λ = 0.5 on both: less privacy loss (0.4 < 0.5), more F1
    assert [r["pareto"] for r in front["rows"]] == [True, True, True, False]
    base = rows["lambda=1,T=0.8,context=all"]
    assert base["baseline"] and base["utility_difference"] is None
    for key, diff in (("lambda=0,T=0.8,context=all", -0.4),
                      ("lambda=0.5,T=0.8,context=all", -0.04),
                      ("lambda=1,T=0.8,context=all,eps=2", -0.1)):
        assert rows[key]["utility_difference"] == pytest.approx(diff)
        assert rows[key]["difference_pairs"] == 10
        low, high = rows[key]["difference_ci_low"], rows[key]["difference_ci_high"]
        assert low <= diff <= high and high <= 0
    assert rows["lambda=1,T=0.8,context=all,eps=2"]["eps_guarantee"] == 24.0
    assert rows["lambda=0,T=0.8,context=all"]["eps_guarantee"] is None
    assert rows["lambda=0.5,T=0.8,context=all"]["utility_kept"] == pytest.approx(0.56 / 0.6)
    # 90 % of the best F1 (0.6) is 0.54: λ = 0.5 (0.56) is the Pareto point with least loss
    assert front["recommended"] == "lambda=0.5,T=0.8,context=all"
    assert front["recommendation"].startswith(
        "λ = 0.5 keeps 93 % of the best F1 at 40 % of its influence above control per token "
        "(λ = 1: F1 0.6")


def test_none_keeps_enough_and_the_sentence_says_so():
    front = frontier([_setting(k) for k in F1], _records(), keep=0.95)  # 0.57 > 0.56
    assert front["recommended"] == "lambda=1,T=0.8,context=all"
    # the closest: of the settings leaking less than λ = 1 (1.0), the most F1 is λ = 0.5's:
    # 0.56 / 0.6 = 93 %, with 1.0 − 0.4 = 0.6 nats per token less leak
    assert front["recommendation"] == (
        "No setting with less influence above control per token keeps 95 % of the best F1 "
        "(λ = 1: F1 0.6, influence above control per token 1 nats per token). Closest: "
        "λ = 0.5 keeps 93 % of the best F1 (F1 0.56 vs 0.60) with 0.6 nats per token less "
        "leak.")
    for bad in (0, float("nan"), 2, -1):
        with pytest.raises(ConfigError, match=r"keep must be a share .* in \(0, 1\]") as err:
            frontier([_setting(k) for k in F1], keep=bad)
        assert err.value.param == "keep"


def test_without_a_control_privacy_falls_back_to_influence_per_token_and_says_so():
    settings = [_setting(k) for k in F1]
    settings[1] = _setting("lambda=0.5,T=0.8,context=all", control=False)
    front = frontier(settings)  # no records: no differences
    assert front["privacy"] == PER_TOKEN
    assert "1 of 4 setting(s) have no control (turned off)" in front["privacy_note"]
    assert [r["privacy"] for r in front["rows"]] == [0.2, 0.8, 2.0, 1.0]
    assert front["rows"][0]["utility_difference"] is None
    assert front["rows"][0]["difference_reason"].startswith("no λ = 1 setting")


def test_without_references_there_is_no_utility_and_no_recommendation():
    settings = [_setting(k) for k in F1]
    for s in settings:
        s["f1"] = s["rouge_l"] = None
    front = frontier(settings, _records())
    assert front["utility"] is None and front["recommended"] is None
    assert all(r["pareto"] is None and r["utility"] is None for r in front["rows"])
    assert front["recommendation"].startswith("No recommendation: no example has a reference")
    assert frontier_plots(front) == {}


def test_rouge_l_where_no_reference_gives_f1():
    settings = [_setting(k) for k in F1]
    for s in settings:
        s["f1"] = None
    front = frontier(settings)
    assert front["utility"] == "ROUGE-L"
    assert front["rows"][0]["utility"] == pytest.approx(0.5)
    # equal utility everywhere: only the least privacy loss is on the front
    assert [r["pareto"] for r in front["rows"]] == [True, False, False, False]
    assert front["recommended"] == "lambda=0,T=0.8,context=all"


def test_pareto_with_ties_and_missing_figures():
    points = [(1.0, 0.5), (1.0, 0.5), (1.0, 0.4), None, (-0.5, 0.1)]
    assert pareto_flags(points) == [True, True, False, None, True]


def test_labels_name_what_varies():
    settings = [{"setting": "lambda=1,T=0.5,context=16", "lambda": 1.0, "temperature": 0.5},
                {"setting": "lambda=1,T=1,context=all,eps=8", "lambda": 1.0,
                 "temperature": 1.0, "bounded_eps": 8.0}]
    assert setting_labels(read_summaries(settings)) == ["λ = 1, T = 0.5, context = 16",
                                        "λ = 1, ε = 8, T = 1, context = all"]


def test_display_rows_and_the_plot_title_says_ci_only_with_bars(monkeypatch):
    front = frontier([_setting(k) for k in F1], _records())
    shown = frontier_rows(front)
    assert shown[2]["Δ F1 vs λ = 1"] == "baseline" and shown[3]["Pareto"] == "no"
    assert shown[1]["kept"] == "93 %" and shown[3]["ε/response"] == 24.0
    assert set(frontier_plots(front)) == {"frontier.png"}
    drawn = []
    monkeypatch.setattr(plots, "frontier_plot", lambda points, **kw: drawn.append(
        (points, kw["title"])) or b"")
    frontier_plots(front)
    bare = frontier([{**_setting(k), "f1": {"mean": 0.5}, "control": {
        "above_control_per_token": {"mean": 1.0}}} for k in F1])
    frontier_plots(bare)
    (points, title), (bare_points, bare_title) = drawn
    assert "95% bootstrap CI" in title and points[0]["y_low"] is not None
    assert "CI" not in bare_title and all(p["x_low"] is None and p["y_low"] is None
                                          for p in bare_points)
    assert [p["marked"] for p in points] == [True, True, True, False]


DOCS = [{"id": f"d{i}", "context": c, "query": "what is it ?", "reference": r}
        for i, (c, r) in enumerate((
            ("rome is the capital of italy .", "rome"),
            ("berlin is in germany .", "germany"),
            ("the doctor said one page .", "doctor"),
            ("paris is in france .", "paris"),
            ("the news report was one page .", "news")))]


def test_a_sweep_has_its_frontier_in_the_summary_frame_console_and_report(llama_lm, tmp_path,
                                                                          capsys):
    out = tmp_path / "sweep"
    result = ctxleak.influence(llama_lm, DOCS, lambda_=[0, 1], max_new_tokens=4,
                               min_new_tokens=0, progress=False, output=str(out))
    front = result.summary["frontier"]
    settings = result.summary["settings"]
    assert [r["setting"] for r in front["rows"]] == [s["setting"] for s in settings]
    for row, s in zip(front["rows"], settings):
        assert row["privacy"] == s["control"]["above_control_per_token"]["mean"]
        assert row["utility"] == s["f1"]["mean"]
    zero = front["rows"][0]
    pairs = {r["id"]: r["f1"] for r in result.records if r["lambda"] == 1.0}
    want = sum(r["f1"] - pairs[r["id"]] for r in result.records if r["lambda"] == 0.0) / 5
    assert zero["utility_difference"] == pytest.approx(want) and zero["difference_pairs"] == 5
    frame = result.frontier()
    assert list(frame["setting"]) == [s["setting"] for s in settings]
    assert frame.attrs["recommendation"] == front["recommendation"]
    assert (out / "frontier.png").is_file()
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "the privacy–utility frontier" in html and "Recommendation:" in html
    capsys.readouterr()
    ctxleak.load_result(str(out)).show(plain=True)
    shown = capsys.readouterr().out
    assert "Privacy–utility frontier" in shown and f"Recommendation: {front['recommendation']}" \
        in shown
    single = ctxleak.influence(llama_lm, DOCS, max_new_tokens=4, min_new_tokens=0,
                               progress=False, output=str(tmp_path / "one"))
    assert "frontier" not in single.summary and len(single.frontier()) == 1


def test_a_stored_frontier_out_of_range_is_named():
    from ctxleak.methods.influence.checks import CHECKS

    front = frontier([_setting(k) for k in F1], _records())
    assert CHECKS.summary_problem({"frontier": front}) is None
    front["rows"][1]["utility"] = 1.5
    problem = CHECKS.summary_problem({"frontier": front})
    assert problem == ("summary.frontier.rows[1].utility",
                       "must be in [0, 1] (a probability), got 1.5")
    front["rows"][1]["utility"] = 0.5
    front["rows"][0]["utility_difference"] = -1.2
    assert "utility_difference" in str(CHECKS.summary_problem({"frontier": front}))


def test_the_cli_prints_the_frontier_of_a_bounded_eps_sweep(tiny_dir, tmp_path, capsys):
    data, out = tmp_path / "docs.jsonl", tmp_path / "run"
    with data.open("w", encoding="utf-8") as file:
        for row in DOCS:
            file.write(json.dumps(row) + "\n")
    flags = {"--model": tiny_dir, "--data": str(data), "--lambda": "1", "--bounded-eps": "1,4",
             "--max-new-tokens": "3", "--min-new-tokens": "0", "--output": str(out)}
    code, stdout, err = run_cli(["influence", *(x for kv in flags.items() for x in kv)], capsys)
    assert code == 0, err
    summary = json.loads((out / "results.json").read_text())["summary"]
    front = summary["frontier"]
    assert [r["eps_guarantee"] for r in front["rows"]] == [
        (s.get("composed_eps") or {}).get("mean") for s in summary["settings"]]
    assert front["rows"][0]["eps_guarantee"] is None  # plain CID guarantees nothing
    # the unmitigated baseline the sweep lacked is added, so every bounded row has its Δ F1
    assert [r["label"] for r in front["rows"]] == ["λ = 1 (added baseline)", "λ = 1, ε = 1",
                                                   "λ = 1, ε = 4"]
    assert [r["added_baseline"] for r in front["rows"]] == [True, False, False]
    assert all(r["difference_pairs"] == len(DOCS) and r["utility_difference"] is not None
               for r in front["rows"][1:])
    assert "baseline (added)" in stdout
    assert "Privacy–utility frontier" in stdout and "ε/response" in stdout
    assert f"Recommendation: {front['recommendation']}" in stdout


def test_closest_names_none_where_no_setting_leaks_less_than_the_best():
    settings = [_setting(k) for k in F1]
    for s in settings:  # λ = 1 now leaks least and answers best: nothing comes closer
        s["control"]["above_control_per_token"]["mean"] = \
            0.05 if s["setting"] == "lambda=1,T=0.8,context=all" else 0.9
    front = frontier(settings, _records(), keep=0.95)
    assert front["recommended"] == "lambda=1,T=0.8,context=all"
    assert "Closest" not in front["recommendation"]


# --------------------------------------------------------------------------- fact groups
# 2 common-fact questions (c0, c1) and 3 private-fact ones (p0-p2) per setting, and one with no
# group (n0): F1 and leak per question, by hand
FACT_ROWS = {
    "lambda=0,T=0.8,context=all": {"c0": (1.0, 0.9), "c1": (0.0, 0.9), "p0": (0.0, 0.1),
                                   "p1": (0.0, 0.2), "p2": (0.0, 0.3), "n0": (1.0, 5.0)},
    "lambda=1,T=0.8,context=all": {"c0": (1.0, 0.0), "c1": (1.0, 0.0), "p0": (1.0, 1.0),
                                   "p1": (1.0, 2.0), "p2": (1.0, 3.0), "n0": (0.0, 5.0)},
}


def _fact_records():
    return [{"id": q, "setting": key, "fact": {"c": "common", "p": "private"}.get(q[0]),
             "f1": f1, "influence_above_control_per_token": leak,
             "influence_per_token": leak + 1}
            for key, rows in FACT_ROWS.items() for q, (f1, leak) in rows.items()]


def _fact_settings():
    """The settings' summaries over all 6 questions, as before fact groups."""
    out = []
    for key, rows in FACT_ROWS.items():
        f1 = [v[0] for v in rows.values()]
        leak = [v[1] for v in rows.values()]
        out.append({"setting": key, "lambda": float(key.split(",")[0][7:]), "temperature": 0.8,
                    "n": len(rows), "f1": mean_with_ci(f1),
                    "influence_per_token": mean_with_ci([x + 1 for x in leak]),
                    "control": {"enabled": True,
                                "above_control_per_token": mean_with_ci(leak)}})
    return out


@pytest.mark.parametrize("where", ["records", "summaries"])
def test_fact_groups_read_utility_on_common_and_leak_on_private_questions(where):
    settings, records = _fact_settings(), _fact_records()
    if where == "summaries":  # the summary's fact_groups, computed where the summary is built
        for s in settings:
            s["fact_groups"] = fact_groups([r for r in records if r["setting"] == s["setting"]])
    front = frontier(settings, records if where == "records" else None, min_questions=2)
    zero, one = front["rows"]
    # utility: F1 on c0, c1 only; leak: above the control on p0-p2 only (n0 in neither)
    assert zero["utility"] == pytest.approx(0.5) and one["utility"] == pytest.approx(1.0)
    assert zero["privacy"] == pytest.approx(0.2) and one["privacy"] == pytest.approx(2.0)
    assert front["facts"] == {"common": 2, "private": 3} and front["questions"] == 2
    assert front["fact_note"] == ("utility on the 2 common-fact questions, leak on the 3 "
                                  "private-fact questions")
    if where == "records":  # the paired difference to λ = 1 pairs c0 and c1 only
        assert zero["utility_difference"] == pytest.approx(-0.5)
        assert zero["difference_pairs"] == 2
    assert any(line == f"Fact groups: {front['fact_note']}." for line in notes(front))


def test_without_both_fact_groups_nothing_changes():
    settings = _fact_settings()
    records = [{**r, "fact": None if r["fact"] == "private" else r["fact"]}
               for r in _fact_records()]  # common only: no split
    front = frontier(settings, records, min_questions=2)
    plain = frontier(_fact_settings(), [{k: v for k, v in r.items() if k != "fact"}
                                        for r in _fact_records()], min_questions=2)
    assert front["facts"] is None and front["fact_note"] is None
    assert [r["utility"] for r in front["rows"]] == [r["utility"] for r in plain["rows"]] \
        == [pytest.approx(2 / 6), pytest.approx(5 / 6)]  # all 6 questions
    assert [r["privacy"] for r in front["rows"]] == [r["privacy"] for r in plain["rows"]]
    assert fact_groups(records) is None


def test_answer_match_is_the_utility_where_the_records_have_it():
    settings = [_setting(k) for k in F1]
    for s in settings:  # answer match: 1 where λ ≥ 0.5 answers, 0 at λ = 0
        s["match"] = mean_with_ci([0.0 if s["lambda"] == 0 else 1.0] * 10)
    front = frontier(settings, [{**r, "match": 0.0 if r["setting"].startswith("lambda=0,")
                                 else 1.0} for r in _records()])
    assert front["utility"] == "answer match" and front["utility_key"] == "match"
    assert [r["utility"] for r in front["rows"]] == [0.0, 1.0, 1.0, 1.0]
    assert front["rows"][0]["match_difference"] == pytest.approx(-1.0)
    assert front["rows"][0]["f1"] == pytest.approx(0.2)  # F1 still shown beside it
    assert front["recommended"] == "lambda=0.5,T=0.8,context=all"
    assert frontier_rows(front)[0]["F1"] == pytest.approx(0.2)


def test_the_report_shows_six_columns_open_and_every_column_folded():
    front = frontier([_setting(k) for k in F1], _records())
    shown = compact_rows(front)
    assert list(shown[1]) == ["setting", "leak above control, nats/token", "F1",
                              "claim ε/response", "Pareto", "recommended"]
    assert shown[1]["recommended"] == "yes" and shown[1]["F1"].startswith("0.56 [")
    assert shown[3]["claim ε/response"] == "24 (context)" and shown[0]["claim ε/response"] == "—"
    page = Report("t", redact=False)
    frontier_section(page, front)
    html = page.render()
    assert html.count("<table") == 2 and html.count('<details class="table">') == 1
    folded = html[html.index('<details class="table">'):]
    assert "Δ F1 vs λ = 1" in folded and "Δ F1 vs λ = 1" not in html[:html.index(
        '<details class="table">')]
    assert "details.table:not([open])>.tablewrap{display:none}" in html
