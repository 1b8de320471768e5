"""A sweep's verdict in lines: the recommendation first (the setting, its utility and leak with
units, what its claim covers), one line per setting (leak above the control in nats per token
with its interval, utility with its interval, the claimed ε), then at most a few caveats; on
hand-made settings, on the console and in the report."""

from __future__ import annotations

from ctxleak.methods.influence.verdict import CAVEATS, run_verdict, setting_verdict
from ctxleak.report import Report
from ctxleak.report.console import print_verdict

# key: (λ, bounded ε, F1 mean, leak mean, flagged, claim)
SWEEP = {
    "lambda=0,T=0.8,context=all": (0.0, None, 0.20, 0.1, 0, None),
    "lambda=0.5,T=0.8,context=all": (0.5, None, 0.56, 0.4, 2, None),
    "lambda=1,T=0.8,context=all": (1.0, None, 0.60, 1.0, 7, {"relation": "none",
                                                             "delta": 0.0, "eps": None}),
    "lambda=1,T=0.8,context=all,eps=2": (1.0, 2.0, 0.50, 0.5, 1,
                                         {"relation": "context", "delta": 0.0,
                                          "eps": {"mean": 24.0}}),
}


def _settings(judged=40):
    out = []
    for key, (lam, eps, f1, leak, flagged, claim) in SWEEP.items():
        s = {"setting": key, "lambda": lam, "temperature": 0.8, "n": judged,
             "influence": {"mean": 5.0},
             "f1": {"mean": f1, "ci_low": f1 - 0.1, "ci_high": f1 + 0.1},
             "control": {"enabled": True, "n": judged, "flagged": [f"e{i}" for i in
                                                                   range(flagged)],
                         "controls": judged, "rule": "influence exceeds every control",
                         "test": {}, "above_control": {"mean": 2.0},
                         "above_control_per_token": {"mean": leak, "ci_low": leak / 2,
                                                     "ci_high": leak * 2}}}
        if eps is not None:
            s["bounded_eps"] = eps
        if claim is not None:
            s["claim"] = claim
        out.append(s)
    return out


def test_the_recommendation_first_then_one_line_per_setting():
    verdict = run_verdict(_settings())
    lines = verdict["text"].split("\n")
    # F1: the best 0.6 (λ = 1); 90 % of it is 0.54: λ = 0.5 (0.56, 93 %) leaks least of those
    assert lines[0] == ("Recommended: λ = 0.5, F1 0.56, 93 % of the best, leak 0.4 nats/token "
                        "above the control; no DP claim.")
    assert lines[1:5] == [
        "- λ = 0: leak 0.1 [0.05, 0.2] nats/token above the control; F1 0.20 [0.1, 0.3]; "
        "no claim; 0 of 40 flagged",
        "- λ = 0.5 (recommended): leak 0.4 [0.2, 0.8] nats/token above the control; F1 0.56 "
        "[0.46, 0.66]; no claim; 2 of 40 flagged",
        "- λ = 1: leak 1 [0.5, 2] nats/token above the control; F1 0.60 [0.5, 0.7]; no claim; "
        "7 of 40 flagged",
        "- λ = 1, ε = 2: leak 0.5 [0.25, 1] nats/token above the control; F1 0.50 [0.4, 0.6]; "
        "ε = 24 per response (context); 1 of 40 flagged"]
    assert len(lines) == 5  # no caveat applies
    assert verdict["rule"] == setting_verdict(_settings()[0])["rule"]
    assert len(verdict["text"].split()) < 150


def test_a_recommended_claim_says_what_it_covers():
    settings = _settings()
    settings[1]["claim"] = {"relation": "shard", "delta": 0.0, "eps": {"mean": 10.0}}
    first = run_verdict(settings)["text"].split("\n")[0]
    assert first.endswith("; its claim: ε = 10 per response, shard-level over the dealt list: "
                          "adding or removing one document shifts every later document's "
                          "shard, so a document-level ε does not follow.")


def test_a_mechanisms_own_loss_follows_its_claim():
    settings = _settings()
    settings[3]["document_loss"] = {"documents": 40, "median": 0.012, "max": 0.09,
                                    "within_claim": 40}
    line = run_verdict(settings)["text"].split("\n")[4]
    assert line.endswith("ε = 24 per response (context), its own loss 0.012 nats per document "
                         "(median, largest 0.09), 40 of 40 within it; 1 of 40 flagged")


def test_none_recommended_names_the_closest_and_the_caveats_stay_few():
    settings = _settings(judged=3)  # too few to flag, and too few questions to recommend
    for s in settings:
        s["document_control"] = {"copying_answers": ["e0", "e1"], "n_leaks": 2, "answers": 2,
                                 "rule": "it copied the document",
                                 "leaks": [{"id": f"e{i}", "document": "d1", "copied": ["x"],
                                            "above": None} for i in range(2)]}
        s["over_budget"] = ["d1"]
        s["fact_groups"] = None
    lines = run_verdict(settings)["text"].split("\n")
    assert lines[0].startswith("No recommendation: utility differences not resolved with 3 "
                               "question(s)")
    assert "Indicative only, on these questions: λ = 0.5 keeps 93 % of the best F1 (F1 0.56 "\
           "vs 0.60) with 0.6 nats per token less leak." in lines[0]
    assert all(" flagged" not in line for line in lines[1:5])  # no flag below the test's n
    caveats = lines[5:]
    assert len(caveats) == CAVEATS
    assert caveats[0] == ("Too few examples to flag any as a leak: 3 with a control, at least "
                          "5 needed; the leak figures are means, not flags.")
    assert caveats[1] == ("Answers copy a document verbatim in λ = 0 (2), λ = 0.5 (2), λ = 1 "
                          "(2), λ = 1, ε = 2 (2): no ε describes a copy.")


def test_console_and_report_show_the_lines(capsys):
    verdict = run_verdict(_settings())
    print_verdict(verdict, plain=True)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Verdict: {verdict['text'].splitlines()[0]}"
    assert out[1].startswith("- λ = 0: leak 0.1")
    page = Report("t", redact=False)
    page.set_verdict(verdict["text"], verdict["rule"])
    html = page.render()
    assert ".verdict-text{font-size:1.08em;white-space:pre-line}" in html
    assert "\n- λ = 0.5 (recommended): leak 0.4" in html


def test_one_setting_keeps_its_sentence():
    one = _settings()[:1]
    assert run_verdict(one) == setting_verdict(one[0])
    assert "\n" not in run_verdict(one)["text"]
